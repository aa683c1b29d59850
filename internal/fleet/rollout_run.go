package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// WaveResult is how one wave of a rollout went.
type WaveResult struct {
	Number int // from 1
	Canary bool
	Nodes  []string
	// Attempted: the wave started (at least one of its nodes was deployed).
	Attempted bool
	// Failed are the wave's nodes that count against the failure budget (their
	// verdict failed, was ok only by being lenient, or they could not be deployed:
	// Outcome.CountsAgainstBudget).
	Failed []string
	// Interrupted are the wave's nodes whose run the interrupt cut short (no verdict):
	// not failed, not counted against the budget.
	Interrupted []string
	// NotBack are those of Failed that did not come back from their reboot within
	// node_wait (Outcome.NotBack): they count against the budget like any failure.
	NotBack []string
	// NotAttempted are the wave's nodes left alone because the rollout halted.
	NotAttempted []string
}

// RolloutResult is how a rollout went: its waves, its budget, and where it halted.
type RolloutResult struct {
	Waves []WaveResult
	// Budget is how many nodes may fail (NoBudget: no budget).
	Budget int
	// Nodes is the group's size; Attempted how many were deployed; Failed how many of
	// those failed.
	Nodes, Attempted, Failed int
	// Halted: past the budget, the rollout stopped; HaltedInWave is the wave it stopped
	// in (every later wave was not touched).
	Halted       bool
	HaltedInWave int
	// Interrupted: the run's context ended before every wave ran.
	Interrupted bool
}

// Complete reports whether every wave ran to its end.
func (r *RolloutResult) Complete() bool { return !r.Halted && !r.Interrupted }

// HaltReason says why nodes were not attempted, with the wave and the budget:
// "the rollout halted after wave 2 of 3: 2 of the 4 nodes deployed failed (web02,
// web03), past the failure budget of 1". Empty when the rollout did not halt.
func (r *RolloutResult) HaltReason() string {
	if !r.Halted {
		return ""
	}
	var failed, notBack []string
	for _, w := range r.Waves {
		failed = append(failed, w.Failed...)
		notBack = append(notBack, w.NotBack...)
	}
	msg := HaltMessage(r.HaltedInWave, len(r.Waves), failed, r.Attempted, r.Budget)
	if len(notBack) > 0 {
		msg += fmt.Sprintf("; %s did not come back after a reboot", strings.Join(notBack, ", "))
	}
	return msg
}

// HaltMessage is why a rollout halted, as the command and the provider's rollout gate
// both say it: "the rollout halted after wave 2 of 3: 2 of the 4 nodes deployed failed
// (web02, web03), past the failure budget of 1".
func HaltMessage(wave, waves int, failed []string, attempted, budget int) string {
	return fmt.Sprintf("the rollout halted after wave %d of %d: %d of the %d nodes deployed failed (%s), past the failure budget of %d",
		wave, waves, len(failed), attempted, strings.Join(failed, ", "), budget)
}

// nodeDeployer deploys (or judges) one node and returns its outcome. It is the group's
// per-node run; the rollout only orders and counts.
type nodeDeployer func(ctx context.Context, node string) Outcome

// runRollout runs plan's waves in order, at most parallel nodes at once. A wave starts
// only when every verdict of the one before is in. A failing node (FailsBudget) counts
// against the budget and does not stop the others while the budget holds; past it, no
// further node is started (the rest of the wave and every later wave are not attempted:
// deploy is never called for them). An interrupt (ctx done) starts no further node
// either; a node whose run it cut short is interrupted, not failed. Outcomes are in plan
// order.
//
// started, if not nil, is told when each wave starts (before its first node).
func runRollout(ctx context.Context, plan RolloutPlan, parallel int, deploy nodeDeployer, started func(WaveResult, int)) ([]Outcome, *RolloutResult) {
	res := &RolloutResult{Budget: plan.Budget, Nodes: plan.Nodes}
	var (
		mu       sync.Mutex
		outcomes = map[string]*Outcome{}
	)
	past := func() bool { return PastBudget(res.Failed, plan.Budget) }
	slots := make(chan struct{}, max(parallel, 1))
	for i, nodes := range plan.Waves {
		wave := WaveResult{Number: i + 1, Canary: plan.Canary && i == 0, Nodes: nodes}
		mu.Lock()
		stop := past() || ctx.Err() != nil
		mu.Unlock()
		if !stop {
			wave.Attempted = true
			if started != nil {
				started(wave, len(plan.Waves))
			}
			var wg sync.WaitGroup
			// Nodes start in the wave's order as slots free up, so a budget spent
			// early in a wide wave keeps its later nodes untouched.
			for _, node := range nodes {
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					continue // not attempted: the run was interrupted before its turn
				}
				mu.Lock()
				halted := past()
				mu.Unlock()
				if halted || ctx.Err() != nil {
					// Past the budget, or interrupted while it waited for a slot (a free
					// slot and the interrupt may come together): the node is not handed
					// to the deployer with an ended context.
					<-slots
					continue // not attempted: marked below, once the reason is final
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					o := deploy(ctx, node)
					o.Wave = wave.Number
					o.Interrupted = o.Interrupted || interruptedOutcome(ctx, o)
					mu.Lock()
					defer mu.Unlock()
					res.Attempted++
					if o.CountsAgainstBudget() {
						res.Failed++
					}
					outcomes[node] = &o
				}()
			}
			wg.Wait()
		}
		for _, node := range nodes {
			o := outcomes[node]
			switch {
			case o == nil:
				wave.NotAttempted = append(wave.NotAttempted, node)
			case o.Interrupted:
				wave.Interrupted = append(wave.Interrupted, node)
			case o.CountsAgainstBudget():
				wave.Failed = append(wave.Failed, node)
				if o.NotBack() {
					wave.NotBack = append(wave.NotBack, node)
				}
			}
		}
		if past() && !res.Halted {
			res.Halted, res.HaltedInWave = true, wave.Number
		}
		res.Waves = append(res.Waves, wave)
	}
	res.Interrupted = ctx.Err() != nil && !res.Halted
	var out []Outcome
	for _, w := range res.Waves {
		for _, node := range w.Nodes {
			if o := outcomes[node]; o != nil {
				out = append(out, *o)
				continue
			}
			o := Outcome{Node: node, Wave: w.Number, NotAttempted: "the run was interrupted before the node's turn"}
			if res.Halted {
				o.NotAttempted = res.HaltReason()
			}
			out = append(out, o)
		}
	}
	return out, res
}
