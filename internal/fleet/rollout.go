package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Rollout stages a group's deploy: a canary, then waves, under a failure budget
// (docs/rollouts.md#staged-rollouts). A wave starts only when every verdict of the one
// before is in; past the budget the rollout halts and the nodes of later waves are not
// touched at all. The zero Rollout is today's run: one wave of every node, no budget.
//
// In a roster file it is the "rollout" object:
//
//	"rollout": {"canary": 1, "wave_size": "50%", "failure_budget": 1}
//	"rollout": {"canary": ["web01"], "waves": [["web02", "web03"], ["web04"]], "failure_budget": "20%"}
type Rollout struct {
	// Canary is the first wave: a count (the first nodes by name) or a list of nodes.
	Canary NodeSelection `json:"canary,omitzero"`
	// WaveSize cuts the nodes after the canary into waves of this many (a count, or a
	// percentage of the group's nodes, rounded up). Unset: one wave of the rest.
	WaveSize Amount `json:"wave_size,omitzero"`
	// Waves are explicit waves of node names after the canary; every node of the
	// group is in the canary or exactly one wave. Not with WaveSize.
	Waves [][]string `json:"waves,omitempty"`
	// FailureBudget is how many nodes may fail before the rollout halts (a count, or a
	// percentage of the group's nodes, rounded down). Unset: no budget, never halts.
	FailureBudget Amount `json:"failure_budget,omitzero"`
}

// Staged reports whether r stages anything: the zero Rollout is one wave, no budget.
func (r *Rollout) Staged() bool {
	return r != nil && (!r.Canary.IsZero() || !r.WaveSize.IsZero() || len(r.Waves) > 0 || !r.FailureBudget.IsZero())
}

// NodeSelection is a count of nodes or a list of node names.
type NodeSelection struct {
	Count int
	Nodes []string
	set   bool
}

// IsZero reports whether the selection was not given.
func (s NodeSelection) IsZero() bool { return !s.set }

// ParseNodeSelection reads a flag's value: a count ("1") or comma-separated names.
func ParseNodeSelection(v string) NodeSelection {
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		return NodeSelection{Count: n, set: true}
	}
	var names []string
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return NodeSelection{Nodes: names, set: true}
}

func (s *NodeSelection) UnmarshalJSON(b []byte) error {
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")) {
		s.set = true
		return json.Unmarshal(b, &s.Nodes)
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("want a count of nodes (1) or a list of node names ([\"web01\"]), got %s", b)
	}
	*s = NodeSelection{Count: n, set: true}
	return nil
}

func (s NodeSelection) MarshalJSON() ([]byte, error) {
	if s.Nodes != nil {
		return json.Marshal(s.Nodes)
	}
	return json.Marshal(s.Count)
}

// Amount is a count, or a percentage of the group ("50%").
type Amount struct {
	N       int
	Percent bool
	set     bool
}

// IsZero reports whether the amount was not given.
func (a Amount) IsZero() bool { return !a.set }

func (a Amount) String() string {
	if a.Percent {
		return fmt.Sprintf("%d%%", a.N)
	}
	return strconv.Itoa(a.N)
}

// ParseAmount reads "3" or "50%".
func ParseAmount(v string) (Amount, error) {
	v = strings.TrimSpace(v)
	num, percent := strings.CutSuffix(v, "%")
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil {
		return Amount{}, fmt.Errorf("%q: want a count (2) or a percentage of the group (\"50%%\")", v)
	}
	return Amount{N: n, Percent: percent, set: true}, nil
}

func (a *Amount) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case float64:
		if v != float64(int(v)) {
			return fmt.Errorf("%v: want a whole count or a percentage (\"50%%\")", v)
		}
		*a = Amount{N: int(v), set: true}
		return nil
	case string:
		parsed, err := ParseAmount(v)
		*a = parsed
		return err
	}
	return fmt.Errorf("want a count (2) or a percentage of the group (\"50%%\"), got %s", b)
}

func (a Amount) MarshalJSON() ([]byte, error) {
	if a.Percent {
		return json.Marshal(a.String())
	}
	return json.Marshal(a.N)
}

// NoBudget is the budget of a rollout that never halts.
const NoBudget = -1

// RolloutPlan is a rollout laid out on a group's nodes.
type RolloutPlan struct {
	// Waves in order; the first is the canary when one is asked for.
	Waves  [][]string
	Canary bool
	// Budget is how many nodes may fail; NoBudget when none is set.
	Budget int
	// Nodes is the group's size (the nodes that run).
	Nodes int
}

// Plan lays the rollout out on nodes (the group's enabled nodes, sorted). all are the
// roster's nodes, to tell a node the submission disables from one that does not exist.
// Problems name the field and what to do.
func (r *Rollout) Plan(nodes, all []string) (RolloutPlan, []string) {
	plan := RolloutPlan{Budget: NoBudget, Nodes: len(nodes)}
	if !r.Staged() {
		if len(nodes) > 0 {
			plan.Waves = [][]string{nodes}
		}
		return plan, nil
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	enabled, known := map[string]bool{}, map[string]bool{}
	for _, n := range nodes {
		enabled[n] = true
	}
	for _, n := range all {
		known[n] = true
	}
	placed := map[string]string{}
	// place puts names into a wave; field names the wave in messages.
	place := func(field string, names []string) []string {
		var wave []string
		for _, n := range names {
			switch {
			case !known[n]:
				bad("rollout.%s: node %q: the roster has no such node: use a name under \"nodes\"", field, n)
			case !enabled[n]:
				// A node the submission disables is not touched: it is in no wave.
			case placed[n] != "":
				bad("rollout.%s: node %q is already in rollout.%s: give each node one wave", field, n, placed[n])
			default:
				placed[n] = field
				wave = append(wave, n)
			}
		}
		return wave
	}
	rest := nodes
	if !r.Canary.IsZero() {
		var canary []string
		switch {
		case r.Canary.Nodes != nil:
			canary = place("canary", r.Canary.Nodes)
		case r.Canary.Count < 0:
			bad("rollout.canary: %d: want a count of 0 or more, or a list of node names", r.Canary.Count)
		default:
			canary = place("canary", nodes[:min(r.Canary.Count, len(nodes))])
		}
		if len(canary) > 0 {
			plan.Waves = append(plan.Waves, canary)
			plan.Canary = true
		}
		rest = nil
		for _, n := range nodes {
			if placed[n] == "" {
				rest = append(rest, n)
			}
		}
	}
	switch {
	case len(r.Waves) > 0 && !r.WaveSize.IsZero():
		bad("rollout: waves and wave_size: give one (explicit waves of node names, or a size)")
	case len(r.Waves) > 0:
		for i, names := range r.Waves {
			if wave := place(fmt.Sprintf("waves[%d]", i), names); len(wave) > 0 {
				plan.Waves = append(plan.Waves, wave)
			}
		}
		for _, n := range nodes {
			if placed[n] == "" {
				bad("rollout.waves: node %q is in no wave: add it to a wave (or to the canary)", n)
			}
		}
	default:
		size := len(rest)
		if !r.WaveSize.IsZero() {
			switch a := r.WaveSize; {
			case a.N < 1 || (a.Percent && a.N > 100):
				bad("rollout.wave_size: %s: want a count of 1 or more, or a percentage from 1%% to 100%%", a)
			case a.Percent:
				size = (a.N*len(nodes) + 99) / 100 // rounded up: a wave is never empty
			default:
				size = a.N
			}
		}
		for size > 0 && len(rest) > 0 {
			n := min(size, len(rest))
			plan.Waves = append(plan.Waves, rest[:n])
			rest = rest[n:]
		}
	}
	budget, err := r.FailureBudget.Budget(len(nodes))
	if err != nil {
		bad("rollout.failure_budget: %v", err)
	}
	plan.Budget = budget
	return plan, problems
}

// Budget is the failure budget a amounts to on a group of nodes: a count as given, a
// percentage of the group rounded down (the budget is never more than asked); NoBudget
// when a is not given. The command's rollout and the provider's rollout gate both use
// it, so a budget means the same in a roster and in HCL.
func (a Amount) Budget(nodes int) (int, error) {
	switch {
	case a.IsZero():
		return NoBudget, nil
	case a.N < 0 || (a.Percent && a.N > 100):
		return NoBudget, fmt.Errorf("%s: want a count of 0 or more, or a percentage from 0%% to 100%%", a)
	case a.Percent:
		return a.N * nodes / 100, nil
	}
	return a.N, nil
}

// PastBudget reports whether failed nodes are more than budget allows: the rollout
// halts. NoBudget never halts.
func PastBudget(failed, budget int) bool { return budget != NoBudget && failed > budget }
