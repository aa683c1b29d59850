package test

// Acceptance test of a staged rollout in modules/k8s on the lab's control plane (kwok in
// the kubelet's place) with a real OCI registry: a group of three nodes in waves of one
// (the canary web01, then web02, then web03), lenient (strict = false).
//
// The failing pod is the cluster's doing, for real: a ValidatingAdmissionPolicy refuses
// the pods of one node, as an operator's admission policy would, so its ReplicaSet cannot
// create the pod and the rollout stops after pull_grace. (kwok's fault images need the
// fault in the repository, which modules/k8s names after the node.)

import (
	"context"
	"fmt"
	"testing"
	"time"

	tfjson "github.com/hashicorp/terraform-json"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// A canary that cannot start halts the apply at the gate after wave 1 (budget 0): the
// later nodes have no Deployment and no resource in the state; once the cluster lets the
// canary start, the apply resumes and completes. Then, under a budget of 1, a canary
// rolled back to its previous image does not halt the rest: the state says what runs and
// the next plan rolls the canary out again.
func TestAccModuleK8sRolloutHaltsAtTheGate(t *testing.T) {
	a := acctest.NewK8s(t)
	names := []string{"web01", "web02", "web03"}
	n1, n2, n3 := names[0], names[1], names[2] // n1 is the canary: the first by name
	g := newGroupSample(t, "k8s", names)
	top := map[string]string{}
	for _, v := range []string{"v1", "v2"} {
		top[v] = labtest.BuildClosureSeed(t, labtest.ClosureGood, "mk8sr-"+v)
	}
	config := func(version, budget string) string {
		roster := map[string]any{}
		for _, n := range names {
			roster[n] = map[string]any{"toplevel": top[version]}
		}
		return acctest.Config(a.Provider(a.Reg.Host) + fmt.Sprintf(`
module "group" {
  source          = %q
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  storage_class   = "fediversity-lab"
  timings         = { rollout_wait = "90s", pull_grace = "3s" }
  strict          = false
  canary          = 1
  wave_size       = "1"
  failure_budget  = %q
}

output "summary" {
  value = module.group.summary
}
`, modulePath(t, "k8s"), g.file, hcl(g.baked()), hcl(roster), budget))
	}
	rollout := func(wave int) string {
		return fmt.Sprintf("module.group.module.wave_%d.fediversity_k8s_rollout.node", wave)
	}
	deployments := a.C.CS.AppsV1().Deployments(a.Ns)
	image := func(n string) (string, error) {
		d, err := deployments.Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return d.Spec.Template.Spec.Containers[0].Image, nil
	}
	noDeployment := labCheck(func() error {
		for _, n := range []string{n2, n3} {
			if _, err := deployments.Get(context.Background(), n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s is behind the halted gate and must have no Deployment; the API says %v", n, err)
			}
		}
		return nil
	})
	var v1Image string // web01's v1 image, as its Deployment names it

	resource.Test(t, resource.TestCase{
		PreCheck: func() { acctest.PreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				// The cluster refuses every pod of the canary: its first rollout fails
				// (nothing to go back to), lenient, and the gate after wave 1 halts the
				// apply naming it and why.
				PreConfig: func() {
					g.submit(names, nil)
					refusePods(t, a, n1, "")
				},
				Config: config("v1", "0"),
				ExpectError: wrapped(`The rollout halted after wave 1`,
					`the rollout halted after wave 1 of 3: 1 of the 1 nodes deployed failed (`+n1+`), past the failure budget of 0`,
					n1+`: rollout failed`),
			},
			resource.TestStep{
				// Fixed (the cluster lets the canary start): web02 and web03 were not
				// touched (no Deployment; the plan creates their image and rollout, so the
				// state has none), and the apply resumes: the canary is rolled out again,
				// the gates judge, waves 2 and 3 roll out.
				// Once the refusal is lifted the cluster makes the canary's pod by itself,
				// ready with no apply waiting for it; the test waits for that (as it
				// happened in a cold CI run). The refresh then finds it ready, but nothing
				// recorded it as the last good template: the plan must still roll it out,
				// so that its wait records it, or the rollback of step 4 would have nothing
				// to go back to.
				PreConfig: func() {
					if err := noDeployment(); err != nil {
						t.Fatal(err)
					}
					liftPodRefusal(t, a, n1)
					for i := 0; ; i++ { // bounded: 180 polls of 1 s
						d, err := deployments.Get(context.Background(), n1, metav1.GetOptions{})
						if err == nil && d.Status.ReadyReplicas >= 1 {
							break
						}
						if i == 180 {
							t.Fatalf("the cluster did not make %s's pod ready by itself within 3 minutes of the refusal's lift (last error %v)", n1, err)
						}
						time.Sleep(time.Second)
					}
				},
				Config: config("v1", "0"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: concatChecks(
					actions(rollout(1), []string{n1}, map[string]plancheck.ResourceActionType{n1: plancheck.ResourceActionUpdate}),
					actions(rollout(2), []string{n2}, map[string]plancheck.ResourceActionType{n2: plancheck.ResourceActionCreate}),
					actions(rollout(3), []string{n3}, map[string]plancheck.ResourceActionType{n3: plancheck.ResourceActionCreate}),
					actions("module.group.module.wave_2.fediversity_image.node", []string{n2}, map[string]plancheck.ResourceActionType{n2: plancheck.ResourceActionCreate}),
					[]plancheck.PlanCheck{plancheck.ExpectResourceAction("module.group.fediversity_rollout_gate.after_wave_1[0]", plancheck.ResourceActionCreate)},
				)},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil))},
			},
			resource.TestStep{
				// Nothing changed: nothing to do, the gates included.
				Config:           config("v1", "0"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			resource.TestStep{
				// A budget of 1, and every node to v2, but the cluster refuses the canary's
				// new pod (its v1 pod may still start): the canary is rolled back, with a
				// warning, and does not halt the rest: web02 and web03 run v2. The state says
				// the canary runs v1 (status rolled_back), so the plan after the apply is
				// not empty.
				PreConfig: func() {
					var err error
					if v1Image, err = image(n1); err != nil {
						t.Fatal(err)
					}
					refusePods(t, a, n1, v1Image)
				},
				Config:             config("v2", "1"),
				ExpectNonEmptyPlan: true,
				// The next plan rolls the canary out again: it does not look converged.
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: concatChecks(
					actions(rollout(1), []string{n1}, map[string]plancheck.ResourceActionType{n1: plancheck.ResourceActionUpdate}),
					actions(rollout(2), []string{n2}, nil),
					actions(rollout(3), []string{n3}, nil),
				)},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("summary", knownvalue.ObjectExact(map[string]knownvalue.Check{
						"ok":       knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact(n2), knownvalue.StringExact(n3)}),
						"failing":  knownvalue.MapExact(map[string]knownvalue.Check{n1: knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("rollout rolled_back")})}),
						"disabled": knownvalue.ListExact(nil),
					})),
					// The state is true: the canary's rollout says its v1 image runs.
					stateAttrs(rollout(1) + `["` + n1 + `"]`).check(func(attrs map[string]any) error {
						if attrs["status"] != "rolled_back" || attrs["running_image_ref"] != v1Image {
							return fmt.Errorf("%s's rollout has status %v, running_image_ref %v; want rolled_back and the v1 image the cluster runs, %s",
								n1, attrs["status"], attrs["running_image_ref"], v1Image)
						}
						return nil
					}),
					labCheck(func() error {
						if img, err := image(n1); err != nil || img != v1Image {
							return fmt.Errorf("%s's Deployment names %q (%v) after the rollback, want its v1 image %s", n1, img, err, v1Image)
						}
						for _, n := range []string{n2, n3} {
							if img, err := image(n); err != nil || img == v1Image {
								return fmt.Errorf("%s's Deployment names %q (%v), want its v2 image", n, img, err)
							}
						}
						return nil
					}),
				},
			},
			resource.TestStep{Config: emptyRoot()},
		),
	})
}

// stateAttrs is a state check of the attributes of the resource at addr, which may be
// in a child module (statecheck.ExpectKnownValue reads the root module only).
type stateAttrs string

func (addr stateAttrs) find(m *tfjson.StateModule) map[string]any {
	if m == nil {
		return nil
	}
	for _, r := range m.Resources {
		if r.Address == string(addr) {
			return r.AttributeValues
		}
	}
	for _, c := range m.ChildModules {
		if a := addr.find(c); a != nil {
			return a
		}
	}
	return nil
}

type stateAttrsCheck struct {
	addr  stateAttrs
	check func(map[string]any) error
}

func (c stateAttrsCheck) CheckState(_ context.Context, req statecheck.CheckStateRequest, resp *statecheck.CheckStateResponse) {
	var attrs map[string]any
	if req.State != nil && req.State.Values != nil {
		attrs = c.addr.find(req.State.Values.RootModule)
	}
	if attrs == nil {
		resp.Error = fmt.Errorf("%s: not in the state", c.addr)
		return
	}
	resp.Error = c.check(attrs)
}

func (addr stateAttrs) check(f func(map[string]any) error) statecheck.StateCheck {
	return stateAttrsCheck{addr, f}
}

// refusePods makes the apiserver refuse, for real, every pod of node in a's namespace
// (its image's repository is <registry>/<namespace>/<node>), except one naming the image
// allowed (when given). It returns when the policy is in force.
func refusePods(t *testing.T, a *acctest.K8s, node, allowed string) {
	t.Helper()
	repo := "/" + a.Ns + "/" + node + "@"
	// Written before the module makes the namespace: the image's repository names it.
	a.AdmissionPolicy(acctest.Refusal{
		Name: "refuse-pods-" + a.Ns + "-" + node, Op: admissionv1.Create, Resource: "pods", AnyNamespace: true,
		Expression: fmt.Sprintf(`!object.spec.containers.exists(c, c.image.contains(%q) && c.image != %q)`, repo, allowed),
		Message:    "test policy: the pods of " + node + " are refused",
	})
	waitPodRefusal(t, a, node, true)
}

// liftPodRefusal removes refusePods' policy and returns when it is no longer in force.
func liftPodRefusal(t *testing.T, a *acctest.K8s, node string) {
	t.Helper()
	ctx := context.Background()
	api := a.C.CS.AdmissionregistrationV1()
	name := "refuse-pods-" + a.Ns + "-" + node
	_ = api.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
	_ = api.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
	waitPodRefusal(t, a, node, false)
}

// waitPodRefusal waits until a dry-run create of a pod of node (in the namespace
// "default", which always exists; the image names a's namespace) is refused (inForce) or
// allowed. The apiserver takes a policy change up a moment after it is written.
func waitPodRefusal(t *testing.T, a *acctest.K8s, node string, inForce bool) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "policy-probe-"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "probe", Image: "127.0.0.1:1/" + a.Ns + "/" + node + "@sha256:" + fmt.Sprintf("%064d", 0),
		}}},
	}
	for i := 0; ; i++ {
		_, err := a.C.CS.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		refused := err != nil && (apierrors.IsInvalid(err) || apierrors.IsForbidden(err))
		if refused == inForce && (refused || err == nil) {
			return
		}
		if i > 150 {
			t.Fatalf("the pod policy of %s is not in force=%v after 30s (last %v)", node, inForce, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
