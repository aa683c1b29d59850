package k8s_test

// deploy = "last-good": the rollout goes back to the node's last good template (the last
// pod template seen ready), and the plan shows it, image_ref changing to that template's
// image. A node with no such template fails the plan, naming it.

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

const web01 = "fediversity_k8s_rollout.web01"

// lenient is config with the rollout's fail_when_not_ready = false.
func lenient(config string) string {
	return strings.Replace(config, `node          = "web01"`, `node          = "web01"
  fail_when_not_ready = false`, 1)
}

// lastGood is config with the rollout's image_ref replaced by deploy = "last-good".
func lastGood(config string) string {
	return strings.Replace(config, `image_ref     = fediversity_image.node.image_ref`, `deploy        = "last-good"`, 1)
}

// inOrder matches the texts in this order, each space also a line break of the CLI's
// wrapped output.
func inOrder(texts ...string) *regexp.Regexp {
	for i, t := range texts {
		texts[i] = strings.ReplaceAll(regexp.QuoteMeta(t), " ", `\s+`)
	}
	return regexp.MustCompile(`(?s)` + strings.Join(texts, ".*"))
}

// plannedImageRef checks the planned change of a rollout's image_ref: an update from the
// image *from to the image *to (pointers, since the images are known only during the test).
type plannedImageRef struct {
	addr     string
	from, to *string
}

func (c plannedImageRef) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	for _, rc := range req.Plan.ResourceChanges {
		if rc.Address != c.addr {
			continue
		}
		before, _ := rc.Change.Before.(map[string]any)
		after, _ := rc.Change.After.(map[string]any)
		if !rc.Change.Actions.Update() || before["image_ref"] != *c.from || after["image_ref"] != *c.to {
			resp.Error = fmt.Errorf("%s: planned %v with image_ref %v -> %v; want an update from %s to %s",
				c.addr, rc.Change.Actions, before["image_ref"], after["image_ref"], *c.from, *c.to)
		}
		return
	}
	resp.Error = fmt.Errorf("%s: no planned change", c.addr)
}

// Good v1, then good v2 (the last good template), then a lenient rollout of an image
// that never becomes ready whose rollback the apiserver refuses (a real
// ValidatingAdmissionPolicy): the Deployment is left on the bad image. With the refusal
// lifted, deploy = "last-good" plans image_ref going back to v2, and the apply rolls the
// node back to it, ready, with a state that says so; the group then stays there (no
// retry of the bad image). Setting deploy back to the configured image rolls that out.
func TestAccK8sRollout_deployLastGoodGoesBackToTheLastReadyTemplate(t *testing.T) {
	a := newK8sAcc(t)
	var v1Ref, v2Ref, brokenRef string
	var lift func()
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: a.Good("v1", "v1"),
				Check:  func(s *terraform.State) error { v1Ref = acctest.StateAttr(s, web01, "image_ref"); return nil },
			},
			{
				Config: a.Good("v2", "v2"),
				Check: func(s *terraform.State) error {
					v2Ref = acctest.StateAttr(s, web01, "image_ref")
					if v2Ref == v1Ref || acctest.StateAttr(s, web01, "last_good_image_ref") != v2Ref {
						return fmt.Errorf("after v2 the state has image_ref %s (v1 %s), last_good_image_ref %s; want v2 as the last good",
							v2Ref, v1Ref, acctest.StateAttr(s, web01, "last_good_image_ref"))
					}
					lift = a.refuseRollbacks(t)
					return nil
				},
			},
			{
				// Lenient: the pod never becomes ready (ImagePullBackOff), the rollback is
				// refused, the apply goes on with a warning; the Deployment stays on the
				// bad image and the state says so.
				Config:             lenient(a.Faulty("broken")),
				ExpectNonEmptyPlan: true,
				Check: func(s *terraform.State) error {
					brokenRef = acctest.StateAttr(s, web01, "running_image_ref")
					img, _, err := a.DeploymentImage()
					if err != nil || img != brokenRef || !strings.Contains(img, "/web01-broken@") {
						return fmt.Errorf("after the refused rollback the Deployment names %s (%v), state running_image_ref %s; want the broken image", img, err, brokenRef)
					}
					if st := acctest.StateAttr(s, web01, "status"); st != "failed" || acctest.StateAttr(s, web01, "last_good_image_ref") != v2Ref {
						return fmt.Errorf("state status %s, last_good_image_ref %s; want failed, %s", st, acctest.StateAttr(s, web01, "last_good_image_ref"), v2Ref)
					}
					return nil
				},
			},
			{
				// Back to the last good template: the plan shows image_ref going from
				// the broken image (what the cluster runs) to v2's.
				PreConfig: func() { lift() }, // lift waits until a move to an image like v2 is allowed
				Config:    lenient(lastGood(a.Faulty("broken"))),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plannedImageRef{addr: web01, from: &brokenRef, to: &v2Ref},
				}},
				Check: func(s *terraform.State) error {
					img, _, err := a.DeploymentImage()
					if err != nil || img != v2Ref {
						return fmt.Errorf("after deploy = last-good the Deployment names %s (%v), want the last good image %s", img, err, v2Ref)
					}
					if _, err := a.ReadyPod(); err != nil {
						return fmt.Errorf("after deploy = last-good: %v", err)
					}
					for attr, want := range map[string]string{"image_ref": v2Ref, "running_image_ref": v2Ref, "last_good_image_ref": v2Ref, "status": "ready", "deploy": "last-good"} {
						if got := acctest.StateAttr(s, web01, attr); got != want {
							return fmt.Errorf("after deploy = last-good the state's %s is %q, want %q", attr, got, want)
						}
					}
					return nil
				},
			},
			{
				// Converged: the broken image is not tried again.
				Config:           lenient(lastGood(a.Faulty("broken"))),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				// deploy back to the configured image: it is rolled out.
				Config: a.Good("v3", "v3"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(web01, plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeTestCheckFunc(
					a.CheckRunsStateImage("web01"),
					resource.TestCheckResourceAttr(web01, "status", "ready"),
					resource.TestCheckNoResourceAttr(web01, "deploy"),
				),
			},
		},
	})
}

// A node whose pod was never seen ready has no last good template: deploy = "last-good"
// fails the plan, naming the node and what to do, and leaves the node as it was. And
// image_ref must be given exactly when the configured image is rolled out.
func TestAccK8sRollout_deployLastGoodWithoutRecordFailsThePlan(t *testing.T) {
	a := newK8sAcc(t)
	var brokenRef string
	untouched := func() {
		img, _, err := a.DeploymentImage()
		if err != nil || img != brokenRef {
			t.Fatalf("the Deployment names %s (%v), want the broken image %s it had", img, err, brokenRef)
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				// A first rollout that never becomes ready, lenient: nothing to go back
				// to, status failed, no last good template.
				Config:             lenient(a.Faulty("broken")),
				ExpectNonEmptyPlan: true,
				Check: func(s *terraform.State) error {
					brokenRef = acctest.StateAttr(s, web01, "running_image_ref")
					if st := acctest.StateAttr(s, web01, "status"); st != "failed" || acctest.StateAttr(s, web01, "last_good_image_ref") != "" {
						return fmt.Errorf("state status %s, last_good_image_ref %q; want failed and none", st, acctest.StateAttr(s, web01, "last_good_image_ref"))
					}
					return nil
				},
			},
			{
				Config: lenient(lastGood(a.Faulty("broken"))),
				ExpectError: inOrder(`Node web01 has no last good template: no pod of it was ever seen ready`,
					`Node web01, phase read-last-good:`, `deploy = "last-good" needs one. Roll out an image whose pod becomes ready first`,
					`or set deploy = "configured"`),
			},
			{
				PreConfig:   untouched,
				Config:      strings.Replace(lenient(a.Faulty("broken")), `node          = "web01"`, "node          = \"web01\"\n  deploy = \"last-good\"", 1),
				ExpectError: inOrder("`image_ref` is set for web01, which rolls out its last good template", "remove `image_ref`"),
			},
			{
				PreConfig:   untouched,
				Config:      strings.Replace(lenient(a.Faulty("broken")), `image_ref     = fediversity_image.node.image_ref`, "", 1),
				ExpectError: inOrder("Node web01 has no `image_ref`", `or set deploy = "last-good"`),
			},
			{
				PreConfig:          untouched,
				Config:             lenient(a.Faulty("broken")),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
		},
	})
}

// The apply reads the last good template again: one recorded since the plan (here
// written by the test, as a rollout in between would) is refused, naming both images,
// and the node is left as it was. Run by the CLI under test, for a saved plan.
func TestAccK8sRollout_deployLastGoodRefusesARecordChangedSinceThePlan(t *testing.T) {
	acctest.PreCheck(t)
	a := newK8sAcc(t)
	r := newCLIRun(t)
	apply := func(config string) {
		t.Helper()
		r.write(config)
		if code, out := r.run("apply", "-auto-approve", "-no-color", "-input=false"); code != 0 {
			t.Fatalf("apply: exit %d\n%s", code, out)
		}
	}
	t.Cleanup(func() { r.run("destroy", "-auto-approve", "-no-color", "-input=false") })
	deps := a.C.CS.AppsV1().Deployments(a.Ns)
	ctx := context.Background()

	apply(a.Good("v1", "v1"))
	d, err := deps.Get(ctx, "web01", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v1Record := d.Annotations[k8s.LastGoodAnnotation]
	v1Ref := d.Spec.Template.Spec.Containers[0].Image
	apply(a.Good("v2", "v2"))

	// Another writer moves the node to an image that never becomes ready. It reads the
	// Deployment afresh on a conflict, as kubectl does: the deployment controller writes
	// the object's status after v2's rollout, which can land between the read and the
	// update (seen in CI: "the object has been modified").
	broken := a.Reg.Host + "/" + a.Ns + "/web01-broken@sha256:" + strings.Repeat("0", 64)
	var v2Ref string
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := deps.Get(ctx, "web01", metav1.GetOptions{})
		if err != nil {
			return err
		}
		v2Ref = d.Spec.Template.Spec.Containers[0].Image
		d.Spec.Template.Spec.Containers[0].Image = broken
		_, err = deps.Update(ctx, d, metav1.UpdateOptions{FieldManager: "kubectl-set"})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	r.write(lastGood(a.Good("v2", "v2")))
	if code, out := r.run("plan", "-out=back.plan", "-no-color", "-input=false"); code != 0 ||
		!inOrder(`image_ref`, `"`+broken+`" -> "`+v2Ref+`"`).MatchString(out) {
		t.Fatalf("plan of deploy = last-good: exit %d, want 0 with image_ref going from %s back to %s\n%s", code, broken, v2Ref, out)
	}
	// A rollout since the plan recorded v1's template as the last good one.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, k8s.LastGoodAnnotation, v1Record)
	if _, err := deps.Patch(ctx, "web01", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out := r.run("apply", "-no-color", "-input=false", "back.plan")
	if code == 0 || !inOrder(`The last good template of web01 changed since the plan`, `phase read-last-good`,
		`its last good template runs `+v1Ref+` now, but the plan showed `+v2Ref, `Plan again`, `left untouched`).MatchString(out) {
		t.Fatalf("apply of a plan whose record changed since: exit %d, want a failure naming web01, both images and what to do\n%s", code, out)
	}
	if img, _, err := a.DeploymentImage(); err != nil || img != broken {
		t.Fatalf("after the refused apply the Deployment names %s (%v), want %s as it was", img, err, broken)
	}
}
