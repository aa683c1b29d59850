package test

// Acceptance test of modules/k8s's `deploy = "last-good"` on the lab's control plane
// (kwok in the kubelet's place) with a real OCI registry: a group of two nodes, lenient
// (strict = false), rolled out to v1 and then v2 (each node's last good template), then
// to a v3 whose pods the cluster refuses (a real ValidatingAdmissionPolicy, as in
// module_k8s_rollout_test.go). web02 is rolled back to v2 by its rollout; web01's
// rollback is refused too (a second policy), so its Deployment stays on v3. The plan of
// deploy = "last-good" then shows which node changes, to what: web01's image_ref from v3
// back to v2, web02's staying on v2; the apply puts both on their v2 images, ready, and
// the group stays there.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

func TestAccModuleK8sDeployLastGood(t *testing.T) {
	a := acctest.NewK8s(t)
	names := []string{"web01", "web02"}
	n1, n2 := names[0], names[1]
	g := newGroupSample(t, "k8s", names)
	config := func(version, deploy string) string {
		roster := map[string]any{}
		for _, n := range names {
			roster[n] = map[string]any{"archive": a.Archives[version], "tag": version}
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
  deploy          = %q
}
`, modulePath(t, "k8s"), g.file, hcl(g.baked()), hcl(roster), deploy))
	}
	const rollout = "module.group.module.wave_1.fediversity_k8s_rollout.node" // unstaged: every node is in wave 1
	addr := func(n string) string { return fmt.Sprintf("%s[%q]", rollout, n) }
	deployments := a.C.CS.AppsV1().Deployments(a.Ns)
	image := func(n string) (string, error) {
		d, err := deployments.Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return d.Spec.Template.Spec.Containers[0].Image, nil
	}
	v2 := map[string]string{} // each node's v2 image, its last good template's
	var v3Web01 string        // web01's v3 image, which its Deployment is left on
	var liftRollbackRefusal func()
	v2Of := func(n string) func() string { return func() string { return v2[n] } }

	resource.Test(t, resource.TestCase{
		PreCheck: func() { acctest.PreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				PreConfig: func() { g.submit(names, nil) },
				Config:    config("v1", "configured"),
			},
			resource.TestStep{
				Config: config("v2", "configured"),
				ConfigStateChecks: []statecheck.StateCheck{labCheck(func() error {
					for _, n := range names {
						img, err := image(n)
						if err != nil {
							return err
						}
						v2[n] = img
					}
					return nil
				})},
			},
			resource.TestStep{
				// v3's pods are refused (ReplicaFailure after pull_grace): each rollout
				// fails, leniently. web02 is rolled back to v2; web01's rollback is
				// refused, so it stays on v3, failed.
				PreConfig: func() {
					for _, n := range names {
						refusePods(t, a, n, v2[n])
					}
					liftRollbackRefusal = refuseRollbackTo(t, a, n1, v2[n1])
				},
				Config:             config("v3", "configured"),
				ExpectNonEmptyPlan: true,
				ConfigStateChecks: []statecheck.StateCheck{
					labCheck(func() error {
						var err error
						if v3Web01, err = image(n1); err != nil || v3Web01 == v2[n1] {
							return fmt.Errorf("%s's Deployment names %q (%v) after its refused rollback, want its v3 image", n1, v3Web01, err)
						}
						if img, err := image(n2); err != nil || img != v2[n2] {
							return fmt.Errorf("%s's Deployment names %q (%v) after its rollback, want its v2 image %s", n2, img, err, v2[n2])
						}
						return nil
					}),
					stateAttrs(addr(n1)).check(wantAttrs(map[string]func() string{"status": is("failed"), "last_good_image_ref": v2Of(n1)})),
					stateAttrs(addr(n2)).check(wantAttrs(map[string]func() string{"status": is("rolled_back"), "last_good_image_ref": v2Of(n2)})),
				},
			},
			resource.TestStep{
				// The group back to its last good set: the plan shows web01 going from
				// v3 back to v2 and web02 staying on v2; both run v2, ready.
				PreConfig: func() {
					liftRollbackRefusal()
				},
				Config: config("v3", "last-good"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plannedImage{addr: addr(n1), from: func() string { return v3Web01 }, to: v2Of(n1)},
					plannedImage{addr: addr(n2), from: v2Of(n2), to: v2Of(n2)},
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					labCheck(func() error {
						for _, n := range names {
							if img, err := image(n); err != nil || img != v2[n] {
								return fmt.Errorf("%s's Deployment names %q (%v) after deploy = last-good, want its v2 image %s", n, img, err, v2[n])
							}
							if err := readyPod(a, n); err != nil {
								return err
							}
						}
						return nil
					}),
					stateAttrs(addr(n1)).check(wantAttrs(map[string]func() string{"status": is("ready"), "image_ref": v2Of(n1), "running_image_ref": v2Of(n1)})),
					stateAttrs(addr(n2)).check(wantAttrs(map[string]func() string{"status": is("ready"), "image_ref": v2Of(n2), "running_image_ref": v2Of(n2)})),
				},
			},
			resource.TestStep{
				// Converged: v3 is not tried again.
				Config:           config("v3", "last-good"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			resource.TestStep{Config: emptyRoot()},
		),
	})
}

// is is a value known when the test is written; the images are known only during the
// test, so the checks take functions.
func is(s string) func() string { return func() string { return s } }

// wantAttrs checks string attributes of a resource's state.
func wantAttrs(want map[string]func() string) func(map[string]any) error {
	return func(attrs map[string]any) error {
		for k, w := range want {
			if got := attrs[k]; got != w() {
				return fmt.Errorf("%s is %v, want %s", k, got, w())
			}
		}
		return nil
	}
}

// plannedImage checks a rollout's planned update of image_ref, from the state's image
// (refreshed: what the Deployment names) to the one the plan rolls out.
type plannedImage struct {
	addr     string
	from, to func() string
}

func (c plannedImage) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	for _, rc := range req.Plan.ResourceChanges {
		if rc.Address != c.addr {
			continue
		}
		before, _ := rc.Change.Before.(map[string]any)
		after, _ := rc.Change.After.(map[string]any)
		if !rc.Change.Actions.Update() || before["image_ref"] != c.from() || after["image_ref"] != c.to() {
			resp.Error = fmt.Errorf("%s: planned %v with image_ref %v -> %v; want an update from %s to %s",
				c.addr, rc.Change.Actions, before["image_ref"], after["image_ref"], c.from(), c.to())
		}
		return
	}
	resp.Error = fmt.Errorf("%s: no planned change", c.addr)
}

// readyPod checks that node has one pod, ready.
func readyPod(a *acctest.K8s, node string) error {
	pods, err := a.C.CS.CoreV1().Pods(a.Ns).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.NodeLabel + "=" + node})
	if err != nil {
		return err
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		return fmt.Errorf("%s has %d pods, want one", node, len(live))
	}
	for _, c := range live[0].Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("%s's pod %s is not ready", node, live[0].Name)
}

// refuseRollbackTo makes the apiserver refuse, for real, every update of node's
// Deployment that moves it to image (its rollback to its last good template), as an
// operator's admission policy might. It returns when the policy is in force; lift
// removes it and returns when the Deployment may move to image again.
func refuseRollbackTo(t *testing.T, a *acctest.K8s, node, image string) (lift func()) {
	t.Helper()
	remove := a.AdmissionPolicy(acctest.Refusal{
		Name: "refuse-rollback-" + a.Ns + "-" + node, Op: admissionv1.Update, APIGroup: "apps", Resource: "deployments",
		Expression: fmt.Sprintf(`object.metadata.name != %q || !object.spec.template.spec.containers.exists(c, c.image == %q)`, node, image),
		Message:    "test policy: " + node + " may not move to " + image,
	})
	waitMoveAllowed(t, a, node, image, false)
	return func() {
		remove()
		waitMoveAllowed(t, a, node, image, true)
	}
}

// waitMoveAllowed waits until a dry-run update of node's Deployment to image is allowed
// (or refused, with allowed false): the apiserver takes a policy change up a moment after
// it is written.
func waitMoveAllowed(t *testing.T, a *acctest.K8s, node, image string, allowed bool) {
	t.Helper()
	deps := a.C.CS.AppsV1().Deployments(a.Ns)
	for i := 0; ; i++ {
		d, err := deps.Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d.Spec.Template.Spec.Containers[0].Image = image
		_, err = deps.Update(context.Background(), d, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if refused := err != nil && !apierrors.IsConflict(err); refused != allowed {
			return
		}
		if i > 150 {
			t.Fatalf("a move of %s's Deployment to %s is not allowed=%v after 30s (last %v)", node, image, allowed, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
