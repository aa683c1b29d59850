package deploybody

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A deploy leaves the node a record of its verdict, written before the boot entry, so
// a deployer killed between the boot entry and its state write leaves a node that can
// say which verdict the system it boots got. The check output is not kept on the node.
func TestDeployRecordsItsVerdictBeforeTheBootEntry(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}, "broken.service": {b: fails}})
	s.node.onCheck = func([]string) RunResult { return RunResult{Stdout: []byte("token=hunter2 answered")} }
	s.opts.Checks = []NodeCheck{{Name: "http", Argv: []string{"check"}, Interval: time.Second, Timeout: 5 * time.Second}}
	_, err := s.deploy()
	wantDeployErr(t, err, PhaseVerdict) // strict: the failed unit fails the run after the boot entry
	if s.node.profile != testToplevel {
		t.Fatalf("the boot entry points at %s", s.node.profile)
	}
	rec, rerr := ReadVerdictRecord(context.Background(), s.node)
	if rerr != nil || rec == nil {
		t.Fatalf("record %+v, err %v", rec, rerr)
	}
	if rec.Toplevel != testToplevel || rec.Result.Verdict.OK || len(rec.Result.Verdict.Failed) != 1 || rec.Result.Verdict.Failed[0].Unit != "broken.service" {
		t.Fatalf("record says toplevel %s ok %v failed %+v", rec.Toplevel, rec.Result.Verdict.OK, rec.Result.Verdict.Failed)
	}
	if strings.Contains(string(s.node.verdictRecord), "hunter2") || rec.Result.Changes != nil {
		t.Fatalf("the record keeps check output or changes: %s", s.node.verdictRecord)
	}
	if !strings.Contains(rec.Holder, "from host ") {
		t.Fatalf("the record does not name its run: %q", rec.Holder)
	}
	// Written before the boot entry: the record's write comes before the finalize call.
	var order []string
	for _, c := range s.node.calls {
		switch {
		case c.what == "finalize":
			order = append(order, "finalize")
		case c.what == "run" && len(c.argv) > 2 && c.argv[2] == writeRecordScript:
			order = append(order, "record")
		}
	}
	if strings.Join(order, ",") != "record,finalize" {
		t.Fatalf("order %v, want the record before the boot entry", order)
	}
}

// A record that cannot be written is a warning: the run goes on and sets the boot
// entry; without a record the next Read plans a redeploy rather than adopt the system.
func TestDeployWarnsWhenItsVerdictRecordFails(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.recordFails = true
	res, err := s.deploy()
	if err != nil || s.node.profile != testToplevel {
		t.Fatalf("err=%v profile=%s", err, s.node.profile)
	}
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "the verdict record "+VerdictRecordFile+" was not written") {
		t.Fatalf("warnings %q", res.Warnings)
	}
	if rec, err := ReadVerdictRecord(context.Background(), s.node); rec != nil || err != nil {
		t.Fatalf("record %+v err %v, want none", rec, err)
	}
	// A verdict-only pass writes no record: it sets no boot entry.
	s.node.recordFails = false
	if _, err := s.verdictOnly(); err != nil || s.node.verdictRecord != nil {
		t.Fatalf("verdict-only: err=%v record=%s", err, s.node.verdictRecord)
	}
}
