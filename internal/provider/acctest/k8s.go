package acctest

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/image"
	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
)

const labKubeconfig = "/var/lib/fediversity-k8s/kubeconfig"

// AccK8s skips unless the k8s control plane is meant to be there, and returns a client
// for the test's own checks.
func AccK8s(t *testing.T) (*k8s.Client, string) {
	t.Helper()
	if os.Getenv("TF_ACC") == "" || os.Getenv("FEDIVERSITY_K8S") != "1" {
		t.Skip("needs TF_ACC=1 and FEDIVERSITY_K8S=1 with the control plane of lab/k8s/up.sh running")
	}
	kc := os.Getenv("KUBE_CONFIG_PATH")
	if kc == "" {
		kc = labKubeconfig
	}
	c, err := k8s.NewClient(kc)
	if err != nil {
		t.Fatalf("FEDIVERSITY_K8S=1 but %v (run lab/k8s/up.sh)", err)
	}
	return c, kc
}

type testRegistry struct {
	Host string
	// requests counts every request; uploads the blob uploads (POST/PATCH/PUT of /blobs/uploads/).
	Requests, Uploads atomic.Int64
}

// StartRegistry serves a real in-memory OCI registry on 127.0.0.1 for this test.
func StartRegistry(t *testing.T) *testRegistry {
	t.Helper()
	r := &testRegistry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.Requests.Add(1)
		if req.Method != http.MethodGet && req.Method != http.MethodHead && strings.Contains(req.URL.Path, "/blobs/uploads") {
			r.Uploads.Add(1)
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.Host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// ClosedPort is a loopback address nothing listens on.
func ClosedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// WriteArchive writes a random image as a docker-archive, the format of a Nix-built node image.
func WriteArchive(t *testing.T, dir, file string) string {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, file)
	tag, _ := name.NewTag("fediversity.local/node:" + strings.TrimSuffix(file, ".tar"))
	if err := tarball.WriteToFile(p, tag, img); err != nil {
		t.Fatal(err)
	}
	return p
}

func randomNamespace(t *testing.T) string {
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("acc-%x", b)
}

type K8s struct {
	T        *testing.T
	C        *k8s.Client
	Kc       string
	Reg      *testRegistry
	Ns       string
	Archives map[string]string
	// PullGrace is the rollout's timings.pull_grace (default 3s).
	PullGrace string
}

func NewK8s(t *testing.T) *K8s {
	c, kc := AccK8s(t)
	a := &K8s{T: t, C: c, Kc: kc, Reg: StartRegistry(t), Ns: randomNamespace(t), Archives: map[string]string{}}
	dir := t.TempDir()
	for _, n := range []string{"v1", "v2", "v3", "bad"} {
		a.Archives[n] = WriteArchive(t, dir, n+".tar")
	}
	t.Cleanup(func() { // a failed test must not leave its namespace behind
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = c.CS.CoreV1().Namespaces().Delete(ctx, a.Ns, metav1.DeleteOptions{})
	})
	return a
}

func (a *K8s) Provider(registry string) string {
	return fmt.Sprintf(`provider "fediversity" {
  k8s_registry     = %q
  k8s_namespace    = %q
  kube_config_path = %q
}
`, registry, a.Ns, a.Kc)
}

// Config: a namespace, the image "node" of archive/tag pushed as node name imageNode,
// and the rollout of node "web01" to it.
func (a *K8s) Config(registry, imageNode, archive, tag, extra string) string {
	return Config(a.Provider(registry) + fmt.Sprintf(`
resource "fediversity_k8s_namespace" "ns" {}

resource "fediversity_image" "node" {
  namespace = fediversity_k8s_namespace.ns.name
  node      = %q
  tag       = %q
  archive   = %q
}

resource "fediversity_k8s_rollout" "web01" {
  namespace     = fediversity_k8s_namespace.ns.name
  node          = "web01"
  image_ref     = fediversity_image.node.image_ref
  runtime_class = fediversity_k8s_namespace.ns.runtime_class
  storage_class = "fediversity-lab"
  timings {
    rollout_wait = "90s"
    pull_grace   = %q
  }
}
%s`, imageNode, tag, a.Archives[archive], cmpOr(a.PullGrace, "3s"), extra))
}

func (a *K8s) Good(archive, tag string) string {
	return a.Config(a.Reg.Host, "web01", archive, tag, "")
}

// Faulty points the rollout at an image whose repository names a kwok fault stage.
func (a *K8s) Faulty(fault string) string {
	return a.Config(a.Reg.Host, "web01-"+fault, "bad", "v1", "")
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func StateAttr(s *terraform.State, res, key string) string {
	r := s.RootModule().Resources[res]
	if r == nil {
		return ""
	}
	return r.Primary.Attributes[key]
}

// DeploymentImage is the image the Deployment of web01 names in the cluster.
func (a *K8s) DeploymentImage() (string, string, error) {
	d, err := a.C.CS.AppsV1().Deployments(a.Ns).Get(context.Background(), "web01", metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	return d.Spec.Template.Spec.Containers[0].Image, d.Annotations["deployment.kubernetes.io/revision"], nil
}

// ReadyPod returns the one ready, non-terminating pod of web01.
func (a *K8s) ReadyPod() (*corev1.Pod, error) { return a.ReadyPodOf("web01") }

// LivePodsOf are node's pods that are not going away, ready or not.
func (a *K8s) LivePodsOf(node string) ([]corev1.Pod, error) {
	list, err := a.C.CS.CoreV1().Pods(a.Ns).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.NodeLabel + "=" + node})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// ReadyPodOf returns the one ready, non-terminating pod of node.
func (a *K8s) ReadyPodOf(node string) (*corev1.Pod, error) {
	out, err := a.LivePodsOf(node)
	if err != nil {
		return nil, err
	}
	if len(out) != 1 {
		return nil, fmt.Errorf("want one pod of %s, found %d", node, len(out))
	}
	for _, c := range out[0].Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return &out[0], nil
		}
	}
	return nil, fmt.Errorf("pod %s is not ready", out[0].Name)
}

func (a *K8s) ClaimUID() (string, error) {
	pvc, err := a.C.CS.CoreV1().PersistentVolumeClaims(a.Ns).Get(context.Background(), "web01-state", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return string(pvc.UID), nil
}

// CheckRunsStateImage: the Deployment names the image fediversity_image pushed, by
// digest, the registry holds that digest under <registry>/<ns>/<node>, and the pod is ready.
func (a *K8s) CheckRunsStateImage(node string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		ref := StateAttr(s, "fediversity_image.node", "image_ref")
		want := a.Reg.Host + "/" + a.Ns + "/" + node + "@sha256:"
		if !strings.HasPrefix(ref, want) {
			return fmt.Errorf("image_ref %q, want prefix %q", ref, want)
		}
		got, err := image.Head(context.Background(), image.Target{Registry: a.Reg.Host, Namespace: a.Ns, Node: node, Tag: StateAttr(s, "fediversity_image.node", "tag")}, image.Options{})
		if err != nil {
			return err
		}
		if got.ImageRef != ref {
			return fmt.Errorf("registry holds %s for the tag, state says %s", got.ImageRef, ref)
		}
		img, _, err := a.DeploymentImage()
		if err != nil {
			return err
		}
		if img != ref {
			return fmt.Errorf("the Deployment names %s, want %s", img, ref)
		}
		if _, err := a.ReadyPod(); err != nil {
			return err
		}
		if st := StateAttr(s, "fediversity_k8s_rollout.web01", "status"); st != "ready" {
			return fmt.Errorf("status %q", st)
		}
		return nil
	}
}
