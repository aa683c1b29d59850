package main

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// A staged rollout on four real lab nodes (canary 1, waves of 2, failure budget 0),
// from the real binary:
//  1. a bad configuration on the canary (a strict failed unit) halts the rollout after
//     wave 1: the other three nodes are untouched (their /run/current-system is the one
//     they had, and neither system was copied into their store), and each says why;
//  2. with the canary fixed and one node of wave 2 bad, the canary and wave 2 deploy
//     and the rollout halts after wave 2: wave 3 is untouched;
//  3. with that node fixed too, the same command resumes: the canary and the good
//     node of wave 2 already run their system with an ok verdict, so they are judged
//     again and not switched; the fixed node and wave 3 deploy, and the rollout
//     completes with every node on the good system.
func TestLabCLIRolloutHaltsAndResumes(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	bad := labtest.BuildClosure(t, labtest.ClosureFailedUnit)
	var nodes []labtest.Node
	for _, n := range []string{"ro-a", "ro-b", "ro-c", "ro-d"} {
		nodes = append(nodes, labtest.NewInstance(t, n))
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	canary, wave2a, wave2b, wave3 := nodes[0].Name, nodes[1].Name, nodes[2].Name, nodes[3].Name
	before := map[string]string{}
	for _, n := range nodes {
		before[n.Name] = readlink(t, n.Name, "/run/current-system")
		if inStore(t, n.Name, good) || inStore(t, n.Name, bad) {
			t.Fatalf("%s: the fresh node already holds the systems the test deploys", n.Name)
		}
	}

	dir := t.TempDir()
	closures := filepath.Join(labtest.RepoRoot(t), "lab", "closures", "default.nix")
	roster := map[string]any{
		"build":   map[string]any{"file": closures, "attribute": labtest.ClosureGood},
		"timings": map[string]string{"settle": "1s", "watch": "3s", "sample_interval": "1s"},
		"rollout": map[string]any{"canary": 1, "wave_size": 2, "failure_budget": 0},
		"nodes":   map[string]any{},
	}
	rn := roster["nodes"].(map[string]any)
	for _, n := range nodes {
		rn[n.Name] = map[string]any{"host": n.SSHHost, "port": n.SSHPort, "host_key": n.HostKey}
	}
	setBuild := func(node, attr string) {
		rn[node].(map[string]any)["build"] = map[string]any{"file": closures, "attribute": attr}
	}
	deploy := func(t *testing.T) (jsonSummary, int) {
		t.Helper()
		rosterFile := writeFileJSON(t, dir, "roster.json", roster)
		stdout, stderr, code := runCLI(t, bin, "deploy", "--output", "json", "--roster", rosterFile)
		var out jsonSummary
		if err := json.Unmarshal([]byte(stdout), &out); err != nil || out.Rollout == nil {
			t.Fatalf("exit %d, output is not the JSON summary with a rollout (%v):\n%s\nstderr:\n%s", code, err, stdout, stderr)
		}
		t.Logf("exit %d; rollout %+v", code, *out.Rollout)
		// The progress on stderr names each wave as it starts.
		if want := "rollout: wave 1 of 3: " + canary + "\n"; !strings.Contains(stderr, want) {
			t.Errorf("progress lacks %q:\n%s", want, stderr)
		}
		return out, code
	}
	node := func(out jsonSummary, name string) jsonNode {
		for _, n := range out.Nodes {
			if n.Node == name {
				return n
			}
		}
		t.Fatalf("no node %s in the output", name)
		return jsonNode{}
	}
	untouched := func(t *testing.T, names ...string) {
		t.Helper()
		for _, n := range names {
			if running := readlink(t, n, "/run/current-system"); running != before[n] {
				t.Errorf("%s was not to be touched, but runs %s (it ran %s)", n, running, before[n])
			}
			if inStore(t, n, good) || inStore(t, n, bad) {
				t.Errorf("%s was not to be touched, but a system was copied into its store", n)
			}
		}
	}

	t.Run("bad canary halts after wave 1", func(t *testing.T) {
		setBuild(canary, labtest.ClosureFailedUnit)
		out, code := deploy(t)
		r := out.Rollout
		if code != exitFailed || !r.Halted || r.HaltedInWave != 1 || r.Attempted != 1 || r.Failed != 1 ||
			r.FailureBudget == nil || *r.FailureBudget != 0 || len(r.Waves) != 3 || !r.Waves[0].Canary {
			t.Fatalf("exit %d rollout %+v: want exit 1, halted after the canary (wave 1 of 3), budget 0", code, *r)
		}
		if c := node(out, canary); c.OK || c.Verdict == nil || !strings.Contains(strings.Join(c.Verdict.Reasons, " "), "fedi-broken.service") {
			t.Errorf("canary %s: %+v, want failed naming fedi-broken.service", canary, c)
		}
		want := "the rollout halted after wave 1 of 3: 1 of the 1 nodes deployed failed (" + canary + "), past the failure budget of 0"
		for _, n := range []string{wave2a, wave2b, wave3} {
			if got := node(out, n); got.OK || got.NotAttempted != want {
				t.Errorf("%s: not_attempted %q, want %q", n, got.NotAttempted, want)
			}
		}
		if !reflect.DeepEqual(out.NotAttempted, []string{wave2a, wave2b, wave3}) {
			t.Errorf("not_attempted %v", out.NotAttempted)
		}
		untouched(t, wave2a, wave2b, wave3)
	})

	t.Run("fixed canary, a bad node in wave 2 halts after wave 2", func(t *testing.T) {
		setBuild(canary, labtest.ClosureGood)
		setBuild(wave2b, labtest.ClosureFailedUnit)
		out, code := deploy(t)
		r := out.Rollout
		if code != exitFailed || !r.Halted || r.HaltedInWave != 2 || r.Attempted != 3 || r.Failed != 1 {
			t.Fatalf("exit %d rollout %+v: want halted after wave 2 with 1 of 3 failed", code, *r)
		}
		for _, n := range []string{canary, wave2a} {
			if got := node(out, n); !got.OK || got.Toplevel != good || readlink(t, n, "/run/current-system") != good {
				t.Errorf("%s: ok %v toplevel %s, want ok on %s", n, got.OK, got.Toplevel, good)
			}
		}
		if got := node(out, wave2b); got.OK || got.NotAttempted != "" {
			t.Errorf("%s: %+v, want deployed and failed", wave2b, got)
		}
		if got := node(out, wave3); !strings.HasPrefix(got.NotAttempted, "the rollout halted after wave 2 of 3") {
			t.Errorf("%s: not_attempted %q", wave3, got.NotAttempted)
		}
		untouched(t, wave3)
	})

	t.Run("fixed, the same command resumes and completes", func(t *testing.T) {
		setBuild(wave2b, labtest.ClosureGood)
		out, code := deploy(t)
		r := out.Rollout
		if code != exitOK || !r.Complete || r.Halted || r.Failed != 0 || r.Attempted != 4 {
			t.Fatalf("exit %d rollout %+v: want exit 0, complete, nothing failed", code, *r)
		}
		for _, n := range nodes {
			got := node(out, n.Name)
			if !got.OK || readlink(t, n.Name, "/run/current-system") != good {
				t.Errorf("%s: ok %v, runs %s, want ok on %s", n.Name, got.OK, readlink(t, n.Name, "/run/current-system"), good)
			}
			// The nodes the halted run finished are judged again, not switched.
			wantResumed := n.Name == canary || n.Name == wave2a
			if got.Resumed != wantResumed {
				t.Errorf("%s: resumed %v, want %v", n.Name, got.Resumed, wantResumed)
			}
			if wantResumed && !switchSkipped(got) {
				t.Errorf("%s: resumed, yet its phases %+v do not say the switch was skipped", n.Name, got.Phases)
			}
			if !wantResumed && switchSkipped(got) {
				t.Errorf("%s: was to be deployed, yet its switch was skipped: %+v", n.Name, got.Phases)
			}
		}
	})
}

// inStore reports whether path is in instance's store.
func inStore(t *testing.T, instance, path string) bool {
	t.Helper()
	_, err := labtest.IncusErr("exec", instance, "--", "test", "-e", path)
	return err == nil
}

// switchSkipped reports whether the node's run skipped its switch (a verdict-only pass).
func switchSkipped(n jsonNode) bool {
	for _, p := range n.Phases {
		if p.Name == "switch" {
			return strings.HasPrefix(p.Note, "skipped")
		}
	}
	return false
}
