package node_test

// Lab acceptance test of fediversity_node_switch's `deploy = "last-good"`: the
// provider's roll back to the node's last good system, the one `fediversity rollback
// --to last-good` deploys (cmd/fediversity TestLabCLIRollbackToLastGood).

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// lastGoodConfig deploys the node's last good system: no toplevel, the plan sets it.
func lastGoodConfig(node labtest.Node) string {
	return acctest.Config(acctest.LabProvider() + fmt.Sprintf(`
resource "fediversity_node_switch" "n" {
  node   = %q
  deploy = "last-good"
%s
%s
}
`, node.Name, sshBlock(node), accTimings))
}

// readLastGoodRecord is the node's record of its last good system, decoded as both
// front ends decode it (nil: none), and what the GC root points at.
func readLastGoodRecord(t *testing.T, node labtest.Node) (*records.LastGood, string) {
	t.Helper()
	out := nodeExec(t, node, fmt.Sprintf("cat %s 2>/dev/null; echo; readlink %s || true", records.LastGoodFile, records.LastGoodRoot))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	root := strings.TrimSpace(lines[len(lines)-1])
	if len(lines) < 2 {
		return nil, root
	}
	var rec records.LastGood
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("%s on %s: %v\n%s", records.LastGoodFile, node.Name, err, out)
	}
	return &rec, root
}

func nodeRuns(t *testing.T, node labtest.Node) string {
	t.Helper()
	return strings.TrimSpace(nodeExec(t, node, "readlink -f /run/current-system"))
}

// A node deployed bad leniently has no last good system: `deploy = "last-good"` fails
// its plan, naming the node and the attribute, and leaves it untouched. Deployed good
// (a clean verdict), the provider records it on the node and pins it; a lenient deploy
// of a failed unit does not replace the record. After the old generations are deleted
// and the store is collected, the good system is still there (only the GC root keeps
// it); `deploy = "last-good"` then plans the toplevel going back to it, and the apply
// switches the node to it with a fresh clean verdict, copying nothing.
func TestAccNodeSwitchDeploysLastGoodSystem(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	bad := labtest.BuildClosure(t, labtest.ClosureFailedUnit)
	node := labtest.NewInstance(t, "acc-last-good")
	lenientBad := switchConfig(node, sshBlock(node), bad, "strict = false")
	var before time.Time

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: lenientBad,
				Check: func(*terraform.State) error {
					if rec, root := readLastGoodRecord(t, node); rec != nil || root != "" {
						return fmt.Errorf("a lenient pass over a failed unit recorded %+v (GC root %q): it is not good", rec, root)
					}
					return nil
				},
			},
			{
				Config:      lastGoodConfig(node),
				ExpectError: regexp.MustCompile(`(?s)Node\s+` + regexp.QuoteMeta(node.Name) + `\s+has\s+no\s+last\s+good\s+system:\s+it\s+never\s+had\s+a\s+clean\s+verdict.*deploy`),
			},
			{
				PreConfig: func() {
					if got := nodeRuns(t, node); got != bad {
						t.Fatalf("the refused roll back changed the node: it runs %s, want %s", got, bad)
					}
				},
				Config: switchConfig(node, sshBlock(node), good, ""),
				Check: func(*terraform.State) error {
					rec, root := readLastGoodRecord(t, node)
					if rec == nil || rec.Toplevel != good || root != good {
						return fmt.Errorf("after a clean deploy of %s the record is %+v and the GC root %q", good, rec, root)
					}
					return nil
				},
			},
			{
				Config: lenientBad,
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
					verdictList("failed", "fedi-broken.service"),
				},
				Check: func(*terraform.State) error {
					if rec, root := readLastGoodRecord(t, node); rec == nil || rec.Toplevel != good || root != good {
						return fmt.Errorf("the lenient deploy of %s replaced the last good system: record %+v, GC root %q", bad, rec, root)
					}
					return nil
				},
			},
			{
				PreConfig: func() {
					// Only the GC root keeps the good system now: no system generation names it.
					nodeExec(t, node, "nix-env -p /nix/var/nix/profiles/system --delete-generations old >/dev/null && nix-store --gc >/dev/null 2>&1")
					gens := nodeExec(t, node, `for l in /nix/var/nix/profiles/system-*-link; do readlink -f "$l"; done`)
					if strings.Contains(gens, good) || !strings.Contains(gens, bad) {
						t.Fatalf("after deleting the old generations they are %q: want only %s", gens, bad)
					}
					if out := nodeExec(t, node, "nix-store --check-validity "+good+" 2>/dev/null && test -e "+good+" && echo valid || echo gone"); strings.TrimSpace(out) != "valid" {
						t.Fatalf("nix-store --gc removed the last good system %s from the node's store", good)
					}
					before = time.Now().Add(-time.Second)
				},
				Config: lastGoodConfig(node),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("toplevel"), knownvalue.StringExact(good)),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("toplevel"), knownvalue.StringExact(good)),
					verdictBool("ok", true),
					verdictList("failed"),
					verdictList("restart_loop"),
					verdictList("never_spawned_closure"),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("changes").AtMapKey("paths_copied"), knownvalue.Int64Exact(0)),
				},
				Check: func(*terraform.State) error {
					if got := nodeRuns(t, node); got != good {
						return fmt.Errorf("after the roll back the node runs %s, want its last good system %s", got, good)
					}
					rec, root := readLastGoodRecord(t, node)
					if rec == nil || rec.Toplevel != good || root != good || rec.At.Before(before) {
						return fmt.Errorf("after the roll back the record is %+v (GC root %q): want %s judged clean again after %s", rec, root, good, before.UTC())
					}
					return nil
				},
			},
		},
	})
}

// The plan of `deploy = "last-good"` takes the record its refresh read, and the apply
// reads the node's record again: one changed between a saved plan and its apply
// (another deployer's clean deploy in between; here written by the test) is refused by
// the apply with the provider's own message, naming both systems and what to do, and
// the node is left as it was. When the plan read the node itself, Terraform's own plan
// at apply read the new record and failed the apply as an "inconsistent final plan", a
// message that blames the provider. Run by the CLI under test, for a saved plan.
func TestAccNodeSwitchLastGoodChangedSinceThePlanIsRefused(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	bad := labtest.BuildClosure(t, labtest.ClosureFailedUnit)
	node := labtest.NewInstance(t, "acc-last-good-race")
	c := acctest.NewCLIDir(t)
	c.Write(switchConfig(node, sshBlock(node), good, ""))
	c.MustApply("deploy the good system")
	c.Write(switchConfig(node, sshBlock(node), bad, "strict = false"))
	c.MustApply("deploy a failed unit leniently")

	c.Write(lastGoodConfig(node))
	if out, code := c.Run("plan", "-no-color", "-input=false", "-out=back.plan"); code != 0 || !strings.Contains(out, `"`+bad+`" -> "`+good+`"`) {
		t.Fatalf("plan of deploy = last-good: exit %d, want 0 with toplevel going from %s back to %s\n%s", code, bad, good, out)
	}
	// Another deployer's clean deploy since the plan recorded another system.
	rec := fmt.Sprintf(`{"version":1,"toplevel":%q,"at":%q}`, bad, time.Now().UTC().Format(time.RFC3339))
	nodeExec(t, node, fmt.Sprintf("printf '%%s' '%s' > %s", rec, records.LastGoodFile))

	out, code := c.Run("apply", "-no-color", "-input=false", "back.plan")
	if code == 0 || strings.Contains(out, "inconsistent final plan") ||
		!regexp.MustCompile(`(?s)`+regexp.QuoteMeta(node.Name)+`.*read-last-good.*last\s+good\s+system\s+is\s+`+regexp.QuoteMeta(bad)+`\s+now,\s+but\s+the\s+plan\s+showed\s+`+
			regexp.QuoteMeta(good)+`.*[Pp]lan\s+again.*left\s+untouched`).MatchString(out) {
		t.Fatalf("apply of a plan whose record changed since: exit %d, want the provider's refusal naming %s, both systems and what to do\n%s", code, node.Name, out)
	}
	if got := nodeRuns(t, node); got != bad {
		t.Fatalf("after the refused apply the node runs %s, want %s as it was", got, bad)
	}
}
