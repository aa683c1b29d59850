package fleet

import (
	"fmt"
	"sort"
	"strings"
)

// WaveGate is the check a rollout makes between two waves, as Terraform runs it (the
// provider's fediversity_rollout_gate): Terraform orders the waves, the gate only counts.
// It is the same arithmetic as runRollout's: Amount.Budget, FailsBudget, PastBudget,
// HaltMessage.
type WaveGate struct {
	// Wave is the wave just finished (from 1); Waves how many the rollout has.
	Wave, Waves int
	// GroupSize is the number of nodes in the group, the base of a percentage budget.
	GroupSize int
	// FailureBudget is how many nodes may fail (zero Amount: no budget, never halts).
	FailureBudget Amount
	// Verdicts are those of every node deployed so far (this wave and the ones before).
	Verdicts map[string]GateVerdict
}

// GateVerdict is one node's verdict as the gate reads it.
type GateVerdict struct {
	OK      bool
	Reasons []string
}

// Judge is the gate's decision: halt is empty while the failures are within the
// budget; past it, halt is the halt message and failures names each failed node and
// why ("web02: unit nginx.service failed"). err is bad input (the field, what to do).
func (g WaveGate) Judge() (halt string, failures []string, err error) {
	budget, err := g.FailureBudget.Budget(g.GroupSize)
	if err != nil {
		return "", nil, fmt.Errorf("failure_budget: %w", err)
	}
	if g.Wave < 1 || (g.Waves > 0 && g.Wave > g.Waves) {
		return "", nil, fmt.Errorf("wave: %d: want a wave from 1 to %d (waves)", g.Wave, g.Waves)
	}
	var failed []string
	for node, v := range g.Verdicts {
		if FailsBudget(v.OK, v.Reasons) {
			failed = append(failed, node)
		}
	}
	sort.Strings(failed)
	if !PastBudget(len(failed), budget) {
		return "", nil, nil
	}
	for _, node := range failed {
		why := "failed"
		if rs := g.Verdicts[node].Reasons; len(rs) > 0 {
			why = strings.Join(rs, "; ")
		}
		failures = append(failures, node+": "+why)
	}
	return HaltMessage(g.Wave, max(g.Waves, g.Wave), failed, len(g.Verdicts), budget), failures, nil
}
