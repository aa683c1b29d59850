package k8s_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// otherWriterManager is the field manager the test's other writer uses.
const otherWriterManager = "acc-other-writer"

// setImageWhenRolledOut is another writer: once the Deployment of web01 names an image of
// repository part want (this run's rollout), it sets the image to theirs. It reports on the
// channel when it wrote, or why it could not.
func (a *k8sAcc) setImageWhenRolledOut(want, theirs string) <-chan error {
	done := make(chan error, 1)
	go func() {
		deps := a.C.CS.AppsV1().Deployments(a.Ns)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for ctx.Err() == nil {
			d, err := deps.Get(ctx, "web01", metav1.GetOptions{})
			if err == nil && strings.Contains(d.Spec.Template.Spec.Containers[0].Image, want) {
				// As kubectl does: read again on a conflict (the controllers write the status).
				done <- retry.RetryOnConflict(retry.DefaultRetry, func() error {
					d, err := deps.Get(ctx, "web01", metav1.GetOptions{})
					if err != nil {
						return err
					}
					d.Spec.Template.Spec.Containers[0].Image = theirs
					_, err = deps.Update(ctx, d, metav1.UpdateOptions{FieldManager: otherWriterManager})
					return err
				})
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		done <- fmt.Errorf("the rollout of %s never reached the Deployment", want)
	}()
	return done
}

// imageRefChange checks a plan's change of web01's image_ref: from (the state) to (the
// configuration).
type imageRefChange struct{ from, to string }

func (c imageRefChange) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	for _, rc := range req.Plan.ResourceChanges {
		if rc.Address != "fediversity_k8s_rollout.web01" {
			continue
		}
		before, _ := rc.Change.Before.(map[string]any)
		after, _ := rc.Change.After.(map[string]any)
		if before["image_ref"] != c.from || !strings.Contains(fmt.Sprint(after["image_ref"]), c.to) {
			resp.Error = fmt.Errorf("the plan changes image_ref %v -> %v, want %s -> …%s…", before["image_ref"], after["image_ref"], c.from, c.to)
		}
		return
	}
	resp.Error = fmt.Errorf("the plan has no change of fediversity_k8s_rollout.web01")
}

// TestAccK8sRollout_otherWriterDuringWait: while the apply waits for its rollout (a broken
// image, so the wait would otherwise last the pull grace of 60s), another writer sets the
// Deployment's image. The apply stops, fails naming that image and the writer's field
// manager, and sets nothing back: the Deployment keeps the other writer's image. The state
// says so (the plan without refresh shows image_ref going from that image back to the
// configured one), and so does the refreshed plan.
func TestAccK8sRollout_otherWriterDuringWait(t *testing.T) {
	a := newK8sAcc(t)
	a.PullGrace = "60s"
	theirs := a.Reg.Host + "/" + a.Ns + "/elsewhere@sha256:" + strings.Repeat("5e", 32)
	var goodRef string
	var wrote <-chan error
	drift := imageRefChange{from: theirs, to: "/web01-broken@sha256:"}
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
				PreConfig: func() { wrote = a.setImageWhenRolledOut("/web01-broken@", theirs) },
				Config:    a.Faulty("broken"),
				ExpectError: regexp.MustCompile(`(?s)changed\s+by\s+another\s+writer.*` +
					`changed\s+by\s+another\s+writer\s+\(field\s+manager\s+` + otherWriterManager + `\)\s+after\s+this\s+run\s+rolled\s+out\s+\S+/web01-broken@\S+:\s+` +
					`it\s+now\s+names\s+image\s+` + regexp.QuoteMeta(theirs) + `.*Nothing\s+was\s+set\s+back`),
			},
			{
				PreConfig: func() {
					if err := <-wrote; err != nil {
						t.Fatalf("the other writer: %v", err)
					}
					img, _, err := a.DeploymentImage()
					if err != nil || img != theirs {
						t.Fatalf("after the failed apply the Deployment names %s (err %v), want the other writer's %s (the last good one was %s)", img, err, theirs, goodRef)
					}
				},
				Config:             a.Faulty("broken"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PostApplyPreRefresh:  []plancheck.PlanCheck{drift}, // the state as the apply left it
					PostApplyPostRefresh: []plancheck.PlanCheck{drift},
				},
			},
		},
	})
}
