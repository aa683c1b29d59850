package test

// Acceptance test of modules/tf-incus on the lab's real incusd: the module makes the
// three containers of the group itself (fediversity_incus_node), deploys them through the
// Incus API and runs the verdict-only pass on each.

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

func TestAccModuleTFIncus(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	var names []string
	roster := map[string]any{}
	for _, s := range []string{"a", "b", "c"} {
		n := labtest.Prefix() + "-t-mti-" + s
		names = append(names, n)
		roster[n] = map[string]any{}
		// The module gives each container a data volume, which destroy keeps.
		removeContainerAndDataVolume(n)
		t.Cleanup(func() { removeContainerAndDataVolume(n) })
	}
	a, b, c := names[0], names[1], names[2]
	g := newGroupSample(t, "tf-incus", names)
	closures := labtest.RepoRoot(t) + "/lab/closures/default.nix"
	// The submission of the step that disables c, which the operator approves; a step
	// writes its submission before it runs, so this one is written here once to learn
	// its digest, and again by that step.
	disabledC := func() string {
		return g.submit([]string{a, b}, map[string]map[string]any{g.apps[b]: {"theme": "dark"}})
	}
	approved := disabledC()

	config := func(extra string) string {
		return acctest.Config(`provider "fediversity" {}` + fmt.Sprintf(`
module "group" {
  source          = %q
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  image           = %q
  build           = { file = %q, attribute = %q }
  timings         = { node_wait = "60s", settle = "1s", watch = "3s", sample_interval = "1s", verdict_watch = "2s", lock_wait = "4m" }
  addresses       = %s
  %s
}

output "summary" {
  value = module.group.summary
}
`+dnsOutputs, modulePath(t, "tf-incus"), g.file, hcl(g.baked()), hcl(roster), labtest.Image, closures, labtest.ClosureGood, hcl(groupAddresses(names)), extra))
	}
	const (
		container = "module.group.fediversity_incus_node.node"
		sw        = "module.group.module.wave_1.fediversity_node_switch.node"
		verdict   = "module.group.module.wave_1.fediversity_verdict.node"
	)
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
	noop := func(addr string, nodes ...string) []plancheck.PlanCheck {
		return actions(addr, nodes, nil)
	}
	every := func(action plancheck.ResourceActionType) map[string]plancheck.ResourceActionType {
		return map[string]plancheck.ResourceActionType{a: action, b: action, c: action}
	}

	resource.Test(t, resource.TestCase{
		PreCheck: func() { acctest.PreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				PreConfig: func() { g.submit(names, nil) },
				Config:    config(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(append(
					actions(container, names, every(plancheck.ResourceActionCreate)),
					actions(sw, names, every(plancheck.ResourceActionCreate))...),
					actions(verdict, names, every(plancheck.ResourceActionCreate))...),
					// Then the same submission again: nothing to do.
					PostApplyPostRefresh: nothingToDo},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)), runs(a, b, c),
					statecheck.ExpectKnownOutputValue("dns_records", dnsRecordsCheck(names, names)),
					statecheck.ExpectKnownOutputValue("domain", knownvalue.StringExact(groupDomain)),
					// Every timing the module takes reaches the deploy and the verdict-only
					// pass (lock_wait once did not), and verdict_watch the pass alone.
					timingIs(fmt.Sprintf("%s[%q]", sw, a), "lock_wait", "4m"),
					timingIs(fmt.Sprintf("%s[%q]", verdict, a), "lock_wait", "4m"),
					timingIs(fmt.Sprintf("%s[%q]", sw, a), "watch", "3s"),
					timingIs(fmt.Sprintf("%s[%q]", verdict, a), "watch", "2s")},
			},
			resource.TestStep{
				// One application's settings change: b redeploys (and its verdict runs
				// again); a and c, and every container, stay as they are.
				PreConfig: func() { g.submit(names, map[string]map[string]any{g.apps[b]: {"theme": "dark"}}) },
				Config:    config(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(append(append(
					noop(container, a, b, c),
					actions(sw, names, map[string]plancheck.ResourceActionType{b: plancheck.ResourceActionUpdate})...),
					noop(verdict, a, c)...),
					plancheck.ExpectNonEmptyPlan())},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)), runs(a, b, c)},
			},
			resource.TestStep{
				// The submission turns c off: its deploy, verdict and container go.
				PreConfig: func() { disabledC() },
				Config:    config(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(append(
					actions(container, names, map[string]plancheck.ResourceActionType{c: plancheck.ResourceActionDestroy}),
					actions(sw, names, map[string]plancheck.ResourceActionType{c: plancheck.ResourceActionDestroy})...),
					actions(verdict, names, map[string]plancheck.ResourceActionType{c: plancheck.ResourceActionDestroy})...)},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("summary", summaryCheck([]string{a, b}, []string{c})),
					// The disabled node's records go with it.
					statecheck.ExpectKnownOutputValue("dns_records", dnsRecordsCheck(names, []string{a, b})),
					labCheck(func() error {
						if out, err := labtest.IncusErr("info", c); err == nil {
							return fmt.Errorf("container %s should be gone with its node:\n%s", c, out)
						}
						// Its data volume is kept (data_volume's default), with the node's data.
						if out, err := labtest.IncusErr("storage", "volume", "show", "lab", c+"-data"); err != nil {
							return fmt.Errorf("the data volume of %s should be kept when its container goes: %v\n%s", c, err, out)
						}
						return nil
					}),
				},
			},
			resource.TestStep{
				// The submission changes again after the operator approved the last one (the
				// digest the module is given): every node that would act refuses at apply
				// (the verdict passes, which follow the deploys, are never reached).
				PreConfig: func() {
					g.submit([]string{a, b}, map[string]map[string]any{g.apps[a]: {"theme": "light"}, g.apps[b]: {"theme": "light"}})
				},
				Config:      config(fmt.Sprintf("submission_digest = %q", approved)),
				ExpectError: refusedAll("deploy", []string{a, b}),
			},
			// Back to the approved submission: the refused apply changed nothing.
			backToApproved(t, func() { disabledC() }, runs(a, b), config("")),
			resource.TestStep{
				// The module goes: so do the containers it made.
				Config: emptyRoot(),
				ConfigStateChecks: []statecheck.StateCheck{labCheck(func() error {
					for _, n := range []string{a, b} {
						if _, err := labtest.IncusErr("info", n); err == nil {
							return fmt.Errorf("container %s should be gone with the module", n)
						}
					}
					return nil
				})},
			},
		),
	})
}

// removeContainerAndDataVolume deletes a container the module made and the data volume
// it gave it (the container first: a volume in use cannot be deleted).
func removeContainerAndDataVolume(name string) {
	_, _ = labtest.IncusErr("delete", "--force", name)
	_, _ = labtest.IncusErr("storage", "volume", "delete", "lab", name+"-data")
}
