package deploybody

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// localNode runs the last good system's scripts with the real sh, on this machine, in a
// temporary directory standing in for the node's /var/lib and /nix/var: a fake node,
// because what is proven here is the scripts' order and atomicity and the verdicts
// that count as good, not a transport (the lab tests of both front ends run them on
// real nodes: TestLabCLIRollbackToLastGood, TestAccNodeSwitchDeploysLastGoodSystem).
type localNode struct {
	Transport // only Run is used
	dir       string
	runs      int
}

func (n *localNode) Run(ctx context.Context, argv []string, opts RunOptions) (RunResult, error) {
	n.runs++
	args := append([]string(nil), argv...)
	for i, a := range args {
		if a == records.LastGoodFile || a == records.LastGoodRoot {
			args[i] = filepath.Join(n.dir, filepath.Base(filepath.Dir(a)), filepath.Base(a))
		}
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(opts.Stdin), &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return RunResult{ExitCode: ee.ExitCode(), Stdout: out.Bytes(), Stderr: errb.Bytes()}, nil
	}
	return RunResult{Stdout: out.Bytes(), Stderr: errb.Bytes()}, err
}

func TestCleanVerdictIsOKWithNoReasonOnTheDeployedSystem(t *testing.T) {
	const top = "/nix/store/aaaa-nixos-system"
	for name, tc := range map[string]struct {
		res  *Result
		want bool
	}{
		"ok, no reason":                  {&Result{Toplevel: top, RunningSystem: top, Verdict: &judge.Verdict{OK: true}}, true},
		"lenient: ok with a failed unit": {&Result{Toplevel: top, RunningSystem: top, Verdict: &judge.Verdict{OK: true, Reasons: []string{"unit x failed"}}}, false},
		"failed":                         {&Result{Toplevel: top, RunningSystem: top, Verdict: &judge.Verdict{OK: false}}, false},
		"boot: runs the old system":      {&Result{Toplevel: top, RunningSystem: "/nix/store/bbbb-old", Verdict: &judge.Verdict{OK: true}}, false},
		"no verdict":                     {&Result{Toplevel: top, RunningSystem: top}, false},
		"no result":                      {nil, false},
	} {
		if got := CleanVerdict(tc.res); got != tc.want {
			t.Errorf("%s: CleanVerdict = %v, want %v", name, got, tc.want)
		}
	}
}

// A clean verdict is recorded and pinned; a lenient one leaves the record; a node
// without a record says ErrNoLastGood in the phase both front ends report.
func TestRecordAndReadLastGood(t *testing.T) {
	ctx := context.Background()
	n := &localNode{dir: t.TempDir()}
	if _, err := LastGoodToplevel(ctx, n, "web01"); !errors.Is(err, records.ErrNoLastGood) {
		t.Fatalf("no record: %v, want ErrNoLastGood", err)
	} else if de := (*DeployError)(nil); !errors.As(err, &de) || de.Phase != PhaseReadLastGood || de.Node != "web01" {
		t.Fatalf("no record: %#v, want a DeployError of web01 in %s", err, PhaseReadLastGood)
	}

	good, bad := "/nix/store/aaaa-good", "/nix/store/bbbb-bad"
	at := time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC)
	res := &Result{Toplevel: good, RunningSystem: good, Verdict: &judge.Verdict{OK: true}}
	RecordLastGood(ctx, n, res, at)
	if len(res.Warnings) != 0 {
		t.Fatalf("recording warned: %v", res.Warnings)
	}
	RecordLastGood(ctx, n, &Result{Toplevel: bad, RunningSystem: bad, Verdict: &judge.Verdict{OK: true, Reasons: []string{"fedi-broken.service failed"}}}, at.Add(time.Hour))

	rec, err := ReadLastGood(ctx, n)
	if err != nil || rec == nil || rec.Toplevel != good || !rec.At.Equal(at) {
		t.Fatalf("record %+v, %v: want %s at %s (the lenient verdict is not good)", rec, err, good, at)
	}
	if top, err := LastGoodToplevel(ctx, n, "web01"); err != nil || top != good {
		t.Fatalf("LastGoodToplevel = %q, %v", top, err)
	}
	root, err := os.Readlink(filepath.Join(n.dir, "fediversity", "last-good"))
	if err != nil || root != good {
		t.Fatalf("GC root points at %q (%v), want %s", root, err, good)
	}
	if fi, err := os.Stat(filepath.Join(n.dir, "fediversity")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the record's directory: %v %v, want mode 0700", fi, err)
	}
}

// Read's line tells the record the apply reads (RecordLastGood's), none, or that it
// could not tell: the plan then asks the node itself. The script runs under the real
// sh against a temporary directory in place of the node's /var/lib/fediversity; this
// test runs as root, so the unreadable record of an SSH user other than root is shown
// by its line only.
func TestLastGoodReadScriptTellsTheRecord(t *testing.T) {
	dir := t.TempDir()
	n := &localNode{dir: dir}
	file := filepath.Join(dir, filepath.Base(filepath.Dir(records.LastGoodFile)), filepath.Base(records.LastGoodFile))
	read := func() (string, bool) {
		t.Helper()
		script := strings.ReplaceAll(records.LastGoodReadScript, records.LastGoodFile, file)
		out, err := exec.Command("sh", "-c", script).Output()
		if err != nil {
			t.Fatalf("the read script: %v", err)
		}
		return records.ParseLastGoodLine(string(out))
	}
	if top, ok := read(); top != "" || !ok {
		t.Fatalf("a node that never recorded: (%q, %v), want none, told", top, ok)
	}
	good := "/nix/store/00000000000000000000000000000000-good"
	RecordLastGood(context.Background(), n, &Result{Toplevel: good, RunningSystem: good, Verdict: &judge.Verdict{OK: true}}, time.Now())
	if top, ok := read(); top != good || !ok {
		t.Fatalf("after a clean verdict recorded: (%q, %v), want (%q, true)", top, ok, good)
	}
	if rec, err := ReadLastGood(context.Background(), n); err != nil || rec == nil || rec.Toplevel != good {
		t.Fatalf("the apply's read: %+v, %v, want %s as Read's line", rec, err, good)
	}
	if err := os.WriteFile(file, []byte("{half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if top, ok := read(); top != "" || ok {
		t.Fatalf("a record that is not JSON: (%q, %v), want not told (the plan's own read reports it)", top, ok)
	}
	if err := os.WriteFile(file, []byte(`{"version":99,"toplevel":"/nix/store/x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if top, ok := read(); top != "" || !ok {
		t.Fatalf("a record of another version: (%q, %v), want none, as ReadLastGood", top, ok)
	}
	for _, line := range []string{"last-good?", "", "none"} {
		if top, ok := records.ParseLastGoodLine(line); top != "" || ok {
			t.Fatalf("line %q: (%q, %v), want not told", line, top, ok)
		}
	}
}
