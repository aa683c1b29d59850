package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// sixNodeRollout is the rollout of issue 23's proof: a canary of 1, waves of 50%, a
// failure budget of 1. On a group of 6 it lays out (internal/fleet's Plan; its unit
// test TestRolloutPlanLaysOutWaves holds the same case) as:
//
//	wave 1 (canary): n1
//	wave 2:          n2 n3 n4   (50% of the group's 6 nodes, rounded up: 3)
//	wave 3:          n5 n6      (the rest)
//
// and the budget is 1 node (a count, as given).
var sixNodeRollout = map[string]any{"canary": 1, "wave_size": "50%", "failure_budget": 1}

// sixNodeGroup makes six throwaway lab nodes (named with prefix, sorted, so they are
// n1..n6 of the layout above) and a roster deploying the good closure to each. Each
// node's /run/current-system before the test is returned too, and the fresh nodes are
// checked to hold neither closure the tests deploy.
func sixNodeGroup(t *testing.T, prefix string, closures ...string) (nodes []labtest.Node, roster map[string]any, before map[string]string) {
	t.Helper()
	for _, s := range []string{"a", "b", "c", "d", "e", "f"} {
		nodes = append(nodes, labtest.NewInstance(t, prefix+s))
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	before = map[string]string{}
	for _, n := range nodes {
		before[n.Name] = readlink(t, n.Name, "/run/current-system")
		for _, c := range closures {
			if inStore(t, n.Name, c) {
				t.Fatalf("%s: the fresh node already holds %s, which the test deploys", n.Name, c)
			}
		}
	}
	file := filepath.Join(labtest.RepoRoot(t), "lab", "closures", "default.nix")
	rn := map[string]any{}
	for _, n := range nodes {
		rn[n.Name] = map[string]any{"host": n.SSHHost, "port": n.SSHPort, "host_key": n.HostKey}
	}
	roster = map[string]any{
		"build":   map[string]any{"file": file, "attribute": labtest.ClosureGood},
		"timings": map[string]string{"settle": "1s", "watch": "3s", "sample_interval": "1s"},
		"rollout": sixNodeRollout,
		"nodes":   rn,
	}
	return nodes, roster, before
}

// wantSixNodeWaves fails the test unless the rollout's waves are the layout of
// sixNodeRollout on nodes.
func wantSixNodeWaves(t *testing.T, r *jsonRollout, nodes []labtest.Node) {
	t.Helper()
	n := func(i int) string { return nodes[i-1].Name }
	want := [][]string{{n(1)}, {n(2), n(3), n(4)}, {n(5), n(6)}}
	var got [][]string
	for _, w := range r.Waves {
		got = append(got, w.Nodes)
	}
	if !reflect.DeepEqual(got, want) || !r.Staged || len(r.Waves) != 3 || !r.Waves[0].Canary ||
		r.FailureBudget == nil || *r.FailureBudget != 1 || r.Nodes != 6 {
		t.Fatalf("rollout %+v: want 6 nodes in waves %v (canary first), budget 1", *r, want)
	}
}

// Issue 23's proof, on six real lab nodes from the real binary (canary 1, waves of
// 50%, budget 1; the layout is sixNodeRollout's: n1 | n2 n3 n4 | n5 n6):
//  1. a configuration that breaks on 2 nodes of wave 2 (n3 and n4: a strict failed
//     unit) halts the rollout after wave 2 with exit 1, as 2 failed is past the budget
//     of 1. Wave 3 (n5, n6) is untouched: its /run/current-system is the one it had and
//     neither system was copied into its store. The JSON summary and the table name
//     each node's state: ok (n1, n2), failed naming fedi-broken.service (n3, n4), not
//     attempted with the halt reason as the command words it (n5, n6). The broken
//     nodes are the last two of wave 2, so every node of wave 2 is deployed whatever
//     the parallelism (nodes start in wave order and none starts past the budget).
//  2. the same broken configuration run again halts at the same place: n1 and n2 are
//     judged again (resumed), n3 and n4 fail again, wave 3 is still untouched (this
//     run prints the table);
//  3. with n3 and n4 fixed, the same command finishes the rollout: n1 and n2 already
//     run the good system with an ok verdict, so they are judged again and not
//     switched; n3, n4 and wave 3 deploy; every node runs the good system.
//
// The last part of the proof, a good configuration rolling out fully on a group in
// one run, is TestLabCLIRolloutSixGoodRollsOutFully, on a fresh group of six.
func TestLabCLIRolloutSixHaltsInWaveTwoAndResumes(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	bad := labtest.BuildClosure(t, labtest.ClosureFailedUnit)
	nodes, roster, before := sixNodeGroup(t, "r6h-", good, bad)
	name := func(i int) string { return nodes[i-1].Name }
	canary, wave2ok, broken, wave3 := name(1), name(2), []string{name(3), name(4)}, []string{name(5), name(6)}

	dir := t.TempDir()
	closures := filepath.Join(labtest.RepoRoot(t), "lab", "closures", "default.nix")
	rn := roster["nodes"].(map[string]any)
	setBuild := func(node, attr string) {
		rn[node].(map[string]any)["build"] = map[string]any{"file": closures, "attribute": attr}
	}
	run := func(t *testing.T, output string) (string, string, int) {
		t.Helper()
		rosterFile := writeFileJSON(t, dir, "roster.json", roster)
		stdout, stderr, code := runCLI(t, bin, "deploy", "--output", output, "--roster", rosterFile)
		// The progress on stderr names each wave as it starts.
		for _, want := range []string{
			"rollout: wave 1 of 3: " + canary + "\n",
			"rollout: wave 2 of 3: " + strings.Join([]string{name(2), name(3), name(4)}, ", ") + "\n",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("progress lacks %q:\n%s", want, stderr)
			}
		}
		return stdout, stderr, code
	}
	deploy := func(t *testing.T) (jsonSummary, int, string) {
		t.Helper()
		stdout, stderr, code := run(t, "json")
		var out jsonSummary
		if err := json.Unmarshal([]byte(stdout), &out); err != nil || out.Rollout == nil {
			t.Fatalf("exit %d, output is not the JSON summary with a rollout (%v):\n%s\nstderr:\n%s", code, err, stdout, stderr)
		}
		t.Logf("exit %d; rollout %+v", code, *out.Rollout)
		wantSixNodeWaves(t, out.Rollout, nodes)
		return out, code, stderr
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
	failedOn := func(got jsonNode) bool {
		if got.OK || got.NotAttempted != "" || got.Verdict == nil || got.Verdict.OK {
			return false
		}
		named := false
		for _, u := range got.Verdict.Failed {
			named = named || u.Unit == "fedi-broken.service"
		}
		return named && strings.Contains(strings.Join(got.Verdict.Reasons, " "), "fedi-broken.service")
	}
	haltReason := "the rollout halted after wave 2 of 3: 2 of the 4 nodes deployed failed (" +
		strings.Join(broken, ", ") + "), past the failure budget of 1"

	// halted checks a run of the broken configuration: halted after wave 2, each
	// node's state named, wave 3 untouched.
	halted := func(t *testing.T, out jsonSummary, code int, resumed bool) {
		t.Helper()
		// First what is on wave 3's nodes, whatever the command says of them.
		untouched(t, wave3...)
		r := out.Rollout
		if code != exitFailed || !r.Halted || r.Complete || r.HaltedInWave != 2 || r.Attempted != 4 || r.Failed != 2 ||
			r.HaltReason != haltReason {
			t.Fatalf("exit %d rollout %+v: want exit %d, halted after wave 2 of 3 with 2 of 4 failed: %q", code, *r, exitFailed, haltReason)
		}
		for i, w := range r.Waves {
			var wantFailed, wantNot []string
			switch i {
			case 1:
				wantFailed = broken
			case 2:
				wantNot = wave3
			}
			if w.Attempted != (i < 2) || !reflect.DeepEqual(w.Failed, append([]string{}, wantFailed...)) ||
				!reflect.DeepEqual(w.NotAttempted, append([]string{}, wantNot...)) {
				t.Errorf("wave %d: %+v, want attempted %v, failed %v, not attempted %v", w.Number, w, i < 2, wantFailed, wantNot)
			}
		}
		for _, n := range []string{canary, wave2ok} {
			if got := node(out, n); !got.OK || got.NotAttempted != "" || got.Toplevel != good ||
				got.Resumed != resumed || readlink(t, n, "/run/current-system") != good {
				t.Errorf("%s: ok %v resumed %v toplevel %s, want ok on %s (resumed %v)", n, got.OK, got.Resumed, got.Toplevel, good, resumed)
			}
		}
		for _, n := range broken {
			if got := node(out, n); !failedOn(got) || got.Resumed || got.Toplevel != bad {
				t.Errorf("%s: %+v, want deployed (%s) and failed naming fedi-broken.service", n, got, bad)
			}
		}
		for _, n := range wave3 {
			if got := node(out, n); got.OK || got.NotAttempted != haltReason || got.Wave != 3 || got.Verdict != nil || len(got.Phases) > 0 {
				t.Errorf("%s: %+v, want not attempted in wave 3: %q", n, got, haltReason)
			}
		}
		sorted := func(s []string) []string { s = append([]string{}, s...); sort.Strings(s); return s }
		if !reflect.DeepEqual(sorted(out.OK), sorted([]string{canary, wave2ok})) ||
			!reflect.DeepEqual(sorted(out.Failed), sorted(broken)) || !reflect.DeepEqual(out.NotAttempted, wave3) {
			t.Errorf("ok %v failed %v not_attempted %v: want ok %v, failed %v, not attempted %v",
				out.OK, out.Failed, out.NotAttempted, []string{canary, wave2ok}, broken, wave3)
		}
	}

	t.Run("broken on 2 nodes of wave 2 halts after wave 2", func(t *testing.T) {
		for _, n := range broken {
			setBuild(n, labtest.ClosureFailedUnit)
		}
		out, code, stderr := deploy(t)
		halted(t, out, code, false)
		if strings.Contains(stderr, "rollout: wave 3 of 3") {
			t.Errorf("wave 3 was started:\n%s", stderr)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("the same broken configuration again halts at the same place; the table names each state", func(t *testing.T) {
		stdout, stderr, code := run(t, "table")
		if code != exitFailed {
			t.Errorf("exit %d, want %d:\n%s\nstderr:\n%s", code, exitFailed, stdout, stderr)
		}
		untouched(t, wave3...)
		if strings.Contains(stderr, "rollout: wave 3 of 3") {
			t.Errorf("wave 3 was started:\n%s", stderr)
		}
		rows := map[string][]string{}
		for _, line := range strings.Split(stdout, "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				rows[f[0]] = f
			}
		}
		row := func(n string) string { return strings.Join(rows[n], " ") }
		for _, n := range []string{canary, wave2ok} {
			if !strings.HasPrefix(row(n), n+" ok (resumed) ") {
				t.Errorf("table row of %s: %q, want ok (resumed)", n, row(n))
			}
		}
		for _, n := range broken {
			if !strings.HasPrefix(row(n), n+" FAILED ") || !strings.Contains(row(n), "fedi-broken.service") {
				t.Errorf("table row of %s: %q, want FAILED naming fedi-broken.service", n, row(n))
			}
		}
		for _, n := range wave3 {
			if want := n + " not attempted - - " + haltReason; row(n) != want {
				t.Errorf("table row of %s: %q, want %q", n, row(n), want)
			}
		}
		for _, want := range []string{
			"rollout: 3 waves, failure budget 1\n",
			fmt.Sprintf("  wave 1 (canary): %s: 0 failed\n", canary),
			fmt.Sprintf("  wave 2: %s, %s, %s: 2 failed (%s)\n", wave2ok, broken[0], broken[1], strings.Join(broken, ", ")),
			fmt.Sprintf("  wave 3: %s: not attempted\n", strings.Join(wave3, ", ")),
			"rollout HALTED: " + haltReason + "; fix the cause and run the same command again",
			"2 ok, 2 failed, 0 disabled by the submission, 2 not attempted\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("table lacks %q:\n%s", want, stdout)
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("fixed, the same command finishes the rollout", func(t *testing.T) {
		for _, n := range broken {
			setBuild(n, labtest.ClosureGood)
		}
		out, code, stderr := deploy(t)
		r := out.Rollout
		if code != exitOK || !r.Complete || r.Halted || r.HaltReason != "" || r.Failed != 0 || r.Attempted != 6 {
			t.Fatalf("exit %d rollout %+v: want exit 0, complete, 6 attempted, nothing failed", code, *r)
		}
		if want := "rollout: wave 3 of 3: " + strings.Join(wave3, ", ") + "\n"; !strings.Contains(stderr, want) {
			t.Errorf("progress lacks %q:\n%s", want, stderr)
		}
		for _, w := range r.Waves {
			if !w.Attempted || len(w.Failed) > 0 || len(w.NotAttempted) > 0 {
				t.Errorf("wave %d: %+v, want attempted, none failed", w.Number, w)
			}
		}
		for _, n := range nodes {
			got := node(out, n.Name)
			if running := readlink(t, n.Name, "/run/current-system"); !got.OK || got.NotAttempted != "" || got.Toplevel != good || running != good {
				t.Errorf("%s: ok %v, toplevel %s, runs %s, want ok on %s", n.Name, got.OK, got.Toplevel, running, good)
			}
			// The nodes the halted runs finished are judged again, not switched.
			wantResumed := n.Name == canary || n.Name == wave2ok
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

// The rest of issue 23's proof: on a fresh group of six lab nodes, a good configuration
// rolls out fully in one run of the real binary (canary 1, waves of 50%, budget 1):
// exit 0, every wave attempted in order, every node switched (none resumed) and
// running the good system with an ok verdict.
func TestLabCLIRolloutSixGoodRollsOutFully(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	nodes, roster, _ := sixNodeGroup(t, "r6g-", good)
	rosterFile := writeFileJSON(t, t.TempDir(), "roster.json", roster)
	stdout, stderr, code := runCLI(t, bin, "deploy", "--output", "json", "--roster", rosterFile)
	var out jsonSummary
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || out.Rollout == nil {
		t.Fatalf("exit %d, output is not the JSON summary with a rollout (%v):\n%s\nstderr:\n%s", code, err, stdout, stderr)
	}
	wantSixNodeWaves(t, out.Rollout, nodes)
	r := out.Rollout
	if code != exitOK || !r.Complete || r.Halted || r.Failed != 0 || r.Attempted != 6 || len(out.NotAttempted) > 0 {
		t.Fatalf("exit %d rollout %+v: want exit 0, complete, 6 attempted, nothing failed\nstderr:\n%s", code, *r, stderr)
	}
	// The waves start in order, each after the one before.
	last := -1
	for i, w := range r.Waves {
		if !w.Attempted || len(w.Failed) > 0 {
			t.Errorf("wave %d: %+v, want attempted, none failed", w.Number, w)
		}
		at := strings.Index(stderr, fmt.Sprintf("rollout: wave %d of 3: %s\n", i+1, strings.Join(w.Nodes, ", ")))
		if at <= last {
			t.Errorf("wave %d did not start after wave %d:\n%s", i+1, i, stderr)
		}
		last = at
	}
	for _, n := range nodes {
		var got *jsonNode
		for i := range out.Nodes {
			if out.Nodes[i].Node == n.Name {
				got = &out.Nodes[i]
			}
		}
		if got == nil {
			t.Fatalf("no node %s in the output", n.Name)
		}
		running := readlink(t, n.Name, "/run/current-system")
		if !got.OK || got.Resumed || switchSkipped(*got) || got.Toplevel != good || running != good {
			t.Errorf("%s: ok %v resumed %v toplevel %s runs %s, want switched to %s and ok", n.Name, got.OK, got.Resumed, got.Toplevel, running, good)
		}
	}
}
