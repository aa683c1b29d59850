package node_test

// Lab acceptance test of the node's verdict record, through the real binary (see
// interrupt_lab_test.go for the harness).

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// An apply cut off between the boot entry and its state write: the state file is put
// back as it was before the apply (the state write is the apply's last step, so this is
// exactly what such a cut leaves), while the node runs and boots the new system and
// holds its verdict record. The next plan adopts that system with the recorded verdict
// and is empty. Without the record, the next plan deploys the system again, warning
// that the node holds no verdict of it, and that apply converges.
func TestAccNodeSwitchAdoptsWithTheNodesVerdictRecord(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	goodV2 := labtest.BuildClosure(t, labtest.ClosureGoodV2)
	node := labtest.NewInstance(t, "cli-record")
	c := acctest.NewCLIDir(t)
	stateFile := filepath.Join(c.Dir, "terraform.tfstate")

	// cutBeforeStateWrite applies top, then puts the state back as it was before.
	cutBeforeStateWrite := func(top string) {
		t.Helper()
		before, err := os.ReadFile(stateFile)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(cliSwitchConfig(node, top, ""))
		c.MustApply("deploying " + top)
		if err := os.WriteFile(stateFile, before, 0o600); err != nil {
			t.Fatal(err)
		}
		if truth := readNodeTruth(t, node); truth.running != top || truth.profile != top {
			t.Fatalf("the node runs %s and boots %s, want %s", truth.running, truth.profile, top)
		}
	}

	c.Write(cliSwitchConfig(node, good, ""))
	c.MustApply("deploying good")
	cutBeforeStateWrite(goodV2)
	planOut, actions := c.PlanActions(addr)
	flat := strings.Join(strings.Fields(planOut), " ")
	if strings.Join(actions, ",") != "no-op" || !strings.Contains(flat, "deployed by an apply that did not write its state") {
		t.Fatalf("with the record, the plan's actions are %v, want no-op with a warning:\n%s", actions, planOut)
	}
	c.Run("apply", "-refresh-only", "-auto-approve", "-no-color")
	st := c.StateAttrs(addr)
	verdict, _ := st["verdict"].(map[string]any)
	truth := readNodeTruth(t, node)
	agree := st["toplevel"] == goodV2 && verdict["ok"] == true && verdict["confirmed"] == true && fmt.Sprint(st["generation"]) == truth.generation
	faultRow(t, "state write lost after the boot entry, node holds the verdict record", "adopted with the recorded verdict; plan empty", agree)
	if !agree {
		t.Fatalf("after the refresh the state says toplevel=%v generation=%v verdict.ok=%v confirmed=%v; node %+v", st["toplevel"], st["generation"], verdict["ok"], verdict["confirmed"], truth)
	}

	// The same cut, and the record lost (or never written): planned again.
	cutBeforeStateWrite(good)
	nodeExec(t, node, "rm -f "+records.VerdictRecordFile)
	planOut, actions = c.PlanActions(addr)
	flat = strings.Join(strings.Fields(planOut), " ")
	if strings.Join(actions, ",") != "update" || !strings.Contains(flat, "holds no verdict of it") {
		t.Fatalf("without the record, the plan's actions are %v, want update with a warning:\n%s", actions, planOut)
	}
	c.MustApply("deploying again")
	st = c.StateAttrs(addr)
	verdict, _ = st["verdict"].(map[string]any)
	truth = readNodeTruth(t, node)
	agree = st["toplevel"] == good && verdict["ok"] == true && fmt.Sprint(st["generation"]) == truth.generation && truth.running == good && truth.profile == good
	faultRow(t, "state write lost after the boot entry, no verdict record", "plan: update, warning \"holds no verdict of it\"; the apply converges", agree)
	if !agree {
		t.Fatalf("after deploying again: state toplevel=%v generation=%v verdict.ok=%v; node %+v", st["toplevel"], st["generation"], verdict["ok"], truth)
	}
	if _, actions := c.PlanActions(addr); strings.Join(actions, ",") != "no-op" {
		t.Fatalf("after converging the plan is %v, want no-op", actions)
	}
}
