package node_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// The file form's evaluation key on the lab, one node whose system reads a module
// behind a symbolic link to a directory outside its own, and a NIX_PATH entry:
//
//  1. the node deploys;
//  2. an edit behind the symlinked directory plans an update, which deploys;
//  3. the NIX_PATH entry's link now reaches another directory (a channel update, NIX_PATH
//     unchanged): an update, which deploys;
//  4. nothing changed: an empty plan and no evaluation.
func TestAccNodeSwitchKeySeesLinksAndNixPath(t *testing.T) {
	acctest.Lab(t)
	runs := labtest.CountNixInstantiate(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	n := labtest.NewInstance(t, "acc-key")
	dir, shared, one, two := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	node, err := os.ReadFile(testdataFile("node.nix"))
	if err != nil {
		t.Fatal(err)
	}
	seed := fmt.Sprintf("acc-key-%d", time.Now().UnixNano())
	channel := filepath.Join(t.TempDir(), "channel")
	for file, content := range map[string]string{
		filepath.Join(dir, "base.nix"):    string(node),
		filepath.Join(dir, "node.nix"):    `{ planFile ? "" }: import ./base.nix { inherit planFile; seed = "` + seed + ` " + import ./modules/m.nix + import <chan>; }`,
		filepath.Join(shared, "m.nix"):    `"m-v1"`,
		filepath.Join(one, "default.nix"): `"chan-one"`,
		filepath.Join(two, "default.nix"): `"chan-two"`,
	} {
		acctest.WriteFile(t, file, content)
	}
	if err := os.Symlink(shared, filepath.Join(dir, "modules")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(one, channel); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NIX_PATH", "chan="+channel)
	cfg := acctest.Config(acctest.LabProvider() + fmt.Sprintf(`
resource "fediversity_node_switch" "n" {
  node      = %q
  node_plan = jsonencode({ node = %q })
  build {
    file = %q
  }
%s
%s
}
`, n.Name, n.Name, filepath.Join(dir, "node.nix"), incusBlock(n), accTimings))
	const rn = "fediversity_node_switch.n"
	var top string
	running := func() string { return strings.TrimSpace(nodeExec(t, n, "readlink -e /run/current-system")) }
	changed := func(why string) resource.TestCheckFunc {
		return func(s *terraform.State) error {
			next := acctest.StateAttr(s, rn, "toplevel")
			if next == top || running() != next {
				return fmt.Errorf("%s: the node runs %s, the state says %s, before it ran %s", why, running(), next, top)
			}
			top = next
			return nil
		}
	}
	update := resource.ConfigPlanChecks{
		PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(rn, plancheck.ResourceActionUpdate)},
		PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
	}
	var before int
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: cfg, Check: changed("the first deploy")},
			{
				PreConfig:        func() { acctest.WriteFile(t, filepath.Join(shared, "m.nix"), `"m-v2"`) },
				Config:           cfg,
				ConfigPlanChecks: update,
				Check:            changed("an edit behind the symlinked directory"),
			},
			{
				PreConfig: func() {
					if err := os.Remove(channel); err != nil {
						t.Fatal(err)
					}
					if err := os.Symlink(two, channel); err != nil {
						t.Fatal(err)
					}
				},
				Config:           cfg,
				ConfigPlanChecks: update,
				Check:            changed("the NIX_PATH entry now resolving to another directory"),
			},
			{
				PreConfig:        func() { before = runs() },
				Config:           cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check: func(*terraform.State) error {
					if got := runs() - before; got != 0 {
						return fmt.Errorf("an unchanged re-plan ran nix-instantiate %d times, want 0", got)
					}
					return nil
				},
			},
		},
	})
}
