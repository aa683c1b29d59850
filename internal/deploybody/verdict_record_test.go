package deploybody

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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
	if order, records := recordsAndBootEntry(t, s.node); !strings.HasSuffix(order, "record,finalize") || len(records) != 1 {
		t.Fatalf("order %s, want the record (once) before the boot entry", order)
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

// A clean verdict becomes the node's last good system in the same round trip as the
// lock's last check and the verdict record, before the boot entry: no run of its own.
// A lenient verdict that let a failure pass records none; a record that cannot be
// written is a warning and the run goes on.
func TestDeployRecordsLastGoodWithItsVerdictInOneRoundTrip(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	if _, err := s.deploy(); err != nil {
		t.Fatal(err)
	}
	var lg LastGood
	if err := json.Unmarshal(s.node.lastGood, &lg); err != nil || lg.Toplevel != testToplevel || lg.Version != lastGoodVersion {
		t.Fatalf("last good record %s (%v), want %s", s.node.lastGood, err, testToplevel)
	}
	order, records := recordsAndBootEntry(t, s.node)
	if !strings.HasSuffix(order, "record,finalize") || strings.Contains(order, "heartbeat,finalize") || len(records) != 1 {
		t.Fatalf("order %s, want the lock's check with the records (once), then the boot entry", order)
	}
	if a := records[0].argv; len(a) != 11 || a[7] != LastGoodFile || a[8] != testToplevel || a[9] != LastGoodRoot {
		t.Fatalf("record call %q, want the last good file, toplevel and root", a[4:])
	}

	lenient := newScenario(t, map[string]unitSpec{"web.service": {b: runs}, "broken.service": {b: fails}})
	lenient.opts.Strict = false
	if _, err := lenient.deploy(); err != nil {
		t.Fatal(err)
	}
	if lenient.node.lastGood != nil || lenient.node.verdictRecord == nil {
		t.Fatalf("lenient: last good %s, verdict record %s; want only the verdict record", lenient.node.lastGood, lenient.node.verdictRecord)
	}

	failing := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	failing.node.lastGoodFails = true
	res, err := failing.deploy()
	if err != nil || failing.node.profile != testToplevel {
		t.Fatalf("err=%v profile=%s", err, failing.node.profile)
	}
	if w := strings.Join(res.Warnings, "\n"); !strings.Contains(w, "the last good system "+testToplevel+" was not recorded on the node (ln: failed to create symbolic link") {
		t.Fatalf("warnings %q", res.Warnings)
	}
}

// The lock script's record operation, run by the real sh on this machine against a
// lock file in a temporary directory (a fake node's /run and /var/lib; what is proven
// is the script, which the lab tests run on real nodes): it writes both records while
// the run holds the lock or the node lost every lock, and nothing once another run
// holds it; a write that fails is named, and the others still happen.
func TestLockScriptRecordWritesOnlyUnderThisRunsLock(t *testing.T) {
	for _, tool := range []string{"flock", "stat", "sed"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run the lock script: %v", tool, err)
		}
	}
	run := func(t *testing.T, dir, token, recordFile string) (string, string, string) {
		t.Helper()
		script := strings.ReplaceAll(lockScript, LockFile, filepath.Join(dir, "run", "node.lock"))
		lastGood, root := filepath.Join(dir, "lib", "last-good.json"), filepath.Join(dir, "roots", "last-good")
		cmd := exec.Command("sh", "-c", script, "sh", "record", token, recordFile, lastGood, "/nix/store/aaaa-system", root, `{"toplevel":"/nix/store/aaaa-system"}`)
		cmd.Stdin = strings.NewReader(`{"verdict":"ok"}`)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("lock script: %v: %s", err, out)
		}
		rec, _ := os.ReadFile(recordFile)
		lg, _ := os.ReadFile(lastGood)
		return string(out), string(rec), string(lg)
	}
	lock := func(t *testing.T, dir, token string) {
		t.Helper()
		must(t, os.MkdirAll(filepath.Join(dir, "run"), 0o700))
		must(t, os.WriteFile(filepath.Join(dir, "run", "node.lock"), []byte("token="+token+"\nhost=h\n"), 0o600))
	}
	t.Run("held by this run", func(t *testing.T) {
		dir := t.TempDir()
		lock(t, dir, "mine")
		out, rec, lg := run(t, dir, "mine", filepath.Join(dir, "lib", "last-verdict.json"))
		if out != "ok\nrecorded\npinned\n" || rec != `{"verdict":"ok"}` || lg != `{"toplevel":"/nix/store/aaaa-system"}` {
			t.Fatalf("out %q, record %q, last good %q", out, rec, lg)
		}
		if target, err := os.Readlink(filepath.Join(dir, "roots", "last-good")); err != nil || target != "/nix/store/aaaa-system" {
			t.Fatalf("GC root -> %q (%v)", target, err)
		}
	})
	t.Run("no lock on the node", func(t *testing.T) {
		dir := t.TempDir()
		out, rec, _ := run(t, dir, "mine", filepath.Join(dir, "lib", "last-verdict.json"))
		if out != "gone\nrecorded\npinned\n" || rec == "" {
			t.Fatalf("out %q, record %q", out, rec)
		}
	})
	t.Run("held by another run", func(t *testing.T) {
		dir := t.TempDir()
		lock(t, dir, "theirs")
		out, rec, lg := run(t, dir, "mine", filepath.Join(dir, "lib", "last-verdict.json"))
		if !strings.HasPrefix(out, "lost\ntoken=theirs\n") || strings.Contains(out, "recorded") || rec != "" || lg != "" {
			t.Fatalf("out %q, record %q, last good %q: want nothing written", out, rec, lg)
		}
	})
	t.Run("the verdict record cannot be written", func(t *testing.T) {
		dir := t.TempDir()
		lock(t, dir, "mine")
		blocker := filepath.Join(dir, "file")
		must(t, os.WriteFile(blocker, nil, 0o600))
		out, _, lg := run(t, dir, "mine", filepath.Join(blocker, "last-verdict.json"))
		if !strings.HasPrefix(out, "ok\nunrecorded ") || !strings.HasSuffix(out, "\npinned\n") || lg == "" {
			t.Fatalf("out %q, last good %q", out, lg)
		}
	})
}

// recordsAndBootEntry is the order of the lock's heartbeats, its record runs and the
// boot entry's writes on n, and the record runs; a verdict record or last good system
// written in a round trip of its own fails the test.
func recordsAndBootEntry(t *testing.T, n *fakeNode) (order string, records []call) {
	t.Helper()
	var seq []string
	for _, c := range n.calls {
		lockOp := ""
		if c.what == "run" && len(c.argv) > 4 && c.argv[2] == lockScript {
			lockOp = c.argv[4]
		}
		switch {
		case c.what == "finalize":
			seq = append(seq, "finalize")
		case lockOp == "record":
			seq, records = append(seq, "record"), append(records, c)
		case lockOp == "heartbeat":
			seq = append(seq, "heartbeat")
		case c.what == "run" && len(c.argv) > 2 && (c.argv[2] == writeRecordScript || c.argv[2] == writeLastGoodScript):
			t.Fatalf("a round trip of its own for a record: %q", c.argv)
		}
	}
	return strings.Join(seq, ","), records
}
