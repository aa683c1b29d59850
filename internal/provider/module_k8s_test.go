package provider

// Acceptance test of modules/k8s on the lab's control plane (kwok in the kubelet's
// place, see resource_k8s_rollout_test.go) with a real OCI registry on 127.0.0.1.

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAccModuleK8s(t *testing.T) {
	a := newK8sAcc(t)
	names := []string{"web01", "web02", "web03"}
	n1, n2, n3 := names[0], names[1], names[2]
	g := newGroupSample(t, "k8s", names)

	// roster: each node's image; image[node] names the archive (and tag) it is pushed from.
	config := func(image map[string]string, extra string) string {
		roster := map[string]any{}
		for _, n := range names {
			roster[n] = map[string]any{"archive": a.archives[image[n]], "tag": image[n]}
		}
		return testAccConfig(a.provider(a.reg.host) + fmt.Sprintf(`
module "group" {
  source          = %q
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  storage_class   = "fediversity-lab"
  timings         = { rollout_wait = "90s", pull_grace = "3s" }
  %s
}

output "summary" {
  value = module.group.summary
}
`, modulePath(t, "k8s"), g.file, hcl(g.baked()), hcl(roster), extra))
	}
	v1 := map[string]string{n1: "v1", n2: "v1", n3: "v1"}
	v2 := map[string]string{n1: "v1", n2: "v2", n3: "v1"}
	const (
		img     = "module.group.fediversity_image.node"
		rollout = "module.group.fediversity_k8s_rollout.node"
	)
	every := func(action plancheck.ResourceActionType) map[string]plancheck.ResourceActionType {
		return map[string]plancheck.ResourceActionType{n1: action, n2: action, n3: action}
	}
	// present: the Deployment and the claim of each node exist (or, with false, are gone).
	present := func(want bool, nodes ...string) labCheck {
		return func() error {
			ctx := context.Background()
			for _, n := range nodes {
				_, derr := a.c.CS.AppsV1().Deployments(a.ns).Get(ctx, n, metav1.GetOptions{})
				_, cerr := a.c.CS.CoreV1().PersistentVolumeClaims(a.ns).Get(ctx, n+"-state", metav1.GetOptions{})
				for what, err := range map[string]error{"Deployment " + n: derr, "claim " + n + "-state": cerr} {
					switch {
					case want && err != nil:
						return fmt.Errorf("%s: %v", what, err)
					case !want && !apierrors.IsNotFound(err):
						return fmt.Errorf("%s should be gone, the API says %v", what, err)
					}
				}
			}
			return nil
		}
	}

	resource.Test(t, resource.TestCase{
		PreCheck: func() { testAccPreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				PreConfig: func() { g.submit(names, nil) },
				Config:    config(v1, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(
					actions(img, names, every(plancheck.ResourceActionCreate)),
					actions(rollout, names, every(plancheck.ResourceActionCreate))...)},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)), present(true, names...)},
			},
			resource.TestStep{
				Config:           config(v1, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			resource.TestStep{
				// web02's application changes, and with it the image its build gives:
				// only web02's image and rollout change.
				PreConfig: func() { g.submit(names, map[string]map[string]any{g.apps[n2]: {"theme": "dark"}}) },
				Config:    config(v2, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(
					actions(img, names, map[string]plancheck.ResourceActionType{n2: plancheck.ResourceActionReplace}),
					actions(rollout, names, map[string]plancheck.ResourceActionType{n2: plancheck.ResourceActionUpdate})...)},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil))},
			},
			resource.TestStep{
				// The submission turns web03 off: its Deployment and its claim go.
				PreConfig: func() { g.submit([]string{n1, n2}, map[string]map[string]any{g.apps[n2]: {"theme": "dark"}}) },
				Config:    config(v2, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(
					actions(img, names, map[string]plancheck.ResourceActionType{n3: plancheck.ResourceActionDestroy}),
					actions(rollout, names, map[string]plancheck.ResourceActionType{n3: plancheck.ResourceActionDestroy})...)},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("summary", summaryCheck([]string{n1, n2}, []string{n3})), present(false, n3), present(true, n1, n2)},
			},
			resource.TestStep{
				// The module goes: so do the namespace and everything in it.
				Config: emptyRoot(),
				ConfigStateChecks: []statecheck.StateCheck{labCheck(func() error {
					ns, err := a.c.CS.CoreV1().Namespaces().Get(context.Background(), a.ns, metav1.GetOptions{})
					if err == nil && ns.DeletionTimestamp == nil {
						return fmt.Errorf("namespace %s is still there and not terminating", a.ns)
					}
					return nil
				})},
			},
		),
	})
}
