package deploybody

import (
	"context"
	"encoding/json"
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

// The drift decision over each case a node can be in, against what the deployer knows:
// the same decision the provider's Read and the command's resume act on.
func TestJudgeDriftOverEveryCase(t *testing.T) {
	const old, x, other, failedTop = "/nix/store/aaaa-old", "/nix/store/xxxx-new", "/nix/store/oooo-other", "/nix/store/ffff-failed"
	at := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	record := func(top string, ok bool) *VerdictRecord {
		v := &judge.Verdict{OK: ok, Strict: true}
		if !ok {
			v.Reasons = []string{"unit web.service failed"}
		}
		return &VerdictRecord{Toplevel: top, At: at, Holder: "a deploy from host h (process 1)", Result: &Result{Toplevel: top, Verdict: v}}
	}
	cases := []struct {
		name          string
		q             DriftQuestion
		s             NodeSystem
		want          DriftDecision
		wantRecord    bool   // the decision reads the node's verdict record
		wantFact      string // in the decision's words ("" : none)
		wantRecordSet bool
	}{
		{"runs the known system", DriftQuestion{Known: old}, NodeSystem{Running: old, Profile: old}, DriftNone, false, "", false},
		{"runs the known system, boots another (an earlier activation)", DriftQuestion{Known: old}, NodeSystem{Running: old, Profile: x}, DriftNone, false, "", false},
		{"activation boot, waits for its boot", DriftQuestion{Known: x, Activation: ActivationBoot}, NodeSystem{Running: old, Profile: x},
			DriftAwaitingBoot, false, "boots " + x + " at its next boot", false},
		{"activation switch, boots the known one but runs another: unfinished", DriftQuestion{Known: x, Activation: ActivationSwitch}, NodeSystem{Running: old, Profile: x},
			DriftUnfinishedSwitch, false, "the switch to " + old + " was not finished", false},
		{"runs the system whose deploy failed", DriftQuestion{Known: old, Failed: failedTop}, NodeSystem{Running: failedTop, Profile: failedTop, Record: record(failedTop, false)},
			DriftFailedDeploy, false, "switched to but judged failed", false},
		{"runs a system it does not boot", DriftQuestion{Known: old}, NodeSystem{Running: x, Profile: old, Record: record(x, true)},
			DriftUnfinishedSwitch, false, "its system profile (what it boots) points at " + old, false},
		{"runs a system with no profile at all", DriftQuestion{Known: old}, NodeSystem{Running: x}, DriftUnfinishedSwitch, false, "points at no system", false},
		{"runs and boots another, ok record of it", DriftQuestion{Known: old}, NodeSystem{Running: x, Profile: x, Record: record(x, true)},
			DriftAdoptWithVerdict, true, "recorded its verdict on the node (a deploy from host h (process 1), at 2026-12-06T09:00:00Z)", true},
		{"runs and boots another, failed record of it", DriftQuestion{Known: old}, NodeSystem{Running: x, Profile: x, Record: record(x, false)},
			DriftKeepFailed, true, "was judged failed (unit web.service failed)", true},
		{"runs and boots another, record of a third system", DriftQuestion{Known: old}, NodeSystem{Running: x, Profile: x, Record: record(other, true)},
			DriftAdoptUnjudged, true, "holds no verdict of it", false},
		{"runs and boots another, no record", DriftQuestion{Known: old}, NodeSystem{Running: x, Profile: x}, DriftAdoptUnjudged, true, "holds no verdict of it", false},
		{"runs and boots another, record unreadable", DriftQuestion{Known: old}, NodeSystem{Running: x, Profile: x, RecordErr: errors.New("sudo: a password is required")},
			DriftAdoptUnjudged, true, "holds no verdict of it", false},
		{"import, failed record: taken with it", DriftQuestion{Adopting: true}, NodeSystem{Running: x, Profile: x, Record: record(x, false)},
			DriftAdoptWithVerdict, true, "recorded its verdict on the node", true},
		{"import, no record", DriftQuestion{Adopting: true}, NodeSystem{Running: x, Profile: x}, DriftAdoptUnjudged, true, "holds no verdict of it", false},
		{"knowing none (the command), ok record", DriftQuestion{}, NodeSystem{Running: x, Profile: x, Record: record(x, true)},
			DriftAdoptWithVerdict, true, "recorded its verdict on the node", true},
		{"knowing none (the command), failed record", DriftQuestion{}, NodeSystem{Running: x, Profile: x, Record: record(x, false)},
			DriftKeepFailed, true, "was judged failed", true},
	}
	for _, c := range cases {
		c.q.Node = "n1"
		c.s.Generation = 7
		d := JudgeDrift(c.q, c.s)
		if d.Decision != c.want {
			t.Errorf("%s: decision %s, want %s (%s)", c.name, d.Decision, c.want, d.Fact)
			continue
		}
		if got := c.q.NeedsRecord(c.s); got != c.wantRecord {
			t.Errorf("%s: NeedsRecord %v, want %v", c.name, got, c.wantRecord)
		}
		if d.Running != c.s.Running || d.Profile != c.s.Profile || d.Generation != 7 {
			t.Errorf("%s: runs %q boots %q generation %d, want %q %q 7", c.name, d.Running, d.Profile, d.Generation, c.s.Running, c.s.Profile)
		}
		if (d.Record != nil) != c.wantRecordSet || (d.Record != nil && d.Record.Toplevel != c.s.Running) {
			t.Errorf("%s: record %+v, want one of the running system: %v", c.name, d.Record, c.wantRecordSet)
		}
		if c.wantFact == "" && d.Fact != "" {
			t.Errorf("%s: fact %q, want none", c.name, d.Fact)
		}
		if c.wantFact != "" && (!strings.Contains(d.Fact, c.wantFact) || !strings.Contains(d.Fact, "Node n1 ")) {
			t.Errorf("%s: fact %q, want it to name node n1 and say %q", c.name, d.Fact, c.wantFact)
		}
	}
}

func TestProfileGeneration(t *testing.T) {
	for link, want := range map[string]int{"system-12-link": 12, "/nix/var/nix/profiles/system-3-link": 3, "": 0, "/nix/store/aaaa-x": 0, "system-x-link": 0} {
		if got := records.ProfileGeneration(link); got != want {
			t.Errorf("ProfileGeneration(%q) = %d, want %d", link, got, want)
		}
	}
}

// scriptedNode answers the two reads of the drift decision as a node would: the
// system script's three lines, and the verdict record's file (exit 3: none). A fake,
// because a unit test of the read's parsing needs no node; the lab tests read real ones.
type scriptedNode struct {
	Transport // nil: the read calls Run only
	lines     string
	record    *VerdictRecord
	runs      []string
}

func (n *scriptedNode) Run(_ context.Context, argv []string, _ RunOptions) (RunResult, error) {
	switch {
	case len(argv) == 3 && argv[2] == SystemScript:
		n.runs = append(n.runs, "system")
		return RunResult{Stdout: []byte(n.lines)}, nil
	case len(argv) > 3 && argv[2] == records.ReadRecordScript && argv[4] == records.VerdictRecordFile:
		n.runs = append(n.runs, "record")
		if n.record == nil {
			return RunResult{ExitCode: 3}, nil
		}
		b, _ := json.Marshal(n.record)
		return RunResult{Stdout: b}, nil
	}
	return RunResult{ExitCode: 127}, nil
}

// ReadNodeSystem reads what the node runs, boots and its generation in one command,
// and its verdict record only when the decision needs it.
func TestReadNodeSystemReadsTheRecordOnlyWhenAsked(t *testing.T) {
	const old, x = "/nix/store/aaaa-old", "/nix/store/xxxx-new"
	rec := &VerdictRecord{Version: records.VerdictRecordVersion, Toplevel: x, Result: &Result{Verdict: &judge.Verdict{OK: true}}}
	q := DriftQuestion{Node: "n1", Known: old}

	n := &scriptedNode{lines: x + "\n" + x + "\n/nix/var/nix/profiles/system-4-link\n", record: rec}
	s, err := ReadNodeSystem(context.Background(), n, q.NeedsRecord)
	if err != nil || s.Running != x || s.Profile != x || s.Generation != 4 || s.Record == nil || s.Record.Toplevel != x {
		t.Fatalf("runs and boots x: %+v, %v; want x, x, generation 4 and its record", s, err)
	}
	if d := JudgeDrift(q, s); d.Decision != DriftAdoptWithVerdict {
		t.Errorf("decision %s, want %s", d.Decision, DriftAdoptWithVerdict)
	}

	n = &scriptedNode{lines: x + "\n" + old + "\n/nix/var/nix/profiles/system-3-link\n", record: rec}
	s, err = ReadNodeSystem(context.Background(), n, q.NeedsRecord)
	if err != nil || s.Record != nil || strings.Join(n.runs, ",") != "system" {
		t.Errorf("runs x, boots old: %+v, %v, commands %v; want no record read", s, err, n.runs)
	}

	n = &scriptedNode{lines: "\n\n\n"}
	if _, err := ReadNodeSystem(context.Background(), n, q.NeedsRecord); err == nil || !strings.Contains(err.Error(), "runs no NixOS system") {
		t.Errorf("no /run/current-system: error %v, want it to say the node runs no NixOS system", err)
	}
}

// The system script, run by the deployer's real sh on a node's layout made in a
// temporary directory (its paths put in place of /run and /nix/var), answers what one
// readlink -e per path answered: each link resolved, "" for a link whose target is gone
// and for a loop of links, and the profile's own link. readlink -m answers a loop with
// the looping path itself; the shell's test for existence makes it "".
func TestSystemScriptResolvesEachLinkAsReadlinkE(t *testing.T) {
	dir := t.TempDir()
	run := func() []string {
		t.Helper()
		script := strings.NewReplacer("/run/current-system", dir+"/run/current-system",
			"/nix/var/nix/profiles/system", dir+"/profiles/system").Replace(SystemScript)
		out, err := exec.Command("sh", "-c", script).Output()
		if err != nil {
			t.Fatalf("the system script: %v", err)
		}
		return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	}
	store := filepath.Join(dir, "store")
	for _, d := range []string{"run", "profiles", store + "/aaaa-system", store + "/bbbb-system"} {
		must(t, os.MkdirAll(filepath.Join(dir, strings.TrimPrefix(d, dir)), 0o755))
	}
	must(t, os.Symlink(store+"/aaaa-system", dir+"/run/current-system"))
	must(t, os.Symlink(store+"/bbbb-system", dir+"/profiles/system-5-link"))
	must(t, os.Symlink("system-5-link", dir+"/profiles/system"))
	if got, want := run(), []string{store + "/aaaa-system", store + "/bbbb-system", "system-5-link"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("both links resolvable: %q, want %q", got, want)
	}
	must(t, os.RemoveAll(store+"/bbbb-system"))
	if got, want := run(), []string{store + "/aaaa-system", "", "system-5-link"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the profile's system gone: %q, want %q", got, want)
	}
	must(t, os.Remove(dir+"/run/current-system"))
	must(t, os.Symlink(dir+"/run/loop", dir+"/run/current-system"))
	must(t, os.Symlink(dir+"/run/current-system", dir+"/run/loop"))
	if got, want := run(), []string{"", "", "system-5-link"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("a loop of links: %q, want %q", got, want)
	}
	if s := ParseNodeSystem(run()); s.Running != "" || s.Generation != 5 {
		t.Fatalf("parsed: %+v, want no running system, generation 5", s)
	}
}
