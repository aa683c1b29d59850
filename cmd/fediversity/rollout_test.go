package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/noderun"
)

// The flags win over the roster's rollout, field by field.
func TestRolloutFlagsOverTheRoster(t *testing.T) {
	fromRoster := &fleet.Rollout{}
	if err := json.Unmarshal([]byte(`{"canary": 1, "wave_size": "50%", "failure_budget": 2}`), fromRoster); err != nil {
		t.Fatal(err)
	}
	r, err := rolloutFlags{waves: "n3,n4;n2", failureBudget: "0"}.rollout(fromRoster)
	if err != nil {
		t.Fatal(err)
	}
	plan, problems := r.Plan([]string{"n1", "n2", "n3", "n4"}, []string{"n1", "n2", "n3", "n4"})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if got := plan.Waves; len(got) != 3 || strings.Join(got[1], ",") != "n3,n4" || strings.Join(got[2], ",") != "n2" || plan.Budget != 0 {
		t.Errorf("waves %v budget %d, want [[n1] [n3 n4] [n2]] budget 0", got, plan.Budget)
	}
	if _, err := (rolloutFlags{waveSize: "half"}).rollout(nil); err == nil || !strings.Contains(err.Error(), "--wave-size") {
		t.Errorf("--wave-size half: %v, want an error naming the flag", err)
	}
}

// Bad rollout input is refused before anything runs (exit 2), naming the field.
func TestRolloutBadInputIsRefused(t *testing.T) {
	dir := t.TempDir()
	roster := filepath.Join(dir, "roster.json")
	body := `{"rollout": {"canary": ["web9"]}, "nodes": {"web01": {"host": "127.0.0.1", "port": 9, "host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl", "toplevel": "/nix/store/00000000000000000000000000000000-x"}}}`
	if err := os.WriteFile(roster, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSH_PRIVATE_KEY_FILE", filepath.Join(dir, "key"))
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"deploy", "--roster", roster}, &stdout, &stderr, newNodePhases())
	if code != exitBadInput || !strings.Contains(stderr.String(), `rollout.canary: node "web9": the roster has no such node`) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 2 naming rollout.canary and web9", code, stderr.String())
	}
	stderr.Reset()
	code = run(t.Context(), []string{"deploy", "--roster", roster, "--output", "yaml"}, &stdout, &stderr, newNodePhases())
	if code != exitBadInput || !strings.Contains(stderr.String(), `--output: "yaml": want table or json`) {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
}

// A halted rollout, as the table and the JSON show it: each node's state, each wave,
// and the halt with its reason.
func TestRolloutHaltInTableAndJSON(t *testing.T) {
	reason := "the rollout halted after wave 1 of 2: 1 of the 1 nodes deployed failed (web01), past the failure budget of 0"
	outcomes := []fleet.Outcome{
		{Node: "web01", Wave: 1, Outcome: noderun.Outcome{Result: &deploybody.Result{Verdict: &judge.Verdict{Reasons: []string{"fedi-broken.service failed"}}}}},
		{Node: "web02", Wave: 2, NotAttempted: reason},
	}
	res := &fleet.RolloutResult{Budget: 0, Nodes: 2, Attempted: 1, Failed: 1, Halted: true, HaltedInWave: 1, Waves: []fleet.WaveResult{
		{Number: 1, Canary: true, Nodes: []string{"web01"}, Attempted: true, Failed: []string{"web01"}},
		{Number: 2, Nodes: []string{"web02"}, NotAttempted: []string{"web02"}},
	}}
	var b bytes.Buffer
	writeTable(&b, outcomes)
	writeRolloutTable(&b, res, true)
	for _, want := range []string{"web02  not attempted  -           -     " + reason, "0 ok, 1 failed, 0 disabled by the submission, 1 not attempted",
		"wave 1 (canary): web01: 1 failed (web01)", "wave 2: web02: not attempted", "rollout HALTED: " + reason} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := writeJSON(&b, summarize(outcomes, rolloutJSON(res, true))); err != nil {
		t.Fatal(err)
	}
	var got jsonSummary
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	r := got.Rollout
	if r == nil || !r.Halted || r.HaltedInWave != 1 || r.HaltReason != reason || r.FailureBudget == nil || *r.FailureBudget != 0 ||
		len(r.Waves) != 2 || strings.Join(r.Waves[1].NotAttempted, ",") != "web02" || strings.Join(got.NotAttempted, ",") != "web02" ||
		got.Nodes[1].NotAttempted != reason || got.Nodes[1].Wave != 2 || got.Nodes[1].OK {
		t.Errorf("JSON:\n%s", b.String())
	}
}

// Every roster the ssh guide prints loads, and its rollout lays out on its nodes.
func TestSSHGuideRostersLoad(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(labtest.RepoRoot(t), "docs", "guides", "ssh.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(string(page), -1)
	staged := 0
	for i, m := range blocks {
		file := filepath.Join(t.TempDir(), "roster.json")
		if err := os.WriteFile(file, []byte(m[1]), 0o600); err != nil {
			t.Fatal(err)
		}
		roster, err := fleet.LoadRoster(file)
		if err != nil {
			t.Errorf("roster %d of the ssh guide: %v\n%s", i+1, err, m[1])
			continue
		}
		if roster.Rollout.Staged() {
			staged++
			if _, problems := roster.Rollout.Plan(roster.NodeNames(), roster.NodeNames()); len(problems) > 0 {
				t.Errorf("roster %d of the ssh guide: %v", i+1, problems)
			}
		}
	}
	if len(blocks) < 2 || staged < 1 {
		t.Fatalf("found %d JSON rosters (%d with a rollout) in the ssh guide: the pattern no longer matches", len(blocks), staged)
	}
}
