package spire_test

// Acceptance tests of the SPIRE hand-off (k8s-operator) against the real parts: the lab
// spire node (a lab container running spire-server v1.13.3, reached over SSH), the lab
// control plane (kube-apiserver with kwok in the kubelet's place), and a real
// spire-agent process beside the lab. kwok runs no containers, so the agent of node
// web01 runs here, with the token the kube-apiserver issues for web01's real pod object
// (TokenRequest bound to the pod, as the kubelet projects it), and attests through the
// server's k8s_psat attestor, which reviews the token against the same apiserver.
// They run when TF_ACC=1, FEDIVERSITY_K8S=1 and FEDIVERSITY_SPIRE=1.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	spireres "github.com/fediversity/terraform-provider-fediversity/internal/provider/spire"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

type spireAcc struct {
	*acctest.K8s
	sn labtest.SpireNode
	// tokens are every spire-server token seen in the spire node's kubeconfig.
	tokens []string
}

func newSpireAcc(t *testing.T) *spireAcc {
	// acctest.NewK8s first: it skips without TF_ACC, so the unit suite (no TF_ACC, and on a
	// cold machine no spire node yet) does not ask for the spire node.
	k := acctest.NewK8s(t)
	a := &spireAcc{K8s: k, sn: labtest.Spire(t)}
	t.Cleanup(func() { // a failed test must not leave entries or files on the shared spire node
		a.cleanupExec("rm", "-rf", "/var/lib/spire/fediversity/k8s/"+a.Ns)
		for _, e := range a.entries() {
			a.cleanupExec("spire-server", "entry", "delete", "-entryID", e.ID)
		}
	})
	return a
}

func (a *spireAcc) spireExec(argv ...string) (string, error) {
	return labtest.IncusErr(append([]string{"exec", a.sn.Name, "--"}, argv...)...)
}

// cleanupExec runs argv on the spire node in a cleanup: one that fails leaves the shared
// spire node changed for the tests after this one, so it fails this test.
func (a *spireAcc) cleanupExec(argv ...string) {
	if out, err := a.spireExec(argv...); err != nil {
		a.T.Errorf("cleanup on the spire node, %v: %v %s", argv, err, out)
	}
}

func (a *spireAcc) spireNodeBlock(port int) string {
	return fmt.Sprintf(`  spire_node {
    host     = %q
    port     = %d
    host_key = %q
  }
`, a.sn.SSHHost, port, a.sn.HostKey)
}

func (a *spireAcc) providerBlock() string {
	return fmt.Sprintf(`provider "fediversity" {
  k8s_registry         = %q
  k8s_namespace        = %q
  kube_config_path     = %q
  ssh_private_key_file = %q
}
`, a.Reg.Host, a.Ns, a.Kc, labtest.KeyFile())
}

// config: the namespace, the bundle, the hand-off of web01, and web01's rollout with
// the SPIRE token and bundle.
func (a *spireAcc) config(extraHandoff string) string {
	return acctest.Config(a.providerBlock() + fmt.Sprintf(`
resource "fediversity_k8s_namespace" "ns" {}

data "fediversity_spire_trust_bundle" "b" {
%[1]s}

resource "fediversity_spire_handoff" "h" {
  namespace    = fediversity_k8s_namespace.ns.name
  nodes        = ["web01"]
  trust_bundle = data.fediversity_spire_trust_bundle.b.pem
%[1]s%[2]s}

resource "fediversity_image" "node" {
  namespace = fediversity_k8s_namespace.ns.name
  node      = "web01"
  tag       = "v1"
  archive   = %[3]q
}

resource "fediversity_k8s_rollout" "web01" {
  namespace     = fediversity_k8s_namespace.ns.name
  node          = "web01"
  image_ref     = fediversity_image.node.image_ref
  runtime_class = fediversity_k8s_namespace.ns.runtime_class
  storage_class = "fediversity-lab"
  spire_handoff = fediversity_spire_handoff.h.id
  timings {
    rollout_wait = "90s"
  }
}
`, a.spireNodeBlock(a.sn.SSHPort), extraHandoff, a.Archives["v1"]))
}

func (a *spireAcc) entries() []spire.Entry {
	out, err := a.spireExec("spire-server", "entry", "show", "-output", "json")
	if err != nil {
		a.T.Logf("entry show: %v %s", err, out)
		return nil
	}
	var resp struct {
		Entries []struct {
			ID        string `json:"id"`
			SpiffeID  struct{ TrustDomain, Path string }
			Selectors []struct{ Type, Value string }
		} `json:"entries"`
	}
	_ = json.Unmarshal([]byte(out), &resp)
	var es []spire.Entry
	for _, e := range resp.Entries {
		if strings.HasPrefix(e.ID, spire.K8sEntryPrefix(a.Ns)) {
			es = append(es, spire.Entry{ID: e.ID})
		}
	}
	return es
}

// kubeconfigToken reads the token the hand-off wrote into the spire node's kubeconfig.
func (a *spireAcc) kubeconfigToken() (string, error) {
	out, err := a.spireExec("sh", "-c", `stat -c %a "$1" && grep 'server:' "$1" && grep 'token:' "$1"`, "sh", "/var/lib/spire/fediversity/k8s/"+a.Ns+"/kubeconfig")
	if err != nil {
		return "", fmt.Errorf("kubeconfig on the spire node: %v: %s", err, out)
	}
	if want := os.Getenv(spireres.SpireAPIServerEnv); want != "" && !strings.Contains(out, "server: "+want) {
		return "", fmt.Errorf("the spire node's kubeconfig does not name %s=%s:\n%s", spireres.SpireAPIServerEnv, want, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != "600" {
		return "", fmt.Errorf("kubeconfig mode %s, want 600", lines[0])
	}
	tok := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[len(lines)-1]), "token:"))
	if len(tok) < 100 {
		return "", fmt.Errorf("no token in the kubeconfig: %q", lines)
	}
	a.tokens = append(a.tokens, tok)
	return tok, nil
}

func (a *spireAcc) noTokenIn(what, s string) error {
	for _, tok := range a.tokens {
		if strings.Contains(s, tok) {
			return fmt.Errorf("the spire-server token is in the %s", what)
		}
	}
	return nil
}

// stateHasNoToken: no attribute of any resource in the state holds the token.
func (a *spireAcc) stateHasNoToken(s *terraform.State) error {
	if _, err := a.kubeconfigToken(); err != nil {
		return err
	}
	var all bytes.Buffer
	for _, r := range s.RootModule().Resources {
		for k, v := range r.Primary.Attributes {
			fmt.Fprintf(&all, "%s=%s\n", k, v)
		}
	}
	return a.noTokenIn("state", all.String())
}

// planHasNoToken is a plan check: the plan (as JSON) holds no token seen so far.
type planHasNoToken struct{ a *spireAcc }

func (p planHasNoToken) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	b, err := json.Marshal(req.Plan)
	if err != nil {
		resp.Error = err
		return
	}
	if len(p.a.tokens) == 0 {
		resp.Error = fmt.Errorf("no token seen yet: the check would prove nothing")
		return
	}
	resp.Error = p.a.noTokenIn("plan", string(b))
}

// checkEntries: the alias and host entries of web01 exist with the k8s_psat selectors.
func (a *spireAcc) checkEntries(s *terraform.State) error {
	out, err := a.spireExec("spire-server", "entry", "show", "-spiffeID", spire.HostID(a.Ns, "web01"))
	if err != nil || !strings.Contains(out, "Parent ID        : "+spire.AliasID(a.Ns, "web01")) || !strings.Contains(out, "Selector         : unix:uid:0") {
		return fmt.Errorf("host entry: %v\n%s", err, out)
	}
	out, err = a.spireExec("spire-server", "entry", "show", "-spiffeID", spire.AliasID(a.Ns, "web01"))
	for _, sel := range []string{"k8s_psat:cluster:" + spire.K8sCluster(a.Ns, "web01"), "k8s_psat:agent_ns:" + a.Ns, "k8s_psat:agent_sa:node-web01"} {
		if err != nil || !strings.Contains(out, "Selector         : "+sel) {
			return fmt.Errorf("alias entry lacks %s: %v\n%s", sel, err, out)
		}
	}
	if !strings.Contains(out, "Parent ID        : spiffe://fediversity/spire/server") {
		return fmt.Errorf("alias entry is not parented to the server:\n%s", out)
	}
	if n := len(a.entries()); n != 2 {
		return fmt.Errorf("%d entries of namespace %s, want 2", n, a.Ns)
	}
	if out, err := a.spireExec("cat", "/var/lib/spire/fediversity/k8s_psat.hcl"); err != nil || !strings.Contains(out, fmt.Sprintf(`"%s:node-web01"`, a.Ns)) {
		return fmt.Errorf("k8s_psat clusters lack %s: %v\n%s", a.Ns, err, out)
	}
	if out, err := a.spireExec("test", "-f", "/var/lib/spire/fediversity/k8s/"+a.Ns+"/nodes/web01.json"); err != nil {
		return fmt.Errorf("drop-file of web01: %v %s", err, out)
	}
	return nil
}

// checkPodSpec: the Deployment gives the pod the projected token (audience, bounded
// life, root-only mode) and the ConfigMap with the server's bundle.
func (a *spireAcc) checkPodSpec(s *terraform.State) error {
	d, err := a.C.CS.AppsV1().Deployments(a.Ns).Get(context.Background(), "web01", metav1.GetOptions{})
	if err != nil {
		return err
	}
	var tokenOK, bundleOK bool
	for _, v := range d.Spec.Template.Spec.Volumes {
		if p := v.Projected; p != nil && len(p.Sources) == 1 && p.Sources[0].ServiceAccountToken != nil {
			st := p.Sources[0].ServiceAccountToken
			tokenOK = st.Audience == "spire-server" && st.ExpirationSeconds != nil && *st.ExpirationSeconds == 3600 &&
				p.DefaultMode != nil && *p.DefaultMode == 0o400
		}
		if v.ConfigMap != nil && v.ConfigMap.Name == k8s.SpireAgentConfigMap {
			bundleOK = true
		}
	}
	if !tokenOK || !bundleOK {
		return fmt.Errorf("pod spec: token volume ok=%v, bundle volume ok=%v: %+v", tokenOK, bundleOK, d.Spec.Template.Spec.Volumes)
	}
	want, err := a.spireExec("spire-server", "bundle", "show")
	if err != nil {
		return err
	}
	got, found, err := a.C.SpireBundle(context.Background(), a.Ns)
	if err != nil || !found || strings.TrimSpace(got) != strings.TrimSpace(want) {
		return fmt.Errorf("ConfigMap spire-agent holds %q (found %v, %v), the server's bundle is %q", got, found, err, want)
	}
	if _, err := a.C.CS.RbacV1().ClusterRoleBindings().Get(context.Background(), k8s.SpireRoleName(a.Ns), metav1.GetOptions{}); err != nil {
		return err
	}
	return nil
}

// attestWithRealAgent runs spire-agent beside the lab as web01's agent with a token of
// node-web01 bound to web01's pod, and waits for the host SVID.
func (a *spireAcc) attestWithRealAgent(s *terraform.State) error {
	pod, err := a.ReadyPod()
	if err != nil {
		return err
	}
	dir := a.T.TempDir()
	tok, err := a.C.NodePodToken(context.Background(), a.Ns, "web01", pod.Name, 10*time.Minute)
	if err != nil {
		return fmt.Errorf("TokenRequest for web01's pod: %v", err)
	}
	bundle, _, err := a.C.SpireBundle(context.Background(), a.Ns) // the agent trusts what the pod would mount
	if err != nil {
		return err
	}
	for name, content := range map[string]string{"token": tok, "bundle.crt": bundle, "agent.conf": fmt.Sprintf(`agent {
  data_dir = "%[1]s/data"
  log_level = "DEBUG"
  server_address = "127.0.0.1"
  server_port = "%[2]d"
  socket_path = "%[1]s/agent.sock"
  trust_bundle_path = "%[1]s/bundle.crt"
  trust_domain = "fediversity"
}
plugins {
  NodeAttestor "k8s_psat" {
    plugin_data {
      cluster = "%[3]s"
      token_path = "%[1]s/token"
    }
  }
  KeyManager "memory" {
    plugin_data {}
  }
  WorkloadAttestor "unix" {
    plugin_data {}
  }
}
`, dir, a.sn.ServerPort, spire.K8sCluster(a.Ns, "web01"))} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	agentBin := labtest.SpireAgentBinary(a.T)
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		return err
	}
	agent := exec.Command(agentBin, "run", "-config", filepath.Join(dir, "agent.conf"))
	agent.Stdout, agent.Stderr = logf, logf
	if err := agent.Start(); err != nil {
		return err
	}
	a.T.Cleanup(func() { _ = agent.Process.Kill(); _, _ = agent.Process.Wait() })
	host := spire.HostID(a.Ns, "web01")
	var last string
	for i := 0; i < 60; i++ {
		out, _ := exec.Command(agentBin, "api", "fetch", "x509", "-socketPath", filepath.Join(dir, "agent.sock")).CombinedOutput()
		last = string(out)
		if strings.Contains(last, host) {
			break
		}
		time.Sleep(time.Second)
	}
	if !strings.Contains(last, host) {
		b, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
		return fmt.Errorf("the agent did not get the SVID of %s within 60 s: %s\nagent log (tail): %s", host, last, tail(string(b), 2000))
	}
	a.T.Logf("the agent of web01 holds the X.509 SVID of %s", host)
	list, err := a.spireExec("spire-server", "agent", "list")
	if err != nil {
		return fmt.Errorf("agent list: %v %s", err, list)
	}
	agentID := fmt.Sprintf("spiffe://fediversity/spire/agent/k8s_psat/%s/", spire.K8sCluster(a.Ns, "web01"))
	if !regexp.MustCompile(`(?s)` + regexp.QuoteMeta(agentID) + `\S+\s*\n\s*Attestation type\s*:\s*k8s_psat`).MatchString(list) {
		return fmt.Errorf("spire-server agent list does not show %s… with attestor k8s_psat:\n%s", agentID, list)
	}
	a.T.Logf("spire-server agent list:\n%s", list)
	// Stopped here, so it does not attest again while later steps replace the hand-off.
	_ = agent.Process.Kill()
	_, _ = agent.Process.Wait()
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// auditArgv makes the spire node log the command line of every SSH session (root's login
// shell becomes a wrapper that appends "$*" to a log, then runs the shell). The log is
// the argv the node saw; the test greps it for the token.
func (a *spireAcc) auditArgv() {
	const wrapper = "#!/bin/sh\nprintf '%s\\n' \"$*\" >>/var/log/fediversity-argv.log\nexec /bin/bash \"$@\"\n"
	cmd := exec.Command("incus", "exec", a.sn.Name, "--", "sh", "-c", "cat >/usr/local/bin/fedi-audit-sh")
	cmd.Stdin = strings.NewReader(wrapper)
	if out, err := cmd.CombinedOutput(); err != nil {
		a.T.Fatalf("audit wrapper: %v %s", err, out)
	}
	if out, err := a.spireExec("sh", "-c", "chmod 755 /usr/local/bin/fedi-audit-sh && : >/var/log/fediversity-argv.log && usermod -s /usr/local/bin/fedi-audit-sh root"); err != nil {
		a.T.Fatalf("audit wrapper: %v %s", err, out)
	}
	a.T.Cleanup(func() { a.cleanupExec("usermod", "-s", "/bin/bash", "root") })
}

func (a *spireAcc) checkArgvLog() error {
	out, err := a.spireExec("cat", "/var/log/fediversity-argv.log")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "spire-server") || !strings.Contains(out, "kubeconfig") {
		return fmt.Errorf("the argv log saw no hand-off commands: the check would prove nothing:\n%s", tail(out, 1000))
	}
	return a.noTokenIn("argv seen by the spire node", out)
}

// TestAccSpireHandoff_attestRotateRemakeDestroy: the hand-off end to end (docs/spire-and-dns.md#spire):
// service account, kubeconfig, entries, a real attestation, CA rotation, remake, destroy.
func TestAccSpireHandoff_attestRotateRemakeDestroy(t *testing.T) {
	a := newSpireAcc(t)
	a.auditArgv()
	logPath := filepath.Join(t.TempDir(), "tf.log")
	t.Setenv("TF_ACC_LOG_PATH", logPath)
	t.Setenv("TF_LOG", "TRACE")
	// The spire node reaches the apiserver by another name than the operator's kubeconfig
	// says (localhost is in the lab apiserver's certificate); the agent's attestation
	// below goes through it.
	t.Setenv(spireres.SpireAPIServerEnv, "https://localhost:16443")
	var machineID string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		CheckDestroy: func(s *terraform.State) error {
			if n := len(a.entries()); n != 0 {
				return fmt.Errorf("%d entries of namespace %s left after destroy", n, a.Ns)
			}
			if out, err := a.spireExec("test", "-e", "/var/lib/spire/fediversity/k8s/"+a.Ns); err == nil {
				return fmt.Errorf("kubeconfig and drop-files of %s left on the spire node %s", a.Ns, out)
			}
			if out, _ := a.spireExec("cat", "/var/lib/spire/fediversity/k8s_psat.hcl"); strings.Contains(out, `"`+a.Ns) {
				return fmt.Errorf("cluster %s left in the k8s_psat attestor:\n%s", a.Ns, out)
			}
			if _, err := a.C.CS.RbacV1().ClusterRoleBindings().Get(context.Background(), k8s.SpireRoleName(a.Ns), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("ClusterRoleBinding %s left after destroy (%v)", k8s.SpireRoleName(a.Ns), err)
			}
			if list, _ := a.spireExec("spire-server", "agent", "list"); strings.Contains(list, spire.K8sAgentPrefix(a.Ns)+".") || strings.Contains(list, spire.K8sAgentPrefix(a.Ns)+"/") {
				return fmt.Errorf("the agent of %s was not evicted:\n%s", a.Ns, list)
			}
			if err := a.checkArgvLog(); err != nil {
				return err
			}
			b, err := os.ReadFile(logPath)
			if err != nil || len(b) == 0 {
				return fmt.Errorf("no Terraform log at %s (%v): the log check would prove nothing", logPath, err)
			}
			return a.noTokenIn("Terraform/OpenTofu log", string(b))
		},
		Steps: []resource.TestStep{
			{
				Config: a.config(""),
				Check: resource.ComposeTestCheckFunc(
					a.checkEntries, a.checkPodSpec, a.stateHasNoToken, a.attestWithRealAgent,
					func(s *terraform.State) error {
						machineID = acctest.StateAttr(s, "fediversity_spire_handoff.h", "spire_machine_id")
						if len(machineID) != 32 {
							return fmt.Errorf("spire_machine_id %q", machineID)
						}
						return nil
					},
				),
			},
			{
				// An unchanged bundle changes nothing.
				Config:           a.config(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan(), planHasNoToken{a}}},
			},
			{
				// A CA rotation started with the spire-server CLI changes the ConfigMap at
				// the next plan; the Deployment does not change (the kubelet updates the
				// mounted ConfigMap in place).
				PreConfig: func() {
					if out, err := a.spireExec("spire-server", "localauthority", "x509", "prepare"); err != nil {
						t.Fatalf("prepare a new X.509 authority: %v %s", err, out)
					}
				},
				Config: a.config(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("fediversity_spire_handoff.h", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("fediversity_k8s_rollout.web01", plancheck.ResourceActionNoop),
					planHasNoToken{a},
				}},
				Check: resource.ComposeTestCheckFunc(a.checkPodSpec, a.stateHasNoToken, func(s *terraform.State) error {
					b, _, err := a.C.SpireBundle(context.Background(), a.Ns)
					if n := strings.Count(b, "BEGIN CERTIFICATE"); err != nil || n < 2 {
						return fmt.Errorf("after the rotation the ConfigMap holds %d certificates (%v), want the old and the prepared CA", n, err)
					}
					return nil
				}),
			},
			{
				// The spire node is made again (a new machine ID, none of the files): the
				// hand-off is replaced and the files are written again.
				PreConfig: func() {
					if out, err := a.spireExec("sh", "-c", `cp /etc/machine-id /etc/machine-id.fedi-test && rm -rf "/var/lib/spire/fediversity/k8s/$1" && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >/etc/machine-id`, "sh", a.Ns); err != nil {
						t.Fatalf("new machine ID: %v %s", err, out)
					}
					t.Cleanup(func() {
						a.cleanupExec("sh", "-c", "if test -f /etc/machine-id.fedi-test; then mv /etc/machine-id.fedi-test /etc/machine-id; fi")
					})
				},
				Config: a.config(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("fediversity_spire_handoff.h", plancheck.ResourceActionReplace),
				}},
				Check: resource.ComposeTestCheckFunc(a.checkEntries, a.stateHasNoToken, func(s *terraform.State) error {
					if got := acctest.StateAttr(s, "fediversity_spire_handoff.h", "spire_machine_id"); got == machineID {
						return fmt.Errorf("spire_machine_id did not follow the new machine ID")
					}
					return nil
				}),
			},
			{
				// The spire node does not answer: the plan of a destroy fails.
				PreConfig: func() {
					if out, err := a.spireExec("systemctl", "stop", "spire-server"); err != nil {
						t.Fatalf("stop spire-server: %v %s", err, out)
					}
				},
				Config:      a.config(""),
				Destroy:     true,
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`Unable to reach the spire node`),
			},
			{
				PreConfig: func() {
					if out, err := a.spireExec("sh", "-c", "mv /etc/machine-id.fedi-test /etc/machine-id; systemctl start spire-server; for i in $(seq 30); do spire-server healthcheck >/dev/null 2>&1 && exit 0; sleep 1; done; exit 1"); err != nil {
						t.Fatalf("start spire-server again: %v %s", err, out)
					}
				},
				Config:             a.config(""),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true, // the machine ID is the old one again: the hand-off is replaced
			},
		},
	})
}

// TestAccSpireHandoff_badInput: a missing spire coordinate, an unreachable spire node and
// a roster with a spiffe provider each fail the plan with an error naming the field or
// the group, and nothing changes on the spire node or in the cluster.
func TestAccSpireHandoff_badInput(t *testing.T) {
	a := newSpireAcc(t)
	base := func(handoff string) string {
		return acctest.Config(a.providerBlock() + fmt.Sprintf(`
resource "fediversity_spire_handoff" "h" {
  namespace    = %q
  group        = "shop"
  nodes        = ["web01"]
  trust_bundle = "-----BEGIN CERTIFICATE-----\n"
%s}
`, a.Ns, handoff))
	}
	closed := strings.Split(acctest.ClosedPort(t), ":")[1]
	nothingChanged := func() {
		if n := len(a.entries()); n != 0 {
			t.Errorf("%d entries made for %s by a refused plan", n, a.Ns)
		}
		if _, err := a.spireExec("test", "-e", "/var/lib/spire/fediversity/k8s/"+a.Ns); err == nil {
			t.Errorf("files made on the spire node by a refused plan")
		}
		if _, err := a.C.CS.CoreV1().ServiceAccounts(a.Ns).Get(context.Background(), k8s.SpireServerServiceAccount, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("service account spire-server made by a refused plan (%v)", err)
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      base(""),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Missing spire node coordinates.*spire_node\.host`),
			},
			{
				Config:      base(fmt.Sprintf("  spire_node {\n    host = %q\n  }\n", a.sn.SSHHost)),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)No pinned host key.*spire_node\.host_key`),
			},
			{
				Config:      base(a.spireNodeBlock(atoi(t, closed))),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Unable to reach the spire node.*127\.0\.0\.1:` + closed),
			},
			{
				Config:      base(a.spireNodeBlock(a.sn.SSHPort) + "  roster = { web01 = [\"nginx\"], auth01 = [\"spiffe\"] }\n"),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)roster of group shop has a spiffe provider.*auth01`),
			},
		},
	})
	nothingChanged()
}

func atoi(t *testing.T, s string) int {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}
