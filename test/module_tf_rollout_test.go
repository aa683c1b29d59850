package test

// Acceptance test of a staged rollout in modules/tf on three throwaway lab nodes: a
// canary of 1 under a failure budget of 0. A bad canary halts the apply at the
// fediversity_rollout_gate, and Terraform applies nothing behind it: the other nodes
// are not touched and have no resource; once the canary is fixed, the next apply
// resumes and completes.

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

func TestAccModuleTFRolloutHaltsAtTheGate(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	lab := []labtest.Node{labtest.NewInstance(t, "mtr-a"), labtest.NewInstance(t, "mtr-b"), labtest.NewInstance(t, "mtr-c")}
	var names []string
	for _, n := range lab {
		names = append(names, n.Name)
	}
	a, b, c := names[0], names[1], names[2] // a is the canary: the first by name
	g := newGroupSample(t, "tf", names)
	closures := labtest.RepoRoot(t) + "/lab/closures/default.nix"

	// canaryAttr is the closure the canary builds; the others build the group's (good).
	config := func(canaryAttr string) string {
		roster := map[string]any{}
		for _, n := range lab {
			roster[n.Name] = map[string]any{"host": n.SSHHost, "port": n.SSHPort, "host_key": n.HostKey}
		}
		roster[a].(map[string]any)["build"] = map[string]any{"file": closures, "attribute": canaryAttr}
		return acctest.Config(acctest.LabProvider() + fmt.Sprintf(`
module "group" {
  source          = %q
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  build           = { file = %q, attribute = %q }
  timings         = { node_wait = "30s", settle = "1s", watch = "3s", sample_interval = "1s" }
  strict          = false
  canary          = 1
  failure_budget  = "0"
}

output "summary" {
  value = module.group.summary
}
`, modulePath(t, "tf"), g.file, hcl(g.baked()), hcl(roster), closures, labtest.ClosureGood))
	}
	wave := func(n int) string { return fmt.Sprintf("module.group.module.wave_%d.fediversity_node_switch.node", n) }

	// What b and c ran before the rollout: the halted apply must leave it.
	before := map[string]string{}
	for _, n := range []string{b, c} {
		cur, err := currentSystem(n)
		if err != nil {
			t.Fatal(err)
		}
		before[n] = cur
	}
	untouched := func() {
		for _, n := range []string{b, c} {
			if cur, err := currentSystem(n); err != nil || cur != before[n] {
				t.Errorf("%s runs %q (%v) after the halted apply, want what it ran before, %q", n, cur, err, before[n])
			}
		}
	}
	runsGood := labCheck(func() error {
		for _, n := range names {
			if cur, err := currentSystem(n); err != nil || cur != good {
				return fmt.Errorf("%s runs %q (%v), want %s", n, cur, err, good)
			}
		}
		return nil
	})

	resource.Test(t, resource.TestCase{
		PreCheck: func() { acctest.PreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				// A canary with a failing unit: lenient, its resource is created with the
				// failure in its verdict, and the gate after wave 1 halts the apply.
				PreConfig: func() { g.submit(names, nil) },
				Config:    config(labtest.ClosureFailedUnit),
				ExpectError: wrapped(`The rollout halted after wave 1`, `the rollout halted after wave 1 of 2: 1 of the 1 nodes deployed failed (`+a+`), past the failure budget of 0`,
					a+`: unit fedi-broken.service failed`),
			},
			resource.TestStep{
				// Fixed: b and c were not touched (they have no resource: the plan creates
				// them) and the next apply resumes: the canary redeploys, the gate judges
				// again, and wave 2 rolls out. Then nothing changed: nothing to do, the gate
				// included (nothingToDo).
				PreConfig: untouched,
				Config:    config(labtest.ClosureGood),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(fmt.Sprintf("%s[%q]", wave(1), a), plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction(fmt.Sprintf("%s[%q]", wave(2), b), plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction(fmt.Sprintf("%s[%q]", wave(2), c), plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("module.group.fediversity_rollout_gate.after_wave_1[0]", plancheck.ResourceActionCreate),
				}, PostApplyPostRefresh: nothingToDo},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)), runsGood},
			},
			resource.TestStep{Config: emptyRoot()},
		),
	})
}

// wrapped matches the messages in order, whatever line breaks Terraform puts in them.
func wrapped(messages ...string) *regexp.Regexp {
	var parts []string
	for _, m := range messages {
		parts = append(parts, strings.Join(strings.Fields(regexp.QuoteMeta(m)), `\s+`))
	}
	return regexp.MustCompile(`(?s)` + strings.Join(parts, `.*`))
}
