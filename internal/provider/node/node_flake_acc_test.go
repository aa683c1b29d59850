package node_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// The flake form on the lab, two nodes of one flake, real nix eval and Incus nodes:
//
//  1. both deploy, each given its node plan (read back from the running system);
//  2. a's module is edited: the plan updates a only, the apply deploys it, the next
//     plan is empty;
//  3. a comment-only edit of a's module: the plan is empty;
//  4. b's module, in the path: input, is edited: the plan updates b only;
//  5. nothing changed: the plan runs no nix eval;
//  6. a syntax error in a's module fails the plan naming node, flake and nix's message.
func TestAccNodeSwitchFlake(t *testing.T) {
	acctest.Lab(t)
	evals := labtest.CountNixEvals(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // this test's own evaluation cache
	na := labtest.NewInstance(t, "acc-flake-a")
	nb := labtest.NewInstance(t, "acc-flake-b")
	flake, lib := t.TempDir(), t.TempDir()
	acctest.WriteFlake(t, flake, lib, fmt.Sprintf("acc-flake-%d", time.Now().UnixNano()))

	resourceOf := func(name string, n labtest.Node) string {
		return fmt.Sprintf(`
resource "fediversity_node_switch" %q {
  node      = %q
  node_plan = jsonencode({ node = %q })
  build {
    flake = "path:%s#nixosConfigurations.%s.config.system.build.toplevel"
  }
%s
%s
}
`, name, n.Name, n.Name, flake, name, incusBlock(n), accTimings)
	}
	cfg := acctest.Config(acctest.LabProvider() + resourceOf("a", na) + resourceOf("b", nb))
	const ra, rb = "fediversity_node_switch.a", "fediversity_node_switch.b"
	drvPattern := regexp.MustCompile(`^/nix/store/[0-9a-z]{32}-nixos-system-fedi-acc\.drv$`)

	var before int
	mark := func() { before = evals() }
	evaluations := func(want int, why string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			if got := evals() - before; got != want {
				return fmt.Errorf("%s: nix eval ran %d times in this step, want %d", why, got, want)
			}
			return nil
		}
	}
	running := func(n labtest.Node) string {
		return strings.TrimSpace(nodeExec(t, n, "readlink -e /run/current-system"))
	}
	attr := func(s *terraform.State, res, name string) string {
		if r := s.RootModule().Resources[res]; r != nil {
			return r.Primary.Attributes[name]
		}
		return ""
	}
	var topA, topB string

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: mark,
				Config:    cfg,
				Check: resource.ComposeTestCheckFunc(
					resource.TestMatchResourceAttr(ra, "derivation", drvPattern),
					resource.TestMatchResourceAttr(rb, "derivation", drvPattern),
					evaluations(2, "a cold cache, plan and apply of two nodes"),
					func(s *terraform.State) error {
						topA, topB = attr(s, ra, "toplevel"), attr(s, rb, "toplevel")
						if running(na) != topA || running(nb) != topB || topA == topB {
							return fmt.Errorf("the nodes run %s and %s, the state says %s and %s", running(na), running(nb), topA, topB)
						}
						if plan := nodeExec(t, na, "cat /run/current-system/etc/fediversity/node-plan.json"); !strings.Contains(plan, na.Name) {
							return fmt.Errorf("a's system was not given its node plan; it holds %q", plan)
						}
						return nil
					},
				),
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				PreConfig: func() { acctest.WriteFile(t, filepath.Join(flake, "a.nix"), `"a-v2"`); mark() },
				Config:    cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(ra, plancheck.ResourceActionUpdate),
						plancheck.ExpectResourceAction(rb, plancheck.ResourceActionNoop),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: func(s *terraform.State) error {
					next := attr(s, ra, "toplevel")
					if next == topA || running(na) != next || running(nb) != topB {
						return fmt.Errorf("after the edit of a's module a runs %s (state %s, before %s) and b %s (want %s)", running(na), next, topA, running(nb), topB)
					}
					topA = next
					return nil
				},
			},
			{
				PreConfig:        func() { acctest.WriteFile(t, filepath.Join(flake, "a.nix"), "# a comment nix does not see\n\"a-v2\"") },
				Config:           cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				PreConfig: func() { acctest.WriteFile(t, filepath.Join(lib, "b.nix"), `"b-v2"`) },
				Config:    cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(ra, plancheck.ResourceActionNoop),
						plancheck.ExpectResourceAction(rb, plancheck.ResourceActionUpdate),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: func(s *terraform.State) error {
					if next := attr(s, rb, "toplevel"); next == topB || running(nb) != next || running(na) != topA {
						return fmt.Errorf("after the edit of the input b runs %s (state %s, before %s), a %s (want %s)", running(nb), next, topB, running(na), topA)
					}
					return nil
				},
			},
			{
				PreConfig:        mark,
				Config:           cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check:            evaluations(0, "an unchanged re-plan"),
			},
			{
				PreConfig: func() { acctest.WriteFile(t, filepath.Join(flake, "a.nix"), `"a-v3`) },
				Config:    cfg,
				PlanOnly:  true,
				ExpectError: regexp.MustCompile(`Unable\s+to\s+evaluate\s+the\s+system\s+of\s+node\s+` + regexp.QuoteMeta(na.Name) +
					`(?s).*` + regexp.QuoteMeta("path:"+flake) + `.*syntax\s+error`),
			},
		},
	})
}
