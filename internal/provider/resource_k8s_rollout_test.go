package provider

// Acceptance tests of the k8s method against a real control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler from lab/k8s/up.sh) with kwok in the kubelet's
// place, and a real OCI registry (go-containerregistry's registry, served on 127.0.0.1
// in this process). They run when TF_ACC=1 and FEDIVERSITY_K8S=1.
//
// kwok decides each pod's fate by its image name (lab/k8s/stages.yaml): an image whose
// repository contains "broken" stays in ImagePullBackOff, "crashloop" in CrashLoopBackOff,
// "unbound" is Unschedulable for an unbound claim; every other image becomes Ready. So a
// failing image is pushed by a second fediversity_image whose node name carries the fault
// (e.g. "web01-broken"), and the rollout of node web01 is pointed at it.

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
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/image"
	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

const labKubeconfig = "/var/lib/fediversity-k8s/kubeconfig"

// accK8s skips unless the k8s control plane is meant to be there, and returns a client
// for the test's own checks.
func accK8s(t *testing.T) (*k8s.Client, string) {
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
	host string
	// requests counts every request; uploads the blob uploads (POST/PATCH/PUT of /blobs/uploads/).
	requests, uploads atomic.Int64
}

// startRegistry serves a real in-memory OCI registry on 127.0.0.1 for this test.
func startRegistry(t *testing.T) *testRegistry {
	t.Helper()
	r := &testRegistry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		if req.Method != http.MethodGet && req.Method != http.MethodHead && strings.Contains(req.URL.Path, "/blobs/uploads") {
			r.uploads.Add(1)
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
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

// writeArchive writes a random image as a docker-archive, the format of a Nix-built node image.
func writeArchive(t *testing.T, dir, file string) string {
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

type k8sAcc struct {
	t        *testing.T
	c        *k8s.Client
	kc       string
	reg      *testRegistry
	ns       string
	archives map[string]string
	// pullGrace is the rollout's timings.pull_grace (default 3s).
	pullGrace string
}

func newK8sAcc(t *testing.T) *k8sAcc {
	c, kc := accK8s(t)
	a := &k8sAcc{t: t, c: c, kc: kc, reg: startRegistry(t), ns: randomNamespace(t), archives: map[string]string{}}
	dir := t.TempDir()
	for _, n := range []string{"v1", "v2", "v3", "bad"} {
		a.archives[n] = writeArchive(t, dir, n+".tar")
	}
	t.Cleanup(func() { // a failed test must not leave its namespace behind
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = c.CS.CoreV1().Namespaces().Delete(ctx, a.ns, metav1.DeleteOptions{})
	})
	return a
}

func (a *k8sAcc) provider(registry string) string {
	return fmt.Sprintf(`provider "fediversity" {
  k8s_registry     = %q
  k8s_namespace    = %q
  kube_config_path = %q
}
`, registry, a.ns, a.kc)
}

// config: a namespace, the image "node" of archive/tag pushed as node name imageNode,
// and the rollout of node "web01" to it.
func (a *k8sAcc) config(registry, imageNode, archive, tag, extra string) string {
	return testAccConfig(a.provider(registry) + fmt.Sprintf(`
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
%s`, imageNode, tag, a.archives[archive], cmpOr(a.pullGrace, "3s"), extra))
}

func (a *k8sAcc) good(archive, tag string) string {
	return a.config(a.reg.host, "web01", archive, tag, "")
}

// faulty points the rollout at an image whose repository names a kwok fault stage.
func (a *k8sAcc) faulty(fault string) string {
	return a.config(a.reg.host, "web01-"+fault, "bad", "v1", "")
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func stateAttr(s *terraform.State, res, key string) string {
	r := s.RootModule().Resources[res]
	if r == nil {
		return ""
	}
	return r.Primary.Attributes[key]
}

// deploymentImage is the image the Deployment of web01 names in the cluster.
func (a *k8sAcc) deploymentImage() (string, string, error) {
	d, err := a.c.CS.AppsV1().Deployments(a.ns).Get(context.Background(), "web01", metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	return d.Spec.Template.Spec.Containers[0].Image, d.Annotations["deployment.kubernetes.io/revision"], nil
}

// readyPod returns the one ready, non-terminating pod of web01.
func (a *k8sAcc) readyPod() (*corev1.Pod, error) {
	list, err := a.c.CS.CoreV1().Pods(a.ns).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.NodeLabel + "=web01"})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	if len(out) != 1 {
		return nil, fmt.Errorf("want one pod of web01, found %d", len(out))
	}
	for _, c := range out[0].Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return &out[0], nil
		}
	}
	return nil, fmt.Errorf("pod %s is not ready", out[0].Name)
}

func (a *k8sAcc) claimUID() (string, error) {
	pvc, err := a.c.CS.CoreV1().PersistentVolumeClaims(a.ns).Get(context.Background(), "web01-state", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return string(pvc.UID), nil
}

// checkRunsStateImage: the Deployment names the image fediversity_image pushed, by
// digest, the registry holds that digest under <registry>/<ns>/<node>, and the pod is ready.
func (a *k8sAcc) checkRunsStateImage(node string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		ref := stateAttr(s, "fediversity_image.node", "image_ref")
		want := a.reg.host + "/" + a.ns + "/" + node + "@sha256:"
		if !strings.HasPrefix(ref, want) {
			return fmt.Errorf("image_ref %q, want prefix %q", ref, want)
		}
		got, err := image.Head(context.Background(), image.Target{Registry: a.reg.host, Namespace: a.ns, Node: node, Tag: stateAttr(s, "fediversity_image.node", "tag")}, image.Options{})
		if err != nil {
			return err
		}
		if got.ImageRef != ref {
			return fmt.Errorf("registry holds %s for the tag, state says %s", got.ImageRef, ref)
		}
		img, _, err := a.deploymentImage()
		if err != nil {
			return err
		}
		if img != ref {
			return fmt.Errorf("Deployment names %s, want %s", img, ref)
		}
		if _, err := a.readyPod(); err != nil {
			return err
		}
		if st := stateAttr(s, "fediversity_k8s_rollout.web01", "status"); st != "ready" {
			return fmt.Errorf("status %q", st)
		}
		return nil
	}
}

// TestAccK8sRollout_deployReapplyChangeDestroy: deploy, an unchanged re-apply, a
// change, the claim and machine ID surviving a replacement, and destroy.
func TestAccK8sRollout_deployReapplyChangeDestroy(t *testing.T) {
	a := newK8sAcc(t)
	var podUID, claimUID, uuid string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: func(s *terraform.State) error {
			_, err := a.c.CS.CoreV1().Namespaces().Get(context.Background(), a.ns, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("namespace %s still exists after destroy (err %v)", a.ns, err)
			}
			for _, tag := range []string{"v1", "v2"} {
				if _, err := image.Head(context.Background(), image.Target{Registry: a.reg.host, Namespace: a.ns, Node: "web01", Tag: tag}, image.Options{}); err != nil {
					return fmt.Errorf("image web01:%s should stay in the registry after destroy: %v", tag, err)
				}
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: a.good("v1", "v1"),
				Check: resource.ComposeTestCheckFunc(
					a.checkRunsStateImage("web01"),
					func(s *terraform.State) error {
						d, err := a.c.CS.AppsV1().Deployments(a.ns).Get(context.Background(), "web01", metav1.GetOptions{})
						if err != nil {
							return err
						}
						p := d.Spec.Template.Spec
						if *d.Spec.Replicas != 1 || string(d.Spec.Strategy.Type) != "Recreate" || p.RuntimeClassName == nil || *p.RuntimeClassName != "fediversity" ||
							p.HostUsers == nil || *p.HostUsers || p.ServiceAccountName != "node-web01" {
							return fmt.Errorf("Deployment spec not as the k8s method wants: %+v", d.Spec)
						}
						uuid = stateAttr(s, "fediversity_k8s_rollout.web01", "container_uuid")
						var envUUID string
						for _, e := range p.Containers[0].Env {
							if e.Name == "container_uuid" {
								envUUID = e.Value
							}
						}
						if envUUID != uuid || stateAttr(s, "fediversity_k8s_rollout.web01", "machine_id") != strings.ReplaceAll(uuid, "-", "") {
							return fmt.Errorf("container_uuid env %q, state %q, machine_id %q", envUUID, uuid, stateAttr(s, "fediversity_k8s_rollout.web01", "machine_id"))
						}
						if _, err := a.c.CS.NetworkingV1().NetworkPolicies(a.ns).Get(context.Background(), k8s.NetworkPolicyName, metav1.GetOptions{}); err != nil {
							return fmt.Errorf("NetworkPolicy: %v", err)
						}
						if _, err := a.c.CS.CoreV1().ServiceAccounts(a.ns).Get(context.Background(), "node-web01", metav1.GetOptions{}); err != nil {
							return fmt.Errorf("service account: %v", err)
						}
						pod, err := a.readyPod()
						if err != nil {
							return err
						}
						podUID = string(pod.UID)
						claimUID, err = a.claimUID()
						return err
					},
				),
			},
			{
				// An unchanged re-apply: nothing to do, and the pod is not restarted.
				Config:           a.good("v1", "v1"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check: func(s *terraform.State) error {
					pod, err := a.readyPod()
					if err != nil {
						return err
					}
					if string(pod.UID) != podUID {
						return fmt.Errorf("pod was replaced (%s -> %s) by an unchanged apply", podUID, pod.UID)
					}
					return nil
				},
			},
			{
				// A new tag pushes a new image and replaces the pod, with the same
				// claim and the same machine ID.
				Config: a.good("v2", "v2"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("fediversity_image.node", plancheck.ResourceActionReplace),
					plancheck.ExpectResourceAction("fediversity_k8s_rollout.web01", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeTestCheckFunc(
					a.checkRunsStateImage("web01"),
					func(s *terraform.State) error {
						pod, err := a.readyPod()
						if err != nil {
							return err
						}
						if string(pod.UID) == podUID {
							return fmt.Errorf("pod %s was not replaced by the new image", podUID)
						}
						if c, _ := a.claimUID(); c != claimUID {
							return fmt.Errorf("claim was replaced (%s -> %s)", claimUID, c)
						}
						if u := stateAttr(s, "fediversity_k8s_rollout.web01", "container_uuid"); u != uuid {
							return fmt.Errorf("container_uuid changed %s -> %s", uuid, u)
						}
						for _, v := range pod.Spec.Volumes {
							if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName != "web01-state" {
								return fmt.Errorf("pod mounts claim %s", v.PersistentVolumeClaim.ClaimName)
							}
						}
						return nil
					},
				),
			},
			{
				// No changes again after the change.
				Config:           a.good("v2", "v2"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				// Import by <namespace>/<node>: the same container_uuid, image and claim settings.
				Config:                  a.good("v2", "v2"),
				ResourceName:            "fediversity_k8s_rollout.web01",
				ImportState:             true,
				ImportStateIdFunc:       func(*terraform.State) (string, error) { return a.ns + "/web01", nil },
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timings", "timeouts"},
			},
			{
				Config:            a.good("v2", "v2"),
				ResourceName:      "fediversity_k8s_namespace.ns",
				ImportState:       true,
				ImportStateIdFunc: func(*terraform.State) (string, error) { return a.ns, nil },
				ImportStateVerify: true,
			},
		},
	})
}

// TestAccK8sRollout_rollbackTruthAndRetry: rollback, retry and kept state with an unpullable
// image (edge case "the cluster cannot pull the image").
func TestAccK8sRollout_rollbackTruthAndRetry(t *testing.T) {
	a := newK8sAcc(t)
	var goodRef, claimUID, uuid, revAfterFirstFail string
	rolledBack := regexp.MustCompile(`(?s)ImagePullBackOff.*set\s+back\s+to\s+the\s+previous\s+image`)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: a.good("v1", "v1"),
				Check: func(s *terraform.State) error {
					goodRef = stateAttr(s, "fediversity_k8s_rollout.web01", "image_ref")
					uuid = stateAttr(s, "fediversity_k8s_rollout.web01", "container_uuid")
					var err error
					claimUID, err = a.claimUID()
					return err
				},
			},
			{
				// The new pod does not become ready: back to the good image, fail with the reason.
				Config:      a.faulty("broken"),
				ExpectError: rolledBack,
			},
			{
				// The state tells the truth: the cluster runs the good image, so the plan shows a change.
				PreConfig: func() {
					img, rev, err := a.deploymentImage()
					if err != nil || img != goodRef {
						t.Fatalf("after the rollback the Deployment names %s (err %v), want %s", img, err, goodRef)
					}
					revAfterFirstFail = rev
					if _, err := a.readyPod(); err != nil {
						t.Fatalf("after the rollback: %v", err)
					}
					if c, _ := a.claimUID(); c != claimUID {
						t.Fatalf("the rollback replaced the claim")
					}
				},
				Config:             a.faulty("broken"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{
				// The same configuration again tries the rollout again.
				Config:      a.faulty("broken"),
				ExpectError: rolledBack,
			},
			{
				PreConfig: func() {
					img, rev, err := a.deploymentImage()
					if err != nil || img != goodRef {
						t.Fatalf("after the second rollback the Deployment names %s (err %v), want %s", img, err, goodRef)
					}
					r1, _ := strconv.Atoi(revAfterFirstFail)
					r2, _ := strconv.Atoi(rev)
					if r2 <= r1 {
						t.Fatalf("Deployment revision %s -> %s: the second apply did not try the rollout again", revAfterFirstFail, rev)
					}
				},
				// Back to a good image: succeeds, same claim and machine ID.
				Config: a.good("v3", "v3"),
				Check: resource.ComposeTestCheckFunc(
					a.checkRunsStateImage("web01"),
					func(s *terraform.State) error {
						if u := stateAttr(s, "fediversity_k8s_rollout.web01", "container_uuid"); u != uuid {
							return fmt.Errorf("container_uuid changed %s -> %s across the rollbacks", uuid, u)
						}
						if c, _ := a.claimUID(); c != claimUID {
							return fmt.Errorf("claim replaced")
						}
						return nil
					},
				),
			},
			{
				Config:           a.good("v3", "v3"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
		},
	})
}

// TestAccK8sRollout_failFastRollbacks: a crash-looping PID 1 and a claim with no volume
// each lead to a rollback, well before the 90s rollout limit.
func TestAccK8sRollout_failFastRollbacks(t *testing.T) {
	for _, c := range []struct{ fault, reason string }{
		{"crashloop", `CrashLoopBackOff`},
		{"unbound", `(?s)Unschedulable.*unbound\s+immediate\s+PersistentVolumeClaims`},
	} {
		t.Run(c.fault, func(t *testing.T) {
			a := newK8sAcc(t)
			var goodRef string
			resource.Test(t, resource.TestCase{
				PreCheck:                 func() { testAccPreCheck(t) },
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{
					{
						Config: a.good("v1", "v1"),
						Check: func(s *terraform.State) error {
							goodRef = stateAttr(s, "fediversity_k8s_rollout.web01", "image_ref")
							return nil
						},
					},
					{
						Config:      a.faulty(c.fault),
						ExpectError: regexp.MustCompile(`(?s)stopped\s+after.*` + c.reason + `.*set\s+back\s+to\s+the\s+previous\s+image`),
					},
					{
						PreConfig: func() {
							img, _, err := a.deploymentImage()
							if err != nil || img != goodRef {
								t.Fatalf("after the rollback the Deployment names %s (err %v), want %s", img, err, goodRef)
							}
						},
						Config:             a.faulty(c.fault),
						PlanOnly:           true,
						ExpectNonEmptyPlan: true,
					},
				},
			})
		})
	}
}

// TestAccK8sRollout_firstDeployFails: a first deploy with no previous image fails, then a good image is deployed.
func TestAccK8sRollout_firstDeployFails(t *testing.T) {
	a := newK8sAcc(t)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      a.faulty("crashloop"),
				ExpectError: regexp.MustCompile(`(?s)CrashLoopBackOff.*no\s+previous\s+image`),
			},
			{
				Config: a.good("v1", "v1"),
				Check:  a.checkRunsStateImage("web01"),
			},
		},
	})
}

// TestAccK8sRollout_unreachableRegistry: the push fails and nothing in the cluster changes.
func TestAccK8sRollout_unreachableRegistry(t *testing.T) {
	a := newK8sAcc(t)
	var goodRef, podUID string
	closed := closedPort(t)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: a.good("v1", "v1"),
				Check: func(s *terraform.State) error {
					goodRef = stateAttr(s, "fediversity_k8s_rollout.web01", "image_ref")
					pod, err := a.readyPod()
					if err != nil {
						return err
					}
					podUID = string(pod.UID)
					return nil
				},
			},
			{
				Config:      a.config(closed, "web01", "v2", "v2", ""),
				ExpectError: regexp.MustCompile(`(?s)Unable\s+to\s+push\s+node\s+image.*not\s+reachable`),
			},
			{
				PreConfig: func() {
					img, _, err := a.deploymentImage()
					if err != nil || img != goodRef {
						t.Fatalf("after the failed push the Deployment names %s (err %v), want %s", img, err, goodRef)
					}
					pod, err := a.readyPod()
					if err != nil || string(pod.UID) != podUID {
						t.Fatalf("after the failed push the pod changed (err %v)", err)
					}
				},
				Config: a.good("v1", "v1"),
			},
		},
	})
}

// TestAccK8sNamespace_missingRuntimeClass: the plan fails before any image is pushed.
func TestAccK8sNamespace_missingRuntimeClass(t *testing.T) {
	a := newK8sAcc(t)
	cfg := testAccConfig(a.provider(a.reg.host) + fmt.Sprintf(`
resource "fediversity_k8s_namespace" "ns" {
  runtime_class = "no-such-runtime-class"
}

resource "fediversity_image" "node" {
  namespace = fediversity_k8s_namespace.ns.name
  node      = "web01"
  tag       = "v1"
  archive   = %q
}
`, a.archives["v1"]))
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config:      cfg,
			ExpectError: regexp.MustCompile(`(?s)RuntimeClass\s+"no-such-runtime-class"`),
		}},
	})
	if n := a.reg.requests.Load(); n != 0 {
		t.Errorf("the registry saw %d requests: something was pushed although the plan failed", n)
	}
	if _, err := a.c.CS.CoreV1().Namespaces().Get(context.Background(), a.ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s exists although the plan failed (err %v)", a.ns, err)
	}
}

// TestAccK8sRollout_toplevelImage: an image built from a toplevel runs as the node's
// Deployment (kwok marks its pod ready; no container runtime runs it here).
func TestAccK8sRollout_toplevelImage(t *testing.T) {
	a := newK8sAcc(t)
	top := labtest.BuildClosure(t, labtest.ClosureGood)
	cfg := testAccConfig(a.provider(a.reg.host) + fmt.Sprintf(`
resource "fediversity_k8s_namespace" "ns" {}

resource "fediversity_image" "node" {
  namespace = fediversity_k8s_namespace.ns.name
  node      = "web01"
  toplevel  = %q
}

resource "fediversity_k8s_rollout" "web01" {
  namespace     = fediversity_k8s_namespace.ns.name
  node          = "web01"
  image_ref     = fediversity_image.node.image_ref
  storage_class = "fediversity-lab"
  timings {
    rollout_wait = "90s"
  }
}
`, top))
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: cfg, Check: a.checkRunsStateImage("web01")},
			{Config: cfg, ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}}},
		},
	})
}
