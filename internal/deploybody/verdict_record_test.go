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

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// A deploy leaves the node a record of its verdict, written before the boot entry, so
// a deployer killed between the boot entry and its state write leaves a node that can
// say which verdict the system it boots got. The check output is not kept on the node.
func TestDeployRecordsItsVerdictBeforeTheBootEntry(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}, "broken.service": {b: fails}})
	s.node.onCheck = func([]string) RunResult { return RunResult{Stdout: []byte("token=hunter2 answered")} }
	s.opts.Checks = []judge.NodeCheck{{Name: "http", Argv: []string{"check"}, Interval: time.Second, Timeout: 5 * time.Second}}
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
	if order, writes := recordsAndBootEntry(t, s.node); !strings.HasSuffix(order, "record,finalize") || len(writes) != 1 {
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
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "the verdict record "+records.VerdictRecordFile+" was not written") {
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
	var lg records.LastGood
	if err := json.Unmarshal(s.node.lastGood, &lg); err != nil || lg.Toplevel != testToplevel || lg.Version != records.LastGoodVersion {
		t.Fatalf("last good record %s (%v), want %s", s.node.lastGood, err, testToplevel)
	}
	order, writes := recordsAndBootEntry(t, s.node)
	if !strings.HasSuffix(order, "record,finalize") || strings.Contains(order, "heartbeat,finalize") || len(writes) != 1 {
		t.Fatalf("order %s, want the lock's check with the records (once), then the boot entry", order)
	}
	if a := writes[0].argv; len(a) != 11 || a[7] != records.LastGoodFile || a[8] != testToplevel || a[9] != records.LastGoodRoot {
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

// recordsAndBootEntry is the order of the lock's heartbeats, its record runs and the
// boot entry's writes on n, and the record runs; a verdict record or last good system
// written in a round trip of its own fails the test.
func recordsAndBootEntry(t *testing.T, n *fakeNode) (order string, writes []call) {
	t.Helper()
	var seq []string
	for _, c := range n.calls {
		lockOp := ""
		if c.what == "run" && len(c.argv) > 4 && c.argv[2] == records.LockScript {
			lockOp = c.argv[4]
		}
		switch {
		case c.what == "finalize":
			seq = append(seq, "finalize")
		case lockOp == "record":
			seq, writes = append(seq, "record"), append(writes, c)
		case lockOp == "heartbeat":
			seq = append(seq, "heartbeat")
		case c.what == "run" && len(c.argv) > 2 && (c.argv[2] == records.WriteRecordScript || c.argv[2] == records.WriteLastGoodScript):
			t.Fatalf("a round trip of its own for a record: %q", c.argv)
		}
	}
	return strings.Join(seq, ","), writes
}

// recordBench runs the lock script's record operation with the real sh on this
// machine, with the node's /var/lib, /run and /nix/var moved into a temporary
// directory: what is proven is the script's writes (the lab tests run it on nodes).
type recordBench struct {
	root, dataDir, victim string
	moved                 *strings.Replacer
}

func newRecordBench(t *testing.T) *recordBench {
	t.Helper()
	for _, tool := range []string{"flock", "stat", "sed", "mktemp"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run the lock script: %v", tool, err)
		}
	}
	root := t.TempDir()
	b := &recordBench{root: root, dataDir: filepath.Join(root, "var/lib/fediversity"), victim: filepath.Join(root, "etc-shadow")}
	b.moved = strings.NewReplacer("/var/lib/", root+"/var/lib/", "/run/fediversity", root+"/run/fediversity", "/nix/var/", root+"/nix/var/")
	// /var/lib/fediversity is an Incus node's data volume: a service owns it, 0755.
	must(t, os.MkdirAll(b.dataDir, 0o755))
	must(t, os.Chmod(b.dataDir, 0o755))
	must(t, os.WriteFile(b.victim, []byte("root:secret\n"), 0o600))
	must(t, os.MkdirAll(filepath.Join(root, "run/fediversity"), 0o700))
	must(t, os.WriteFile(filepath.Join(root, "run/fediversity/node.lock"), []byte("token=mine\nhost=h\n"), 0o600))
	return b
}

// record runs the record operation as a run that holds the lock; lastGood "" writes no
// last good system (a lenient verdict).
func (b *recordBench) record(t *testing.T, lastGood string) string {
	t.Helper()
	args := []string{"-c", b.moved.Replace(records.LockScript), "sh", "record", "mine", b.moved.Replace(records.VerdictRecordFile), "", "", "", ""}
	if lastGood != "" {
		args = append(args[:6], b.moved.Replace(records.LastGoodFile), "/nix/store/aaaa-system", b.moved.Replace(records.LastGoodRoot), lastGood)
	}
	cmd := exec.Command("sh", args...)
	cmd.Stdin = strings.NewReader(`{"version":1}`)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lock script: %v: %s", err, out)
	}
	return string(out)
}

func (b *recordBench) file(rel string) string {
	raw, _ := os.ReadFile(filepath.Join(b.root, rel))
	return string(raw)
}

// Issue 39, item 6: the records live in a directory of their own. A deploy never
// changes the mode of /var/lib/fediversity (an Incus node's data volume, owned by a
// service); what an older version left there is moved to the new directory, and the
// old directory stays as it was. On the current main every deploy ran chmod 700 on it.
func TestRecordsKeepOutOfTheDataDirectory(t *testing.T) {
	b := newRecordBench(t)
	must(t, os.WriteFile(filepath.Join(b.dataDir, "last-verdict.json"), []byte(`{"version":1,"old":true}`), 0o600))
	must(t, os.WriteFile(filepath.Join(b.dataDir, "last-good.json"), []byte(`{"version":1,"toplevel":"/nix/store/bbbb-old"}`), 0o600))
	must(t, os.WriteFile(filepath.Join(b.dataDir, "app.db"), []byte("service data"), 0o644))
	// A lenient verdict: no last good system of its own; the older one moves over.
	if out := b.record(t, ""); out != "ok\nrecorded\n" {
		t.Fatalf("record: %q", out)
	}
	if fi, err := os.Stat(b.dataDir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the data directory's mode is %v (%v), want 0755 as the service left it", fi.Mode().Perm(), err)
	}
	if got := b.file("var/lib/fediversity-deploy/last-verdict.json"); got != `{"version":1}` {
		t.Fatalf("verdict record %q", got)
	}
	if got := b.file("var/lib/fediversity-deploy/last-good.json"); got != `{"version":1,"toplevel":"/nix/store/bbbb-old"}` {
		t.Fatalf("the older last good system was not moved over: %q", got)
	}
	if fi, err := os.Stat(filepath.Join(b.root, "var/lib/fediversity-deploy")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the records' directory: %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	for _, old := range []string{"last-verdict.json", "last-good.json"} {
		if _, err := os.Lstat(filepath.Join(b.dataDir, old)); !os.IsNotExist(err) {
			t.Fatalf("the older %s is still in the data directory (%v)", old, err)
		}
	}
	if b.file("var/lib/fediversity/app.db") != "service data" {
		t.Fatal("the service's data was touched")
	}
	// Until a deploy moves them, the readers find the older records.
	for _, read := range []struct{ script, file, legacy string }{
		{records.ReadRecordScript, records.VerdictRecordFile, records.LegacyVerdictRecordFile},
	} {
		must(t, os.WriteFile(filepath.Join(b.dataDir, "last-verdict.json"), []byte("older"), 0o600))
		must(t, os.Remove(filepath.Join(b.root, "var/lib/fediversity-deploy/last-verdict.json")))
		out, err := exec.Command("sh", "-c", read.script, "sh", b.moved.Replace(read.file), b.moved.Replace(read.legacy)).Output()
		if err != nil || string(out) != "older" {
			t.Fatalf("reading with only the older record: %q (%v)", out, err)
		}
	}
}

// Issue 39, item 7: a service that owns /var/lib/fediversity plants symbolic links at
// the names the records were written through; root's write follows none of them. On
// the current main the record was written through "$1.tmp" with cat, and a link there
// made root overwrite any file on the node.
func TestRecordWritesFollowNoPlantedLink(t *testing.T) {
	b := newRecordBench(t)
	for _, name := range []string{"last-verdict.json.tmp", "last-good.json.tmp", "last-verdict.json", "last-good.json"} {
		must(t, os.Symlink(b.victim, filepath.Join(b.dataDir, name)))
	}
	b.record(t, `{"version":1,"toplevel":"/nix/store/aaaa-system"}`)
	if got := b.file("etc-shadow"); got != "root:secret\n" {
		t.Fatalf("a planted link made the record write overwrite another file: %q", got)
	}
	if got := b.file("var/lib/fediversity-deploy/last-good.json"); got != `{"version":1,"toplevel":"/nix/store/aaaa-system"}` {
		t.Fatalf("last good record %q", got)
	}
	// A link in place of the records' directory itself is refused, not followed.
	b2 := newRecordBench(t)
	must(t, os.Symlink(filepath.Dir(b2.victim), filepath.Join(b2.root, "var/lib/fediversity-deploy")))
	if out := b2.record(t, ""); !strings.Contains(out, "unrecorded") || !strings.Contains(out, "is not a directory of its own") {
		t.Fatalf("record through a linked directory: %q", out)
	}
	if b2.file("etc-shadow") != "root:secret\n" {
		t.Fatal("the linked directory's files were overwritten")
	}
}
