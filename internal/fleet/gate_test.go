package fleet

import (
	"strings"
	"testing"
)

func gateVerdicts(failed map[string][]string, ok ...string) map[string]GateVerdict {
	v := map[string]GateVerdict{}
	for _, n := range ok {
		v[n] = GateVerdict{OK: true}
	}
	for n, reasons := range failed {
		v[n] = GateVerdict{Reasons: reasons}
	}
	return v
}

func mustAmount(t *testing.T, s string) Amount {
	t.Helper()
	a, err := ParseAmount(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestWaveGateHaltsPastTheBudgetNamingEachFailure(t *testing.T) {
	g := WaveGate{Wave: 2, Waves: 3, GroupSize: 6, FailureBudget: mustAmount(t, "1"),
		Verdicts: gateVerdicts(map[string][]string{"web03": {"unit nginx.service failed"}, "web02": {"unreachable"}}, "web01", "web04")}
	halt, failures, err := g.Judge()
	if err != nil {
		t.Fatal(err)
	}
	want := "the rollout halted after wave 2 of 3: 2 of the 4 nodes deployed failed (web02, web03), past the failure budget of 1"
	if halt != want {
		t.Errorf("halt = %q, want %q", halt, want)
	}
	if got := strings.Join(failures, "|"); got != "web02: unreachable|web03: unit nginx.service failed" {
		t.Errorf("failures = %q", got)
	}
}

func TestWaveGatePassesWithinTheBudget(t *testing.T) {
	for _, tc := range []struct {
		budget string
		group  int
		failed int
		halts  bool
	}{
		{"0", 4, 0, false},
		{"0", 4, 1, true},
		{"1", 4, 1, false},
		{"1", 4, 2, true},
		{"25%", 4, 1, false}, // 25% of 4 is 1
		{"25%", 4, 2, true},
		{"20%", 4, 1, true},   // 20% of 4 is 0.8, rounded down: 0
		{"", 4, 4, false},     // no budget: never halts
		{"100%", 4, 4, false}, // every node may fail
	} {
		var budget Amount
		if tc.budget != "" {
			budget = mustAmount(t, tc.budget)
		}
		failed := map[string][]string{}
		for i := range tc.failed {
			failed[string(rune('a'+i))] = nil
		}
		halt, _, err := WaveGate{Wave: 1, Waves: 2, GroupSize: tc.group, FailureBudget: budget, Verdicts: gateVerdicts(failed)}.Judge()
		if err != nil {
			t.Fatal(err)
		}
		if (halt != "") != tc.halts {
			t.Errorf("budget %q, %d of %d failed: halt = %q, want halting %v", tc.budget, tc.failed, tc.group, halt, tc.halts)
		}
	}
}

// The gate and the command's rollout agree on a budget: one Amount.Budget for both.
func TestWaveGateBudgetIsTheRolloutPlansBudget(t *testing.T) {
	nodes := []string{"a", "b", "c", "d", "e", "f", "g"}
	for _, b := range []string{"0", "2", "30%", "50%", "100%"} {
		plan, problems := (&Rollout{FailureBudget: mustAmount(t, b)}).Plan(nodes, nodes)
		if len(problems) > 0 {
			t.Fatal(problems)
		}
		got, err := mustAmount(t, b).Budget(len(nodes))
		if err != nil || got != plan.Budget {
			t.Errorf("budget %s: gate %d (%v), plan %d", b, got, err, plan.Budget)
		}
	}
}

func TestWaveGateRefusesBadInput(t *testing.T) {
	for _, g := range []WaveGate{
		{Wave: 1, Waves: 2, GroupSize: 3, FailureBudget: mustAmount(t, "-1")},
		{Wave: 1, Waves: 2, GroupSize: 3, FailureBudget: mustAmount(t, "120%")},
		{Wave: 0, Waves: 2, GroupSize: 3},
		{Wave: 3, Waves: 2, GroupSize: 3},
	} {
		if _, _, err := g.Judge(); err == nil {
			t.Errorf("%+v: no error", g)
		}
	}
}
