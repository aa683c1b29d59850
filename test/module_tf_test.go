package test

// Acceptance test of modules/tf on three throwaway lab nodes reached over SSH: the
// whole group from one submission, as an operator runs it.

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

func TestAccModuleTF(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	lab := []labtest.Node{labtest.NewInstance(t, "mtf-a"), labtest.NewInstance(t, "mtf-b"), labtest.NewInstance(t, "mtf-c")}
	var names []string
	roster := map[string]any{}
	for _, n := range lab {
		names = append(names, n.Name)
		roster[n.Name] = map[string]any{"host": n.SSHHost, "port": n.SSHPort, "host_key": n.HostKey}
	}
	a, b, c := names[0], names[1], names[2]
	// A node's own timings win over the group's (every key of a roster's node entry
	// reaches its fediversity_node_switch).
	roster[a].(map[string]any)["timings"] = map[string]string{"lock_wait": "4m"}
	g := newGroupSample(t, "tf", names)
	closures := labtest.RepoRoot(t) + "/lab/closures/default.nix"
	// The submission of the step that disables c, which the operator approves; a step
	// writes its submission before it runs, so this one is written here once to learn
	// its digest, and again by that step.
	disabledC := func() string {
		return g.submit([]string{a, b}, map[string]map[string]any{g.apps[b]: {"theme": "dark"}})
	}
	approved := disabledC()

	config := func(extra string) string {
		return acctest.Config(acctest.LabProvider() + fmt.Sprintf(`
module "group" {
  source          = %q
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  build           = { file = %q, attribute = %q }
  timings         = { node_wait = "30s", settle = "1s", watch = "3s", sample_interval = "1s", lock_wait = "3m" }
  %s
}

output "summary" {
  value = module.group.summary
}
`, modulePath(t, "tf"), g.file, hcl(g.baked()), hcl(roster), closures, labtest.ClosureGood, extra))
	}
	const sw = "module.group.module.wave_1.fediversity_node_switch.node"

	// Every enabled node runs the good closure.
	runs := func(nodes ...string) labCheck {
		return func() error {
			for _, n := range nodes {
				if cur, err := currentSystem(n); err != nil || cur != good {
					return fmt.Errorf("%s runs %q (%v), want %s", n, cur, err, good)
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
				Config:    config(""),
				// Then the same submission again: nothing to do (nothingToDo).
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: actions(sw, names, map[string]plancheck.ResourceActionType{
					a: plancheck.ResourceActionCreate, b: plancheck.ResourceActionCreate, c: plancheck.ResourceActionCreate,
				}), PostApplyPostRefresh: nothingToDo},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)), runs(a, b, c),
					timingIs(fmt.Sprintf("%s[%q]", sw, a), "lock_wait", "4m"),
					timingIs(fmt.Sprintf("%s[%q]", sw, b), "lock_wait", "3m")},
			},
			resource.TestStep{
				// One application's settings change: only the node that runs it redeploys.
				PreConfig: func() { g.submit(names, map[string]map[string]any{g.apps[b]: {"theme": "dark"}}) },
				Config:    config(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: actions(sw, names, map[string]plancheck.ResourceActionType{
					b: plancheck.ResourceActionUpdate,
				})},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil))},
			},
			resource.TestStep{
				// The submission turns c's application off: c leaves the graph.
				PreConfig: func() { disabledC() },
				Config:    config(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: actions(sw, names, map[string]plancheck.ResourceActionType{
					c: plancheck.ResourceActionDestroy,
				})},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("summary", summaryCheck([]string{a, b}, []string{c}))},
			},
			resource.TestStep{
				// The submission changes again after the operator approved the last one (the
				// digest the module is given): every node that would act refuses at apply,
				// and nothing changes on the nodes.
				PreConfig: func() {
					g.submit([]string{a, b}, map[string]map[string]any{g.apps[a]: {"theme": "light"}, g.apps[b]: {"theme": "light"}})
				},
				Config:      config(fmt.Sprintf("submission_digest = %q", approved)),
				ExpectError: refusedAll("deploy", []string{a, b}),
			},
			// Back to the approved submission: the refused apply changed nothing.
			backToApproved(t, func() { disabledC() }, runs(a, b), config("")),
			resource.TestStep{
				// The module goes: its resources leave the state (the nodes keep running).
				Config: emptyRoot(),
			},
		),
	})
}
