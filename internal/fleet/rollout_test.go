package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/noderun"
)

func names(n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, fmt.Sprintf("n%d", i))
	}
	return out
}

func rolloutJSON(t *testing.T, s string) *Rollout {
	t.Helper()
	var r Rollout
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return &r
}

func TestRolloutPlanLaysOutWaves(t *testing.T) {
	for _, tc := range []struct {
		rollout string
		nodes   int
		waves   [][]string
		budget  int
	}{
		// Defaults keep today's run: one wave of every node, no budget.
		{`{}`, 4, [][]string{{"n1", "n2", "n3", "n4"}}, NoBudget},
		{`{"canary": 1, "wave_size": 2, "failure_budget": 1}`, 5, [][]string{{"n1"}, {"n2", "n3"}, {"n4", "n5"}}, 1},
		// The example: 6 nodes, a canary of 1, waves of 50% (3 nodes), budget 1.
		{`{"canary": 1, "wave_size": "50%", "failure_budget": 1}`, 6, [][]string{{"n1"}, {"n2", "n3", "n4"}, {"n5", "n6"}}, 1},
		// A percentage of a wave is rounded up, of a budget down.
		{`{"wave_size": "30%", "failure_budget": "30%"}`, 5, [][]string{{"n1", "n2"}, {"n3", "n4"}, {"n5"}}, 1},
		{`{"canary": ["n3"], "failure_budget": 0}`, 4, [][]string{{"n3"}, {"n1", "n2", "n4"}}, 0},
		{`{"canary": ["n4"], "waves": [["n2", "n1"], ["n3"]]}`, 4, [][]string{{"n4"}, {"n2", "n1"}, {"n3"}}, NoBudget},
		// A canary larger than the group is the whole group.
		{`{"canary": 9}`, 2, [][]string{{"n1", "n2"}}, NoBudget},
	} {
		plan, problems := rolloutJSON(t, tc.rollout).Plan(names(tc.nodes), names(tc.nodes))
		if len(problems) > 0 {
			t.Errorf("%s: problems %v", tc.rollout, problems)
			continue
		}
		if !reflect.DeepEqual(plan.Waves, tc.waves) || plan.Budget != tc.budget {
			t.Errorf("%s on %d nodes: waves %v budget %d, want %v budget %d", tc.rollout, tc.nodes, plan.Waves, plan.Budget, tc.waves, tc.budget)
		}
	}
}

// A node the submission disables is in no wave (it is not touched), even when an
// explicit wave names it.
func TestRolloutPlanLeavesDisabledNodesOut(t *testing.T) {
	plan, problems := rolloutJSON(t, `{"canary": ["n1"], "waves": [["n2", "n3"]]}`).Plan([]string{"n1", "n3"}, names(3))
	if len(problems) > 0 || !reflect.DeepEqual(plan.Waves, [][]string{{"n1"}, {"n3"}}) {
		t.Fatalf("waves %v problems %v, want [[n1] [n3]]", plan.Waves, problems)
	}
}

func TestRolloutPlanRefusesBadInput(t *testing.T) {
	for _, tc := range []struct{ rollout, want string }{
		{`{"canary": ["web9"]}`, `rollout.canary: node "web9": the roster has no such node`},
		{`{"canary": ["n1"], "waves": [["n1", "n2"], ["n3", "n4"]]}`, `rollout.waves[0]: node "n1" is already in rollout.canary`},
		{`{"waves": [["n1", "n2"], ["n3"]]}`, `rollout.waves: node "n4" is in no wave`},
		{`{"waves": [["n1"]], "wave_size": 2}`, `rollout: waves and wave_size: give one`},
		{`{"wave_size": 0}`, `rollout.wave_size: 0: want a count of 1 or more`},
		{`{"wave_size": "150%"}`, `rollout.wave_size: 150%: want`},
		{`{"failure_budget": -1}`, `rollout.failure_budget: -1: want a count of 0 or more`},
		{`{"canary": -2}`, `rollout.canary: -2: want a count of 0 or more`},
	} {
		_, problems := rolloutJSON(t, tc.rollout).Plan(names(4), names(4))
		if !strings.Contains(strings.Join(problems, "\n"), tc.want) {
			t.Errorf("%s: problems %q, want one saying %q", tc.rollout, problems, tc.want)
		}
	}
	var r Rollout
	if err := json.Unmarshal([]byte(`{"wave_size": "half"}`), &r); err == nil || !strings.Contains(err.Error(), `"half": want a count (2) or a percentage`) {
		t.Errorf("wave_size \"half\": %v", err)
	}
}

// fakeFleet stands in for the nodes: the rollout engine's whole job is the order in
// which it calls the per-node deployer and what it counts, which a fake shows exactly
// and on demand (a failing node, an unreachable one, a slow one) and real nodes do not.
// The per-node deploy itself is proven on real nodes by the command's lab tests.
type fakeFleet struct {
	mu      sync.Mutex
	fail    map[string]string // node → "failed", "lenient", "unreachable" or "not-back"
	events  []string          // "start n1", "end n1", in order
	running int
	peak    int
}

func (f *fakeFleet) deploy(ctx context.Context, node string) Outcome {
	f.mu.Lock()
	f.events = append(f.events, "start "+node)
	f.running++
	f.peak = max(f.peak, f.running)
	f.mu.Unlock()
	v := &judge.Verdict{OK: true}
	switch f.fail[node] {
	case "failed":
		v = &judge.Verdict{Reasons: []string{"fedi-broken.service failed"}}
	case "lenient":
		// strict = false: ok, with the failure it let pass as its reason.
		v = &judge.Verdict{OK: true, Reasons: []string{"fedi-broken.service failed"}}
	case "unreachable":
		v = &judge.Verdict{Unreachable: true, Reasons: []string{"unreachable"}}
	}
	f.mu.Lock()
	f.events = append(f.events, "end "+node)
	f.running--
	f.mu.Unlock()
	if f.fail[node] == "not-back" {
		// What the engine returns for a node rebooted that never answered again
		// (deploybody's TestActivationRebootNeverComesBack runs it on its fake node):
		// no verdict, the switch phase's error.
		return Outcome{Node: node, Outcome: noderun.Outcome{Result: &deploybody.Result{Node: node, Reboot: &deploybody.Reboot{Why: "kernel changed"}}, Err: &deploybody.DeployError{Node: node, Phase: deploybody.PhaseSwitch, Err: deploybody.NotBackError(150*time.Second, "connection refused")}}}
	}
	return Outcome{Node: node, Outcome: noderun.Outcome{Result: &deploybody.Result{Node: node, Verdict: v}}}
}

func (f *fakeFleet) started() []string {
	var out []string
	for _, e := range f.events {
		if n, ok := strings.CutPrefix(e, "start "); ok {
			out = append(out, n)
		}
	}
	return out
}

func planOf(t *testing.T, rollout string, nodes int) RolloutPlan {
	t.Helper()
	plan, problems := rolloutJSON(t, rollout).Plan(names(nodes), names(nodes))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	return plan
}

func TestRolloutStartsAWaveOnlyWhenThePreviousIsJudged(t *testing.T) {
	f := &fakeFleet{}
	plan := planOf(t, `{"canary": 1, "wave_size": 2}`, 5)
	var started []int
	_, res := runRollout(context.Background(), plan, 10, f.deploy, func(w WaveResult, waves int) {
		if waves != 3 || len(w.Nodes) == 0 {
			t.Errorf("wave %d started as one of %d, with nodes %v", w.Number, waves, w.Nodes)
		}
		started = append(started, w.Number)
	})
	if !reflect.DeepEqual(started, []int{1, 2, 3}) {
		t.Errorf("waves started %v, want 1, 2, 3", started)
	}
	waveOf := map[string]int{}
	for i, w := range plan.Waves {
		for _, n := range w {
			waveOf[n] = i
		}
	}
	// Every end of wave k comes before any start of wave k+1.
	lastEnd := map[int]int{}
	firstStart := map[int]int{}
	for i, e := range f.events {
		kind, node, _ := strings.Cut(e, " ")
		w := waveOf[node]
		if kind == "end" {
			lastEnd[w] = i
		} else if _, seen := firstStart[w]; !seen {
			firstStart[w] = i
		}
	}
	for w := 1; w < len(plan.Waves); w++ {
		if firstStart[w] < lastEnd[w-1] {
			t.Errorf("wave %d started (event %d) before wave %d's last verdict (event %d): %v", w+1, firstStart[w], w, lastEnd[w-1], f.events)
		}
	}
	if !res.Complete() || res.Attempted != 5 || len(res.Waves) != 3 || !res.Waves[0].Canary {
		t.Errorf("result %+v, want 3 waves (a canary first), 5 nodes attempted, complete", res)
	}
}

// Past the budget the rollout halts: the later waves' nodes are never deployed, and
// each says why, with the wave and the budget.
func TestRolloutHaltsPastTheBudget(t *testing.T) {
	f := &fakeFleet{fail: map[string]string{"n2": "failed", "n3": "unreachable"}}
	plan := planOf(t, `{"canary": 1, "wave_size": 2, "failure_budget": 1}`, 6)
	outcomes, res := runRollout(context.Background(), plan, 10, f.deploy, nil)
	if got := f.started(); slices.Contains(got, "n4") || slices.Contains(got, "n5") || slices.Contains(got, "n6") || len(got) != 3 {
		t.Fatalf("deployed %v, want only n1, n2, n3 (the canary and wave 2)", got)
	}
	if !res.Halted || res.HaltedInWave != 2 || res.Failed != 2 || res.Attempted != 3 {
		t.Fatalf("result %+v, want halted in wave 2 with 2 of 3 failed", res)
	}
	want := "the rollout halted after wave 2 of 4: 2 of the 3 nodes deployed failed (n2, n3), past the failure budget of 1"
	for _, o := range outcomes {
		switch o.Node {
		case "n1":
			if !o.OK() || o.Wave != 1 {
				t.Errorf("n1: ok %v wave %d, want ok in wave 1", o.OK(), o.Wave)
			}
		case "n2", "n3":
			if o.OK() || o.NotAttempted != "" {
				t.Errorf("%s: ok %v not attempted %q, want failed", o.Node, o.OK(), o.NotAttempted)
			}
		default:
			if o.OK() || o.NotAttempted != want || o.Result != nil {
				t.Errorf("%s: ok %v not attempted %q result %v, want not attempted: %s", o.Node, o.OK(), o.NotAttempted, o.Result, want)
			}
		}
	}
	if w := res.Waves[2]; w.Attempted || !reflect.DeepEqual(w.NotAttempted, []string{"n4", "n5"}) {
		t.Errorf("wave 3: %+v, want not attempted n4, n5", w)
	}
}

// An unreachable node counts against the budget but does not stop the others while
// the budget holds (deploy-rs #221).
func TestRolloutGoesOnWithinTheBudget(t *testing.T) {
	f := &fakeFleet{fail: map[string]string{"n2": "unreachable"}}
	plan := planOf(t, `{"canary": 1, "wave_size": 2, "failure_budget": 1}`, 5)
	outcomes, res := runRollout(context.Background(), plan, 10, f.deploy, nil)
	if len(f.started()) != 5 || res.Halted || res.Failed != 1 || !res.Complete() {
		t.Fatalf("deployed %v, result %+v: want all 5 deployed, 1 failed, not halted", f.started(), res)
	}
	for _, o := range outcomes {
		if o.NotAttempted != "" {
			t.Errorf("%s not attempted: %s", o.Node, o.NotAttempted)
		}
	}
}

// Without a budget (the default) a failing node never stops the others, as before.
func TestRolloutWithoutBudgetDeploysEveryNode(t *testing.T) {
	f := &fakeFleet{fail: map[string]string{"n1": "failed", "n2": "failed"}}
	_, res := runRollout(context.Background(), planOf(t, `{"canary": 1}`, 4), 10, f.deploy, nil)
	if len(f.started()) != 4 || res.Halted || res.Failed != 2 {
		t.Fatalf("deployed %v, result %+v: want all 4 deployed, 2 failed, not halted", f.started(), res)
	}
}

// A failing canary with budget 0 halts before any other node is touched.
func TestRolloutFailingCanaryHaltsEverything(t *testing.T) {
	f := &fakeFleet{fail: map[string]string{"n1": "failed"}}
	outcomes, res := runRollout(context.Background(), planOf(t, `{"canary": 1, "wave_size": 2, "failure_budget": 0}`, 5), 10, f.deploy, nil)
	if !reflect.DeepEqual(f.started(), []string{"n1"}) || !res.Halted || res.HaltedInWave != 1 {
		t.Fatalf("deployed %v, result %+v: want the canary only, halted after wave 1", f.started(), res)
	}
	if o := outcomes[1]; !strings.HasPrefix(o.NotAttempted, "the rollout halted after wave 1 of 3: 1 of the 1 nodes deployed failed (n1), past the failure budget of 0") {
		t.Errorf("%s: %q", o.Node, o.NotAttempted)
	}
}

// A node whose reboot never came back counts against the budget: with budget 0 the
// rollout halts after its wave, the later wave is not touched, and the wave and the
// halt name it as not back.
func TestRolloutCountsNodeNotBackFromReboot(t *testing.T) {
	f := &fakeFleet{fail: map[string]string{"n2": "not-back"}}
	outcomes, res := runRollout(context.Background(), planOf(t, `{"canary": 1, "wave_size": 2, "failure_budget": 0}`, 5), 10, f.deploy, nil)
	if started := f.started(); !reflect.DeepEqual(slices.Sorted(slices.Values(started)), []string{"n1", "n2", "n3"}) || !res.Halted || res.HaltedInWave != 2 || res.Failed != 1 {
		t.Fatalf("deployed %v, result %+v: want n1-n3 deployed, halted after wave 2 with 1 failed", started, res)
	}
	if w := res.Waves[1]; !reflect.DeepEqual(w.Failed, []string{"n2"}) || !reflect.DeepEqual(w.NotBack, []string{"n2"}) {
		t.Errorf("wave 2: failed %v, not back %v, want n2 in both", w.Failed, w.NotBack)
	}
	if o := outcomes[1]; o.OK() || !o.NotBack() || !strings.Contains(o.Err.Error(), "unreachable after a reboot: the node did not come back within node_wait (2m30s)") {
		t.Errorf("n2: ok %v, not back %v, err %v", o.OK(), o.NotBack(), o.Err)
	}
	want := "the rollout halted after wave 2 of 3: 1 of the 3 nodes deployed failed (n2), past the failure budget of 0; n2 did not come back after a reboot"
	for _, o := range outcomes[3:] {
		if o.NotAttempted != want {
			t.Errorf("%s: %q, want %q", o.Node, o.NotAttempted, want)
		}
	}
}

// Within a wave wider than the parallelism, nodes still waiting for a slot once the
// budget is spent are not started either.
func TestRolloutStopsStartingNodesOfTheWavePastTheBudget(t *testing.T) {
	f := &fakeFleet{fail: map[string]string{"n1": "failed", "n2": "failed"}}
	_, res := runRollout(context.Background(), planOf(t, `{"failure_budget": 1}`, 4), 1, f.deploy, nil)
	if f.peak != 1 {
		t.Errorf("%d nodes ran at once, want 1 (parallel 1)", f.peak)
	}
	if res.Attempted != 2 || !res.Halted || len(res.Waves[0].NotAttempted) != 2 {
		t.Fatalf("deployed %v, result %+v: want n1, n2 deployed and the other 2 not attempted", f.started(), res)
	}
}

// A run interrupted between waves leaves the later waves alone, and says so.
func TestRolloutInterruptedLeavesLaterWavesAlone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeFleet{}
	deploy := func(ctx context.Context, node string) Outcome {
		defer cancel() // the interrupt arrives while the canary runs
		return f.deploy(ctx, node)
	}
	outcomes, res := runRollout(ctx, planOf(t, `{"canary": 1}`, 3), 10, deploy, nil)
	if !reflect.DeepEqual(f.started(), []string{"n1"}) || !res.Interrupted || res.Complete() {
		t.Fatalf("deployed %v, result %+v: want the canary only, interrupted", f.started(), res)
	}
	if !strings.Contains(outcomes[2].NotAttempted, "interrupted") {
		t.Errorf("n3: %q, want not attempted because the run was interrupted", outcomes[2].NotAttempted)
	}
}

// Issue 39, item 9: a Ctrl-C in the middle of a wave. The node whose run it cut short
// is interrupted, not failed; the node that waited for a slot is never handed to the
// deployer with an ended context; nothing counts against the budget, and the rollout
// says it was interrupted, not halted. On the current main both counted as failed
// nodes and the rollout "halted" past a budget of 0.
func TestRolloutInterruptIsNotAFailure(t *testing.T) {
	for round := 0; round < 20; round++ { // the slot and the interrupt race: try it often
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var handed []string
		deploy := func(ctx context.Context, node string) Outcome {
			mu.Lock()
			handed = append(handed, node)
			mu.Unlock()
			if ctx.Err() != nil {
				return Outcome{Node: node, Outcome: noderun.Outcome{Err: fmt.Errorf("handed an ended context: %w", ctx.Err())}}
			}
			cancel() // the operator's Ctrl-C, while this node's run is under way
			return Outcome{Node: node, Outcome: noderun.Outcome{Result: &deploybody.Result{Node: node}, Err: &deploybody.DeployError{Node: node, Phase: deploybody.PhaseSettle, Err: context.Canceled}}}
		}
		outcomes, res := runRollout(ctx, planOf(t, `{"failure_budget": 0}`, 3), 1, deploy, nil)
		cancel()
		if len(handed) != 1 || handed[0] != "n1" {
			t.Fatalf("round %d: handed %v to the deployer, want n1 only", round, handed)
		}
		w := res.Waves[0]
		if res.Halted || !res.Interrupted || res.Failed != 0 || len(w.Failed) != 0 || !reflect.DeepEqual(w.Interrupted, []string{"n1"}) {
			t.Fatalf("round %d: %+v, wave %+v: want n1 interrupted, nothing failed, no halt", round, res, w)
		}
		if !outcomes[0].Interrupted || outcomes[0].CountsAgainstBudget() || outcomes[1].NotAttempted == "" || outcomes[2].NotAttempted == "" {
			t.Fatalf("round %d: outcomes %+v", round, outcomes)
		}
	}
}

// Issue 39, item 9: one rule for a lenient verdict, in both front ends: ok with reasons
// counts against the failure budget (FailsBudget), here and in the provider's gate
// (which the group modules feed). On the current main the command counted it as ok.
func TestLenientVerdictCountsAgainstTheBudget(t *testing.T) {
	f := &fakeFleet{fail: map[string]string{"n1": "lenient"}}
	outcomes, res := runRollout(context.Background(), planOf(t, `{"canary": 1, "failure_budget": 0}`, 3), 10, f.deploy, nil)
	if !res.Halted || res.Failed != 1 || !reflect.DeepEqual(res.Waves[0].Failed, []string{"n1"}) || !reflect.DeepEqual(f.started(), []string{"n1"}) {
		t.Fatalf("deployed %v, result %+v: want the lenient canary counted and the rollout halted", f.started(), res)
	}
	if !outcomes[0].OK() {
		t.Fatal("the lenient node's own result is not ok any more: only the budget counts it")
	}
	g := WaveGate{Wave: 1, Waves: 2, GroupSize: 3, FailureBudget: mustAmount(t, "0"),
		Verdicts: map[string]GateVerdict{"n1": {OK: true, Reasons: []string{"fedi-broken.service failed"}}}}
	if halt, failures, err := g.Judge(); err != nil || halt == "" || len(failures) != 1 || !strings.Contains(failures[0], "fedi-broken.service failed") {
		t.Fatalf("gate on a lenient verdict: halt %q, failures %v, err %v", halt, failures, err)
	}
}
