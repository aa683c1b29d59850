package test

// Acceptance test of a staged rollout in modules/tf-incus on the lab's real incusd: a
// group of three containers the module makes, a canary of 1 under a failure budget of 0.
// A bad canary halts the apply at the fediversity_rollout_gate, and Terraform applies
// nothing behind it: the other nodes' containers exist (they are made up front) but are
// not switched, hold nothing of the new system, and have no deploy or verdict in the
// state; once the canary is fixed, the next apply resumes and completes.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

func TestAccModuleTFIncusRolloutHaltsAtTheGate(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	var names []string
	roster := map[string]any{}
	for _, s := range []string{"a", "b", "c"} {
		n := labtest.Prefix() + "-t-mtir-" + s
		names = append(names, n)
		roster[n] = map[string]any{}
		// The module gives each container a data volume, which destroy keeps.
		removeContainerAndDataVolume(n)
		t.Cleanup(func() { removeContainerAndDataVolume(n) })
	}
	a, b, c := names[0], names[1], names[2] // a is the canary: the first by name
	g := newGroupSample(t, "tf-incus", names)
	closures := labtest.RepoRoot(t) + "/lab/closures/default.nix"

	// canaryAttr is the closure the canary builds; the others build the group's (good).
	config := func(canaryAttr string) string {
		roster[a] = map[string]any{"build": map[string]any{"file": closures, "attribute": canaryAttr}}
		return acctest.Config(`provider "fediversity" {}` + fmt.Sprintf(`
module "group" {
  source          = %q
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  image           = %q
  build           = { file = %q, attribute = %q }
  timings         = { node_wait = "60s", settle = "1s", watch = "3s", sample_interval = "1s", verdict_watch = "2s" }
  strict          = false
  canary          = 1
  failure_budget  = "0"
}

output "summary" {
  value = module.group.summary
}
`, modulePath(t, "tf-incus"), g.file, hcl(g.baked()), hcl(roster), labtest.Image, closures, labtest.ClosureGood))
	}
	wave := func(n int, kind string) string {
		return fmt.Sprintf("module.group.module.wave_%d.fediversity_%s.node", n, kind)
	}

	// b and c are in wave 2: after the halted apply their containers are as the image
	// made them. The lab image has no system of its own (no /run/current-system and no
	// /nix/store), so a node that was switched, or had anything copied to it, shows.
	untouched := labCheck(func() error {
		for _, n := range []string{b, c} {
			// A lab node runs its image's first system (generation 1 of its system
			// profile, as nixos-install leaves it) until something is deployed to it.
			first, _ := labtest.IncusErr("exec", n, "--", "readlink", "-f", "/nix/var/nix/profiles/system-1-link")
			if cur, _ := currentSystem(n); cur != strings.TrimSpace(first) {
				return fmt.Errorf("%s runs %s after the halted apply, not its first system %s; it is in the wave behind the gate and must not be switched", n, cur, strings.TrimSpace(first))
			}
			if _, err := labtest.IncusErr("exec", n, "--", "test", "-e", good); err == nil {
				return fmt.Errorf("%s holds %s after the halted apply; nothing may be copied to a node behind the gate", n, good)
			}
		}
		return nil
	})
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
				// A canary with a failing unit: lenient, its deploy and verdict are created
				// with the failure in their verdicts, and the gate after wave 1 halts the
				// apply, naming the canary and why: the deploy's reason, then the
				// verdict-only pass' (the gate waited for both).
				PreConfig: func() { g.submit(names, nil) },
				Config:    config(labtest.ClosureFailedUnit),
				ExpectError: wrapped(`The rollout halted after wave 1`, `the rollout halted after wave 1 of 2: 1 of the 1 nodes deployed failed (`+a+`), past the failure budget of 0`,
					a+`: unit fedi-broken.service failed (Result=exit-code, new in this run); unit fedi-broken.service failed (Result=exit-code, already failed when the pass began)`),
			},
			resource.TestStep{
				// Fixed: b and c were not touched (no deploy or verdict in the state: the
				// plan creates them; their containers stay) and the next apply resumes: the
				// canary redeploys, the gate judges again, and wave 2 rolls out. Then nothing
				// changed: nothing to do, the gate included (nothingToDo).
				PreConfig: func() {
					if err := untouched(); err != nil {
						t.Fatal(err)
					}
				},
				Config: config(labtest.ClosureGood),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: concatChecks(
					actions("module.group.fediversity_incus_node.node", names, nil),
					actions(wave(1, "node_switch"), []string{a}, map[string]plancheck.ResourceActionType{a: plancheck.ResourceActionUpdate}),
					actions(wave(2, "node_switch"), []string{b, c}, map[string]plancheck.ResourceActionType{b: plancheck.ResourceActionCreate, c: plancheck.ResourceActionCreate}),
					actions(wave(2, "verdict"), []string{b, c}, map[string]plancheck.ResourceActionType{b: plancheck.ResourceActionCreate, c: plancheck.ResourceActionCreate}),
					[]plancheck.PlanCheck{plancheck.ExpectResourceAction("module.group.fediversity_rollout_gate.after_wave_1[0]", plancheck.ResourceActionCreate)},
				), PostApplyPostRefresh: nothingToDo},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)), runsGood},
			},
			resource.TestStep{Config: emptyRoot()},
		),
	})
}

// concatChecks is the plan checks of every list, in order.
func concatChecks(lists ...[]plancheck.PlanCheck) []plancheck.PlanCheck {
	var all []plancheck.PlanCheck
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}
