package fleet

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// resumeNode's node: it answers the drift decision's two reads (the system script,
// the verdict record) and nothing else. A fake, because which node a resumed rollout
// judges rather than deploys is decided over these two answers alone; the lab tests
// (cmd/fediversity TestLabCLIRolloutHaltsAndResumes) resume real nodes.
type resumingNode struct {
	deploybody.Transport // nil: resumable calls Run only
	running, profile     string
	record               *deploybody.VerdictRecord
	recordReads          int
	// pending is what the node's transport tells of an earlier run's unfinished
	// restore (an Incus node's snapshot journal; "" none).
	pending string
}

func (n *resumingNode) PendingRestore(context.Context) (string, error) { return n.pending, nil }

func (n *resumingNode) Run(_ context.Context, argv []string, _ deploybody.RunOptions) (deploybody.RunResult, error) {
	switch {
	case len(argv) == 3 && argv[2] == deploybody.SystemScript:
		return deploybody.RunResult{Stdout: []byte(n.running + "\n" + n.profile + "\n/nix/var/nix/profiles/system-5-link\n")}, nil
	case len(argv) > 4 && argv[2] == records.ReadRecordScript && argv[4] == records.VerdictRecordFile:
		n.recordReads++
		if n.record == nil {
			return deploybody.RunResult{ExitCode: 3}, nil
		}
		b, _ := json.Marshal(n.record)
		return deploybody.RunResult{Stdout: b}, nil
	}
	return deploybody.RunResult{ExitCode: 127}, nil
}

// A halted rollout resumes a node only when the drift decision adopts this run's
// system with its recorded ok verdict: the node runs and boots it. One that runs it but
// does not boot it (a run cut off between its verdict record and its boot entry) is
// deployed again, so that its boot entry is written. A node an earlier run reached that
// is deployed again says why, in the words the provider's refresh gives the same node
// (deploybody.JudgeDrift, asked with the system the provider's state would name); a node
// no run reached yet (it runs and boots another system) is deployed without a word.
func TestResumeJudgesOnlyANodeThatRunsAndBootsTheSystemWithAnOkVerdict(t *testing.T) {
	const old, top, other = "/nix/store/aaaa-old", "/nix/store/tttt-this-run", "/nix/store/oooo-other"
	at := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	rec := func(system string, ok bool) *deploybody.VerdictRecord {
		return &deploybody.VerdictRecord{Version: records.VerdictRecordVersion, Toplevel: system, At: at, Holder: "a deploy from host h (process 1)",
			Result: &deploybody.Result{Toplevel: system, Verdict: &judge.Verdict{OK: ok, Reasons: []string{"unit web.service failed"}}}}
	}
	cases := []struct {
		name            string
		node            resumingNode
		activation      deploybody.Activation
		want            bool
		wantRecordReads int
		// why is the provider's question whose decision's words the warning must carry
		// (nil: no warning).
		why *deploybody.DriftQuestion
	}{
		{"runs and boots it, ok verdict on record", resumingNode{running: top, profile: top, record: rec(top, true)}, "", true, 1, nil},
		{"runs it, boots the previous one", resumingNode{running: top, profile: old, record: rec(top, true)}, "", false, 0,
			&deploybody.DriftQuestion{Node: "n1", Known: old}},
		{"runs and boots it, failed verdict on record", resumingNode{running: top, profile: top, record: rec(top, false)}, "", false, 1,
			&deploybody.DriftQuestion{Node: "n1", Known: old}},
		{"runs and boots it, record of another system", resumingNode{running: top, profile: top, record: rec(other, true)}, "", false, 1,
			&deploybody.DriftQuestion{Node: "n1", Known: old}},
		{"runs and boots it, no record", resumingNode{running: top, profile: top}, "", false, 1,
			&deploybody.DriftQuestion{Node: "n1", Known: old}},
		{"runs another system with an ok verdict", resumingNode{running: other, profile: other, record: rec(other, true)}, "", false, 0, nil},
		{"runs another system, boots a third (switched by hand)", resumingNode{running: other, profile: old}, "", false, 0,
			&deploybody.DriftQuestion{Node: "n1", Known: old}},
		{"runs another system, boots this one (activation boot)", resumingNode{running: old, profile: top}, deploybody.ActivationBoot, false, 0,
			&deploybody.DriftQuestion{Node: "n1", Known: top, Activation: deploybody.ActivationBoot}},
	}
	for _, c := range cases {
		d, s, readErr, ok := resumable(context.Background(), &c.node, "n1", top)
		if ok != c.want || c.node.recordReads != c.wantRecordReads {
			t.Errorf("%s: resumed %v (%s: %s), record read %d times; want %v, %d", c.name, ok, d.Decision, d.Fact, c.node.recordReads, c.want, c.wantRecordReads)
		}
		if ok {
			// The provider's Read says the same fact of such a node (deploybody.JudgeDrift).
			want := deploybody.JudgeDrift(deploybody.DriftQuestion{Node: "n1", Known: old}, deploybody.NodeSystem{Running: top, Profile: top, Record: c.node.record}).Fact
			if w := resumedWarning(d); !strings.Contains(w, want) || !strings.Contains(w, "2026-12-06T09:00:00Z") {
				t.Errorf("%s: warning %q, want the drift decision's words %q", c.name, w, want)
			}
			continue
		}
		got := notResumedWarning(context.Background(), &c.node, "n1", d, s, readErr, top, c.activation)
		if c.why == nil {
			if got != "" {
				t.Errorf("%s: warning %q, want none", c.name, got)
			}
			continue
		}
		ns := deploybody.NodeSystem{Running: c.node.running, Profile: c.node.profile, Generation: 5}
		if c.why.NeedsRecord(ns) {
			ns.Record = c.node.record
		}
		provider := deploybody.JudgeDrift(*c.why, ns)
		if want := "not resumed: " + provider.Fact + " It is deployed again."; provider.Fact == "" || got != want {
			t.Errorf("%s: warning %q\nwant the provider's words (%s) %q", c.name, got, provider.Decision, want)
		}
	}
}

// A node an earlier run's restore left unfinished (an Incus node's snapshot journal
// tells) is deployed again, whose first step finishes the restore, and says so in the
// words the provider's refresh gives it (deploybody.JudgeUnfinishedRestore): whether the
// restore stopped the instance (it does not answer) or had not stopped it yet (it runs
// the state that restore kept aside). A node that runs this run's system is judged as
// any other.
func TestResumeSaysAnUnfinishedRestore(t *testing.T) {
	const old, top, other = "/nix/store/aaaa-old", "/nix/store/tttt-this-run", "/nix/store/oooo-other"
	const pending = "a restore of rollback point fediversity-1 began at 2026-12-06T09:00:00Z and has not finished"
	ctx := context.Background()
	cases := []struct {
		name string
		node resumingNode
		// the provider's words: its Read of the same node, its state naming old
		want string
	}{
		{"stopped by the restore", resumingNode{pending: pending}, "Node n1 does not answer: " + pending + "."},
		{"runs the state kept aside", resumingNode{running: other, profile: other, pending: pending}, "Node n1 runs " + other + ": " + pending + "."},
		{"stopped, no restore begun", resumingNode{}, ""},
		{"runs this run's system", resumingNode{running: top, profile: top, pending: pending}, ""},
	}
	for _, c := range cases {
		d, s, readErr, ok := resumable(ctx, &c.node, "n1", top)
		if ok {
			t.Fatalf("%s: resumed", c.name)
		}
		got := notResumedWarning(ctx, &c.node, "n1", d, s, readErr, top, "")
		if c.want == "" {
			if strings.Contains(got, pending) {
				t.Errorf("%s: warning %q names the restore", c.name, got)
			}
			continue
		}
		provider := deploybody.JudgeUnfinishedRestore(ctx, &c.node, deploybody.DriftQuestion{Node: "n1", Known: old}, s, readErr)
		if provider != c.want || got != "not resumed: "+c.want+" It is deployed again." {
			t.Errorf("%s: warning %q, provider's words %q; want both to say %q", c.name, got, provider, c.want)
		}
	}
}
