package k8s_test

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
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/image"
	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// TestAccK8sRollout_deployReapplyChangeDestroy: deploy, an unchanged re-apply, a
// change, the claim and machine ID surviving a replacement, and destroy.
// K8s is the shared Kubernetes fixture (acctest.K8s) with the rollout tests' own
// fault helpers as its methods.
type k8sAcc struct{ *acctest.K8s }

func newK8sAcc(t *testing.T) *k8sAcc { return &k8sAcc{acctest.NewK8s(t)} }

func TestAccK8sRollout_deployReapplyChangeDestroy(t *testing.T) {
	a := newK8sAcc(t)
	var podUID, claimUID, uuid string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		CheckDestroy: func(s *terraform.State) error {
			_, err := a.C.CS.CoreV1().Namespaces().Get(context.Background(), a.Ns, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("namespace %s still exists after destroy (err %v)", a.Ns, err)
			}
			for _, tag := range []string{"v1", "v2"} {
				if _, err := image.Head(context.Background(), image.Target{Registry: a.Reg.Host, Namespace: a.Ns, Node: "web01", Tag: tag}, image.Options{}); err != nil {
					return fmt.Errorf("image web01:%s should stay in the registry after destroy: %v", tag, err)
				}
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: a.Good("v1", "v1"),
				Check: resource.ComposeTestCheckFunc(
					a.CheckRunsStateImage("web01"),
					func(s *terraform.State) error {
						d, err := a.C.CS.AppsV1().Deployments(a.Ns).Get(context.Background(), "web01", metav1.GetOptions{})
						if err != nil {
							return err
						}
						p := d.Spec.Template.Spec
						if *d.Spec.Replicas != 1 || string(d.Spec.Strategy.Type) != "Recreate" || p.RuntimeClassName == nil || *p.RuntimeClassName != "fediversity" ||
							p.HostUsers == nil || *p.HostUsers || p.ServiceAccountName != "node-web01" {
							return fmt.Errorf("Deployment spec not as the k8s method wants: %+v", d.Spec)
						}
						uuid = acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "container_uuid")
						var envUUID string
						for _, e := range p.Containers[0].Env {
							if e.Name == "container_uuid" {
								envUUID = e.Value
							}
						}
						if envUUID != uuid || acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "machine_id") != strings.ReplaceAll(uuid, "-", "") {
							return fmt.Errorf("container_uuid env %q, state %q, machine_id %q", envUUID, uuid, acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "machine_id"))
						}
						if _, err := a.C.CS.NetworkingV1().NetworkPolicies(a.Ns).Get(context.Background(), k8s.NetworkPolicyName, metav1.GetOptions{}); err != nil {
							return fmt.Errorf("NetworkPolicy: %v", err)
						}
						if _, err := a.C.CS.CoreV1().ServiceAccounts(a.Ns).Get(context.Background(), "node-web01", metav1.GetOptions{}); err != nil {
							return fmt.Errorf("service account: %v", err)
						}
						pod, err := a.ReadyPod()
						if err != nil {
							return err
						}
						podUID = string(pod.UID)
						claimUID, err = a.ClaimUID()
						return err
					},
				),
			},
			{
				// An unchanged re-apply: nothing to do, and the pod is not restarted.
				Config:           a.Good("v1", "v1"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check: func(s *terraform.State) error {
					pod, err := a.ReadyPod()
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
				Config: a.Good("v2", "v2"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("fediversity_image.node", plancheck.ResourceActionReplace),
					plancheck.ExpectResourceAction("fediversity_k8s_rollout.web01", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeTestCheckFunc(
					a.CheckRunsStateImage("web01"),
					func(s *terraform.State) error {
						pod, err := a.ReadyPod()
						if err != nil {
							return err
						}
						if string(pod.UID) == podUID {
							return fmt.Errorf("pod %s was not replaced by the new image", podUID)
						}
						if c, _ := a.ClaimUID(); c != claimUID {
							return fmt.Errorf("claim was replaced (%s -> %s)", claimUID, c)
						}
						if u := acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "container_uuid"); u != uuid {
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
				Config:           a.Good("v2", "v2"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				// Import by <namespace>/<node>: the same container_uuid, image and claim settings.
				Config:                  a.Good("v2", "v2"),
				ResourceName:            "fediversity_k8s_rollout.web01",
				ImportState:             true,
				ImportStateIdFunc:       func(*terraform.State) (string, error) { return a.Ns + "/web01", nil },
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timings", "timeouts"},
			},
			{
				Config:            a.Good("v2", "v2"),
				ResourceName:      "fediversity_k8s_namespace.ns",
				ImportState:       true,
				ImportStateIdFunc: func(*terraform.State) (string, error) { return a.Ns, nil },
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
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: a.Good("v1", "v1"),
				Check: func(s *terraform.State) error {
					goodRef = acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "image_ref")
					uuid = acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "container_uuid")
					var err error
					claimUID, err = a.ClaimUID()
					return err
				},
			},
			{
				// The new pod does not become ready: back to the good image, fail with the reason.
				Config:      a.Faulty("broken"),
				ExpectError: rolledBack,
			},
			{
				// The state tells the truth: the cluster runs the good image, so the plan shows a change.
				PreConfig: func() {
					img, rev, err := a.DeploymentImage()
					if err != nil || img != goodRef {
						t.Fatalf("after the rollback the Deployment names %s (err %v), want %s", img, err, goodRef)
					}
					revAfterFirstFail = rev
					if _, err := a.ReadyPod(); err != nil {
						t.Fatalf("after the rollback: %v", err)
					}
					if c, _ := a.ClaimUID(); c != claimUID {
						t.Fatalf("the rollback replaced the claim")
					}
				},
				Config:             a.Faulty("broken"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{
				// The same configuration again tries the rollout again.
				Config:      a.Faulty("broken"),
				ExpectError: rolledBack,
			},
			{
				PreConfig: func() {
					img, rev, err := a.DeploymentImage()
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
				Config: a.Good("v3", "v3"),
				Check: resource.ComposeTestCheckFunc(
					a.CheckRunsStateImage("web01"),
					func(s *terraform.State) error {
						if u := acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "container_uuid"); u != uuid {
							return fmt.Errorf("container_uuid changed %s -> %s across the rollbacks", uuid, u)
						}
						if c, _ := a.ClaimUID(); c != claimUID {
							return fmt.Errorf("claim replaced")
						}
						return nil
					},
				),
			},
			{
				Config:           a.Good("v3", "v3"),
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
				PreCheck:                 func() { acctest.PreCheck(t) },
				ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
				Steps: []resource.TestStep{
					{
						Config: a.Good("v1", "v1"),
						Check: func(s *terraform.State) error {
							goodRef = acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "image_ref")
							return nil
						},
					},
					{
						Config:      a.Faulty(c.fault),
						ExpectError: regexp.MustCompile(`(?s)stopped\s+after.*` + c.reason + `.*set\s+back\s+to\s+the\s+previous\s+image`),
					},
					{
						PreConfig: func() {
							img, _, err := a.DeploymentImage()
							if err != nil || img != goodRef {
								t.Fatalf("after the rollback the Deployment names %s (err %v), want %s", img, err, goodRef)
							}
						},
						Config:             a.Faulty(c.fault),
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
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      a.Faulty("crashloop"),
				ExpectError: regexp.MustCompile(`(?s)CrashLoopBackOff.*no\s+previous\s+image`),
			},
			{
				Config: a.Good("v1", "v1"),
				Check:  a.CheckRunsStateImage("web01"),
			},
		},
	})
}

// TestAccK8sRollout_unreachableRegistry: the push fails and nothing in the cluster changes.
func TestAccK8sRollout_unreachableRegistry(t *testing.T) {
	a := newK8sAcc(t)
	var goodRef, podUID string
	closed := acctest.ClosedPort(t)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: a.Good("v1", "v1"),
				Check: func(s *terraform.State) error {
					goodRef = acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "image_ref")
					pod, err := a.ReadyPod()
					if err != nil {
						return err
					}
					podUID = string(pod.UID)
					return nil
				},
			},
			{
				Config:      a.Config(closed, "web01", "v2", "v2", ""),
				ExpectError: regexp.MustCompile(`(?s)Unable\s+to\s+push\s+node\s+image.*not\s+reachable`),
			},
			{
				PreConfig: func() {
					img, _, err := a.DeploymentImage()
					if err != nil || img != goodRef {
						t.Fatalf("after the failed push the Deployment names %s (err %v), want %s", img, err, goodRef)
					}
					pod, err := a.ReadyPod()
					if err != nil || string(pod.UID) != podUID {
						t.Fatalf("after the failed push the pod changed (err %v)", err)
					}
				},
				Config: a.Good("v1", "v1"),
			},
		},
	})
}

// TestAccK8sNamespace_missingRuntimeClass: the plan fails before any image is pushed.
func TestAccK8sNamespace_missingRuntimeClass(t *testing.T) {
	a := newK8sAcc(t)
	cfg := acctest.Config(a.Provider(a.Reg.Host) + fmt.Sprintf(`
resource "fediversity_k8s_namespace" "ns" {
  runtime_class = "no-such-runtime-class"
}

resource "fediversity_image" "node" {
  namespace = fediversity_k8s_namespace.ns.name
  node      = "web01"
  tag       = "v1"
  archive   = %q
}
`, a.Archives["v1"]))
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config:      cfg,
			ExpectError: regexp.MustCompile(`(?s)RuntimeClass\s+"no-such-runtime-class"`),
		}},
	})
	if n := a.Reg.Requests.Load(); n != 0 {
		t.Errorf("the registry saw %d requests: something was pushed although the plan failed", n)
	}
	if _, err := a.C.CS.CoreV1().Namespaces().Get(context.Background(), a.Ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s exists although the plan failed (err %v)", a.Ns, err)
	}
}

// TestAccK8sRollout_toplevelImage: an image built from a toplevel runs as the node's
// Deployment (kwok marks its pod ready; no container runtime runs it here).
func TestAccK8sRollout_toplevelImage(t *testing.T) {
	a := newK8sAcc(t)
	top := labtest.BuildClosure(t, labtest.ClosureGood)
	cfg := acctest.Config(a.Provider(a.Reg.Host) + fmt.Sprintf(`
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
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: cfg, Check: a.CheckRunsStateImage("web01")},
			{Config: cfg, ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}}},
		},
	})
}
