package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
)

// rolloutFlags stage a deploy; each one given wins over the roster's "rollout".
type rolloutFlags struct {
	canary, waveSize, waves, failureBudget string
}

func (r *rolloutFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.canary, "canary", "", "first wave: a count of nodes (1) or comma-separated node names (roster: rollout.canary)")
	fs.StringVar(&r.waveSize, "wave-size", "", "nodes per wave after the canary: a count (2) or a percentage of the group (50%) (roster: rollout.wave_size)")
	fs.StringVar(&r.waves, "waves", "", "explicit waves after the canary: node names, comma-separated within a wave, waves separated by ';' (roster: rollout.waves)")
	fs.StringVar(&r.failureBudget, "failure-budget", "", "how many nodes may fail before the rollout halts: a count (1) or a percentage of the group (20%) (roster: rollout.failure_budget)")
}

// rollout is the roster's rollout with the flags given over it.
func (r rolloutFlags) rollout(fromRoster *fleet.Rollout) (*fleet.Rollout, error) {
	out := fleet.Rollout{}
	if fromRoster != nil {
		out = *fromRoster
	}
	if r.canary != "" {
		out.Canary = fleet.ParseNodeSelection(r.canary)
	}
	if r.waveSize != "" {
		a, err := fleet.ParseAmount(r.waveSize)
		if err != nil {
			return nil, fmt.Errorf("--wave-size: %v", err)
		}
		out.WaveSize, out.Waves = a, nil
	}
	if r.waves != "" {
		out.Waves = nil
		for _, wave := range strings.Split(r.waves, ";") {
			out.Waves = append(out.Waves, fleet.ParseNodeSelection(wave).Nodes)
		}
		if r.waveSize == "" {
			out.WaveSize = fleet.Amount{}
		}
	}
	if r.failureBudget != "" {
		a, err := fleet.ParseAmount(r.failureBudget)
		if err != nil {
			return nil, fmt.Errorf("--failure-budget: %v", err)
		}
		out.FailureBudget = a
	}
	return &out, nil
}

// writeRolloutTable sums a staged rollout up under the table: each wave, and where it
// halted. Nothing for a run of one wave without a budget.
func writeRolloutTable(w io.Writer, res *fleet.RolloutResult, staged bool) {
	if res == nil || !staged {
		return
	}
	budget := "no failure budget"
	if res.Budget != fleet.NoBudget {
		budget = fmt.Sprintf("failure budget %d", res.Budget)
	}
	fmt.Fprintf(w, "\nrollout: %d waves, %s\n", len(res.Waves), budget)
	for _, wave := range res.Waves {
		name := fmt.Sprintf("wave %d", wave.Number)
		if wave.Canary {
			name += " (canary)"
		}
		state := "not attempted"
		if wave.Attempted {
			state = fmt.Sprintf("%d failed", len(wave.Failed))
			if len(wave.Failed) > 0 {
				state += " (" + strings.Join(wave.Failed, ", ") + ")"
			}
			if len(wave.Interrupted) > 0 {
				state += fmt.Sprintf(", %d interrupted (%s)", len(wave.Interrupted), strings.Join(wave.Interrupted, ", "))
			}
		}
		fmt.Fprintf(w, "  %s: %s: %s\n", name, strings.Join(wave.Nodes, ", "), state)
	}
	switch {
	case res.Halted:
		fmt.Fprintf(w, "rollout HALTED: %s; fix the cause and run the same command again: it resumes (nodes that already run their system with an ok verdict are judged, not switched)\n", res.HaltReason())
	case res.Interrupted:
		fmt.Fprintln(w, "rollout interrupted: run the same command again to finish it")
	default:
		fmt.Fprintf(w, "rollout complete: %d of %d nodes failed\n", res.Failed, res.Attempted)
	}
}

// jsonRollout is the rollout in --output json: how the waves went and where it
// halted. Field names are stable (docs/guides/ssh.md#machine-readable-results).
type jsonRollout struct {
	Staged bool `json:"staged"`
	// Complete: every wave ran (it may still have failed nodes within the budget).
	Complete     bool   `json:"complete"`
	Halted       bool   `json:"halted"`
	HaltedInWave int    `json:"halted_in_wave,omitempty"`
	HaltReason   string `json:"halt_reason,omitempty"`
	Interrupted  bool   `json:"interrupted"`
	// FailureBudget is null without a budget.
	FailureBudget *int       `json:"failure_budget"`
	Nodes         int        `json:"nodes"`
	Attempted     int        `json:"attempted"`
	Failed        int        `json:"failed"`
	Waves         []jsonWave `json:"waves"`
}

type jsonWave struct {
	Number       int      `json:"number"`
	Canary       bool     `json:"canary"`
	Nodes        []string `json:"nodes"`
	Attempted    bool     `json:"attempted"`
	Failed       []string `json:"failed"`
	NotAttempted []string `json:"not_attempted"`
	// Interrupted are the nodes whose run an interrupt cut short: not failed.
	Interrupted []string `json:"interrupted"`
}

func rolloutJSON(res *fleet.RolloutResult, staged bool) *jsonRollout {
	if res == nil {
		return nil
	}
	out := &jsonRollout{Staged: staged, Complete: res.Complete(), Halted: res.Halted, HaltedInWave: res.HaltedInWave,
		HaltReason: res.HaltReason(), Interrupted: res.Interrupted, Nodes: res.Nodes, Attempted: res.Attempted,
		Failed: res.Failed, Waves: []jsonWave{}}
	if res.Budget != fleet.NoBudget {
		b := res.Budget
		out.FailureBudget = &b
	}
	for _, w := range res.Waves {
		out.Waves = append(out.Waves, jsonWave{Number: w.Number, Canary: w.Canary, Nodes: w.Nodes, Attempted: w.Attempted,
			Failed: append([]string{}, w.Failed...), NotAttempted: append([]string{}, w.NotAttempted...),
			Interrupted: append([]string{}, w.Interrupted...)})
	}
	return out
}
