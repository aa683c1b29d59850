package test

// Acceptance test of modules/k8s on the lab's control plane (kwok in the kubelet's
// place, see resource_k8s_rollout_test.go) with a real OCI registry on 127.0.0.1. Each
// node's image is built from a real toplevel (the lab's stand-in system, built by nix).

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

func TestAccModuleK8s(t *testing.T) {
	a := acctest.NewK8s(t)
	names := []string{"web01", "web02", "web03"}
	n1, n2, n3 := names[0], names[1], names[2]
	g := newGroupSample(t, "k8s", names)

	// Toplevels as the operator's build gives them for each version of a node's
	// configuration (a seed per version gives distinct store paths).
	top := map[string]string{}
	for _, v := range []string{"v1", "v2", "v3"} {
		top[v] = labtest.BuildClosureSeed(t, labtest.ClosureGood, "mk8s-"+v)
	}
	// roster: system[node] names the toplevel the node's image is built from.
	addresses := groupAddresses(names)
	config := func(system map[string]string, extra string) string {
		roster := map[string]any{}
		for _, n := range names {
			roster[n] = map[string]any{"toplevel": top[system[n]]}
		}
		return acctest.Config(a.Provider(a.Reg.Host) + fmt.Sprintf(`
module "group" {
  source          = %q
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  storage_class   = "fediversity-lab"
  timings         = { rollout_wait = "90s", pull_grace = "3s" }
  addresses       = %s
  %s
}

output "summary" {
  value = module.group.summary
}
`+dnsOutputs, modulePath(t, "k8s"), g.file, hcl(g.baked()), hcl(roster), hcl(addresses), extra))
	}
	// The submission of the step that turns web03 off, which the operator approves.
	disabled3 := func() string {
		return g.submit([]string{n1, n2}, map[string]map[string]any{g.apps[n2]: {"theme": "dark"}})
	}
	approved := disabled3()
	v1 := map[string]string{n1: "v1", n2: "v1", n3: "v1"}
	v2 := map[string]string{n1: "v1", n2: "v2", n3: "v1"}
	const (
		img     = "module.group.module.wave_1.fediversity_image.node" // unstaged: every node is in wave 1
		rollout = "module.group.module.wave_1.fediversity_k8s_rollout.node"
	)
	every := func(action plancheck.ResourceActionType) map[string]plancheck.ResourceActionType {
		return map[string]plancheck.ResourceActionType{n1: action, n2: action, n3: action}
	}
	// present: the Deployment and the claim of each node exist (or, with false, are gone).
	present := func(want bool, nodes ...string) labCheck {
		return func() error {
			ctx := context.Background()
			for _, n := range nodes {
				_, derr := a.C.CS.AppsV1().Deployments(a.Ns).Get(ctx, n, metav1.GetOptions{})
				_, cerr := a.C.CS.CoreV1().PersistentVolumeClaims(a.Ns).Get(ctx, n+"-state", metav1.GetOptions{})
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
		PreCheck: func() { acctest.PreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				PreConfig: func() { g.submit(names, nil) },
				Config:    config(v1, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(
					actions(img, names, every(plancheck.ResourceActionCreate)),
					actions(rollout, names, every(plancheck.ResourceActionCreate))...)},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)), present(true, names...),
					statecheck.ExpectKnownOutputValue("dns_records", dnsRecordsCheck(names, names)),
					statecheck.ExpectKnownOutputValue("domain", knownvalue.StringExact(groupDomain))},
			},
			resource.TestStep{
				// Addresses that cannot make a record fail the plan, naming the node and the
				// value, before anything changes.
				Config:      strings.Replace(config(v1, ""), hcl(addresses), hcl(map[string][]string{n1: {"192.0.2.300"}, "web09": {"192.0.2.19"}}), 1),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)addresses\s+holds\s+values\s+that\s+are\s+no\s+IP\s+address:\s+web01:\s+"192\.0\.2\.300"`),
			},
			resource.TestStep{
				Config:      strings.Replace(config(v1, ""), hcl(addresses), hcl(map[string][]string{"web09": {"192.0.2.19"}}), 1),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)addresses\s+names\s+nodes\s+that\s+the\s+baked\s+configuration\s+does\s+not\s+have:\s+web09`),
			},
			resource.TestStep{
				Config:           config(v1, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			resource.TestStep{
				// web02's application changes, and with it the toplevel its build gives:
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
				PreConfig: func() { disabled3() },
				Config:    config(v2, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(
					actions(img, names, map[string]plancheck.ResourceActionType{n3: plancheck.ResourceActionDestroy}),
					actions(rollout, names, map[string]plancheck.ResourceActionType{n3: plancheck.ResourceActionDestroy})...)},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("summary", summaryCheck([]string{n1, n2}, []string{n3})), present(false, n3), present(true, n1, n2),
					// The disabled node's records go with it.
					statecheck.ExpectKnownOutputValue("dns_records", dnsRecordsCheck(names, []string{n1, n2}))},
			},
			resource.TestStep{
				// The submission changes after the operator approved the last one (the
				// digest the module is given), and with it the systems of web01 and web02:
				// both image pushes refuse at apply (the rollouts that follow them are
				// never reached), and the cluster keeps what it ran.
				PreConfig: func() {
					g.submit([]string{n1, n2}, map[string]map[string]any{g.apps[n1]: {"theme": "light"}, g.apps[n2]: {"theme": "light"}})
				},
				Config:      config(map[string]string{n1: "v3", n2: "v3", n3: "v1"}, fmt.Sprintf("submission_digest = %q", approved)),
				ExpectError: refusedAll("push the image of", []string{n1, n2}),
			},
			resource.TestStep{
				PreConfig:         func() { disabled3() },
				Config:            config(v2, ""),
				ConfigPlanChecks:  resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				ConfigStateChecks: []statecheck.StateCheck{present(true, n1, n2)},
			},
			resource.TestStep{
				// The module goes: so do the namespace and everything in it.
				Config: emptyRoot(),
				ConfigStateChecks: []statecheck.StateCheck{labCheck(func() error {
					ns, err := a.C.CS.CoreV1().Namespaces().Get(context.Background(), a.Ns, metav1.GetOptions{})
					if err == nil && ns.DeletionTimestamp == nil {
						return fmt.Errorf("namespace %s is still there and not terminating", a.Ns)
					}
					return nil
				})},
			},
		),
	})
}
