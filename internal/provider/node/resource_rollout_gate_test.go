package node_test

// fediversity_rollout_gate on its own, without nodes: its verdicts are given as values,
// as a wave's resources would give them. What the gate decides is the engine's
// (internal/fleet WaveGate, unit-tested there); this proves what Terraform does with it:
// the apply fails past the budget naming each node, a failed gate is not kept, and the
// next apply judges again.

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

func gateConfig(budget, web02 string) string {
	return acctest.Config(fmt.Sprintf(`
resource "fediversity_rollout_gate" "after_wave_1" {
  wave           = 1
  waves          = 2
  group_size     = 4
  failure_budget = %s
  verdicts = {
    web01 = { ok = true, reasons = [] }
    web02 = %s
  }
}
`, budget, web02))
}

func TestAccRolloutGateHaltsPastTheBudgetAndJudgesAgain(t *testing.T) {
	const (
		ok     = `{ ok = true, reasons = [] }`
		failed = `{ ok = false, reasons = ["unit nginx.service failed"] }`
	)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				// A bad budget is refused at plan, naming the field.
				Config:      gateConfig(`"many"`, ok),
				ExpectError: regexp.MustCompile(`failure_budget = "many": want a count`),
			},
			{
				Config:      gateConfig(`"0"`, failed),
				ExpectError: regexp.MustCompile(`(?s)the rollout halted after wave 1 of 2: 1 of the 2 nodes deployed failed\s+\(web02\), past the failure budget of 0.*web02: unit nginx.service failed`),
			},
			{
				// The failed gate was not kept: the same configuration plans it again
				// (and warns, the verdicts being known), and fails again.
				Config: gateConfig(`"0"`, failed),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("fediversity_rollout_gate.after_wave_1", plancheck.ResourceActionCreate),
				}},
				ExpectError: regexp.MustCompile(`rollout halted after wave 1`),
			},
			{
				// Within the budget (25% of 4 is 1), the gate passes.
				Config: gateConfig(`"25%"`, failed),
			},
			{
				// The cause fixed: a changed verdict replaces the gate, which judges again.
				Config: gateConfig(`"0"`, ok),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("fediversity_rollout_gate.after_wave_1", plancheck.ResourceActionReplace),
				}},
			},
			{
				Config:           gateConfig(`"0"`, ok),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
		},
	})
}
