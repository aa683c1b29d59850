package k8s

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// The spire node's kubeconfig: the operator's cluster (its CA embedded, since the CA
// file's path means nothing on the spire node), the address the spire node reaches the
// API server at when one is given, and the spire-server token.
func TestSpireKubeConfig(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: https://127.0.0.1:16443
    certificate-authority: `+ca+`
users:
- name: admin
  user:
    client-certificate: /nonexistent/admin.crt
contexts:
- name: lab
  context: {cluster: lab, user: admin}
current-context: lab
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := KubeConfigServer(kc); err != nil || s != "https://127.0.0.1:16443" {
		t.Fatalf("server %q %v", s, err)
	}
	for _, tc := range []struct{ apiServer, want string }{
		{"", "https://127.0.0.1:16443"},
		{"https://k8s.internal:6443", "https://k8s.internal:6443"},
	} {
		b, err := SpireKubeConfig(kc, tc.apiServer, "the-token")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.Load(b)
		if err != nil {
			t.Fatal(err)
		}
		cl := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
		user := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
		if cl.Server != tc.want || string(cl.CertificateAuthorityData) == "" || cl.CertificateAuthority != "" ||
			user.Token != "the-token" || user.ClientCertificate != "" {
			t.Fatalf("api_server %q: cluster %+v user %+v", tc.apiServer, cl, user)
		}
	}
}
