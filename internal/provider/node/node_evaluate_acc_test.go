package node_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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

// Plan-time evaluation on the lab, two nodes built from their own Nix files
// (testdata/node.nix copied into a directory per node), real nix-instantiate and
// nix-store, real Incus nodes. One scenario, in steps:
//
//  1. both nodes deploy; a cold cache evaluates each once for the whole run;
//  2. a's source is edited: the plan updates a only, the apply deploys the new closure,
//     a runs it, the next plan is empty, and only a was evaluated again;
//  3. a comment is added to a's source: a is evaluated again, to the same derivation,
//     and the plan is empty;
//  4. nothing changed: the plan evaluates nothing;
//  5. a's .drv (and its output) is garbage-collected: its cache entry is ignored and a
//     evaluated again;
//  6. a syntax error in a's source fails the plan naming node and file;
//  7. a's source is edited between a saved plan and its apply: the apply refuses,
//     showing both derivations;
//  8. back to the source a runs: the plan is empty, and neither node changed since 2.
func TestAccNodeSwitchPlanEvaluatesSource(t *testing.T) {
	acctest.Lab(t)
	runs := labtest.CountNixInstantiate(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // this test's own evaluation cache
	na := labtest.NewInstance(t, "acc-eval-a")
	nb := labtest.NewInstance(t, "acc-eval-b")
	seed := fmt.Sprintf("acc-eval-%d", time.Now().UnixNano()) // derivations no earlier run built

	original, err := os.ReadFile(testdataFile("node.nix"))
	if err != nil {
		t.Fatal(err)
	}
	srcA := filepath.Join(t.TempDir(), "node.nix")
	srcB := filepath.Join(t.TempDir(), "node.nix")
	writeSource := func(file, text string) {
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeSource(srcA, string(original))
	writeSource(srcB, string(original))
	// An edit nix sees: the unit's description, i.e. a new toplevel.
	edited := func(what string) string {
		return strings.Replace(string(original), "Description=fediversity acceptance unit", "Description=fediversity acceptance unit, "+what, 1)
	}

	resourceOf := func(name string, n labtest.Node, src string) string {
		return fmt.Sprintf(`
resource "fediversity_node_switch" %q {
  node      = %q
  node_plan = jsonencode({ node = %q })
  build {
    file = %q
    args = { seed = %q }
  }
%s
%s
}
`, name, n.Name, n.Name, src, seed, incusBlock(n), accTimings)
	}
	cfg := acctest.Config(acctest.LabProvider() + resourceOf("a", na, srcA) + resourceOf("b", nb, srcB))
	const ra, rb = "fediversity_node_switch.a", "fediversity_node_switch.b"

	var before int // runs() at the start of a step
	mark := func() { before = runs() }
	evaluations := func(want int, why string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			if got := runs() - before; got != want {
				return fmt.Errorf("%s: nix-instantiate ran %d times in this step, want %d", why, got, want)
			}
			return nil
		}
	}
	running := func(n labtest.Node) string {
		return strings.TrimSpace(nodeExec(t, n, "readlink -e /run/current-system"))
	}
	var topA1, topA2, topB, drvA2 string
	attr := func(s *terraform.State, res, name string) string {
		if r := s.RootModule().Resources[res]; r != nil {
			return r.Primary.Attributes[name]
		}
		return ""
	}

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: mark,
				Config:    cfg,
				Check: resource.ComposeTestCheckFunc(
					resource.TestMatchResourceAttr(ra, "derivation", regexp.MustCompile(`^/nix/store/[0-9a-z]{32}-nixos-system-fedi-acc\.drv$`)),
					resource.TestMatchResourceAttr(rb, "derivation", regexp.MustCompile(`^/nix/store/[0-9a-z]{32}-nixos-system-fedi-acc\.drv$`)),
					evaluations(2, "a cold cache, plan and apply of two nodes"),
					func(s *terraform.State) error {
						topA1, topB = attr(s, ra, "toplevel"), attr(s, rb, "toplevel")
						if running(na) != topA1 || running(nb) != topB {
							return fmt.Errorf("the nodes run %s and %s, the state says %s and %s", running(na), running(nb), topA1, topB)
						}
						return nil
					},
				),
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				PreConfig: func() { writeSource(srcA, edited("v2")); mark() },
				Config:    cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(ra, plancheck.ResourceActionUpdate),
						plancheck.ExpectResourceAction(rb, plancheck.ResourceActionNoop),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: resource.ComposeTestCheckFunc(
					evaluations(1, "an edit of a's source"),
					func(s *terraform.State) error {
						topA2, drvA2 = attr(s, ra, "toplevel"), attr(s, ra, "derivation")
						if topA2 == topA1 || running(na) != topA2 {
							return fmt.Errorf("after the edit a runs %s, the state says %s, before the edit it ran %s: want the new closure running", running(na), topA2, topA1)
						}
						if unit := nodeExec(t, na, "cat /run/current-system/etc/systemd/system/fedi-acc.service"); !strings.Contains(unit, "unit, v2") {
							return fmt.Errorf("a runs a closure without the edit; its unit is:\n%s", unit)
						}
						if running(nb) != topB || attr(s, rb, "toplevel") != topB {
							return fmt.Errorf("b changed: runs %s, want %s", running(nb), topB)
						}
						return nil
					},
				),
			},
			{
				PreConfig:        func() { writeSource(srcA, "# a comment nix does not see\n"+edited("v2")); mark() },
				Config:           cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check: resource.ComposeTestCheckFunc(
					evaluations(1, "a comment in a's source (a evaluated again, b not)"),
					resource.TestCheckResourceAttrPtr(ra, "derivation", &drvA2),
				),
			},
			{
				PreConfig:        mark,
				Config:           cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check:            evaluations(0, "an unchanged re-plan"),
			},
			{
				PreConfig: func() {
					// What a garbage collection does once nothing roots the closure: nix
					// keeps a .drv while its output is valid, so both go.
					if out, err := exec.Command("nix-store", "--delete", topA2, drvA2).CombinedOutput(); err != nil {
						t.Fatalf("nix-store --delete %s %s: %v\n%s", topA2, drvA2, err, out)
					}
					mark()
				},
				Config:           cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check: resource.ComposeTestCheckFunc(
					evaluations(1, "a cache entry whose .drv was collected"),
					func(*terraform.State) error {
						if _, err := os.Stat(drvA2); err != nil {
							return fmt.Errorf("a was not evaluated again: %v", err)
						}
						return nil
					},
				),
			},
			{
				PreConfig:   func() { writeSource(srcA, "{ planFile ? \"\" }: derivation { name = ") },
				Config:      cfg,
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`Unable\s+to\s+evaluate\s+the\s+system\s+of\s+node\s+` + regexp.QuoteMeta(na.Name) + `(?s).*` + regexp.QuoteMeta(srcA) + `.*syntax\s+error`),
			},
			{
				PreConfig: func() { writeSource(srcA, edited("v3")) },
				Config:    cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(ra, plancheck.ResourceActionUpdate),
					editSource{write: func() { writeSource(srcA, edited("v4")) }},
				}},
				ExpectError: regexp.MustCompile(`(?s)derivation.*/nix/store/[0-9a-z]{32}-nixos-system-fedi-acc\.drv.*/nix/store/[0-9a-z]{32}-nixos-system-fedi-acc\.drv`),
			},
			{
				PreConfig:        func() { writeSource(srcA, edited("v2")) },
				Config:           cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check: func(*terraform.State) error {
					if running(na) != topA2 || running(nb) != topB {
						return fmt.Errorf("a failed plan or a refused apply changed a node: they run %s and %s, want %s and %s", running(na), running(nb), topA2, topB)
					}
					return nil
				},
			},
		},
	})
}

// editSource is a plan check that edits a node's source after the plan was saved and
// before it is applied: terraform-plugin-testing applies the saved plan right after
// its PreApply checks, so this is the operator's edit between `plan -out` and `apply`.
type editSource struct{ write func() }

func (e editSource) CheckPlan(_ context.Context, _ plancheck.CheckPlanRequest, _ *plancheck.CheckPlanResponse) {
	e.write()
}
