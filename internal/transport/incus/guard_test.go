package incus

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
)

func TestUnreachableAfterSwitch(t *testing.T) {
	switched := []deploybody.PhaseTiming{{Name: deploybody.PhaseWaitForNode}, {Name: deploybody.PhaseSwitch}}
	notSwitched := []deploybody.PhaseTiming{{Name: deploybody.PhaseWaitForNode}}
	unreach := &deploybody.DeployError{Node: "n", Phase: deploybody.PhaseWatch, Err: fmt.Errorf("gone: %w", deploybody.ErrUnreachable)}
	failedUnit := &deploybody.DeployError{Node: "n", Phase: deploybody.PhaseVerdict, Err: errors.New("unit failed")}
	cases := []struct {
		name string
		res  *deploybody.Result
		err  error
		want bool
	}{
		{"unreachable before switch", &deploybody.Result{Phases: notSwitched}, unreach, false},
		{"unreachable after switch", &deploybody.Result{Phases: switched}, unreach, true},
		{"verdict says unreachable", &deploybody.Result{Phases: switched, Verdict: &judge.Verdict{Unreachable: true}}, failedUnit, true},
		// A failed unit keeps its new boot entry; it is never restored (docs/design.md#phases).
		{"failed unit", &deploybody.Result{Phases: switched, Verdict: &judge.Verdict{Failed: []judge.FailedUnit{{Unit: "a.service"}}}}, failedUnit, false},
		{"success", &deploybody.Result{Phases: switched, Verdict: &judge.Verdict{OK: true}}, nil, false},
		{"nil", nil, unreach, false},
	}
	for _, c := range cases {
		if got := unreachableAfterSwitch(c.res, c.err); got != c.want {
			t.Errorf("%s: unreachableAfterSwitch = %v, want %v", c.name, got, c.want)
		}
	}
}

// After the switch, any failure except a verdict the node answered to the end, up, is
// probed for reachability; a failed unit never is: it keeps its new boot entry.
func TestMayBeUnreachable(t *testing.T) {
	switched := []deploybody.PhaseTiming{{Name: deploybody.PhaseSwitch}}
	verdictErr := &deploybody.DeployError{Node: "n", Phase: deploybody.PhaseVerdict, Err: errors.New("unit failed")}
	watchErr := &deploybody.DeployError{Node: "n", Phase: deploybody.PhaseRestartFailedUnits, Err: errors.New("500: Failed to retrieve PID")}
	cases := []struct {
		name string
		res  *deploybody.Result
		err  error
		want bool
	}{
		{"failed unit", &deploybody.Result{Phases: switched, Verdict: &judge.Verdict{Failed: []judge.FailedUnit{{Unit: "a.service"}}}}, verdictErr, false},
		{"failed unit, every sample answered", &deploybody.Result{Phases: switched, Verdict: &judge.Verdict{Samples: 6, Answered: 6, Failed: []judge.FailedUnit{{Unit: "a.service"}}}}, verdictErr, false},
		// A node that powers itself off answers for a while on a busy host (seen in CI:
		// the verdict named the units the shutdown stopped, and the node was not restored).
		{"shutting down, every sample answered", &deploybody.Result{Phases: switched, Verdict: &judge.Verdict{Samples: 6, Answered: 6, ShuttingDown: true, Failed: []judge.FailedUnit{{Unit: "a.service"}}}}, verdictErr, true},
		{"gone after the first samples", &deploybody.Result{Phases: switched, Verdict: &judge.Verdict{Samples: 6, Answered: 2, SystemState: "unread"}}, verdictErr, true},
		{"error after the switch", &deploybody.Result{Phases: switched}, watchErr, true},
		{"no error", &deploybody.Result{Phases: switched, Verdict: &judge.Verdict{OK: true}}, nil, false},
		{"error before the switch", &deploybody.Result{}, watchErr, false},
		{"skipped switch (verdict-only)", &deploybody.Result{Phases: []deploybody.PhaseTiming{{Name: deploybody.PhaseSwitch, Note: "skipped: verdict-only"}}}, watchErr, false},
	}
	for _, c := range cases {
		if got := mayBeUnreachable(c.res, c.err); got != c.want {
			t.Errorf("%s: mayBeUnreachable = %v, want %v", c.name, got, c.want)
		}
	}
}

// The rollback point is known good: a retry after a deploy that was cut off after its
// switch (the node runs a system its boot entry does not point at) keeps the snapshot
// that run took before its switch, instead of snapshotting the unfinished state over it.
func TestKeepRollbackPointAcrossRetries(t *testing.T) {
	const good, unfinished = "/nix/store/aaaa-good", "/nix/store/bbbb-unfinished"
	gen1 := GenerationSnapshotName(1)
	earlier := []incusapi.Snapshot{{Name: GenerationSnapshotName(0)}, {Name: gen1}}
	cases := []struct {
		name             string
		running, profile string
		snaps            []incusapi.Snapshot
		want             bool
	}{
		{"finished node: a fresh snapshot of it", good, good, earlier, false},
		{"unfinished node with the earlier point: kept", unfinished, good, earlier, true},
		{"unfinished node, no earlier point: snapshotted (nothing better)", unfinished, good, earlier[:1], false},
		{"first deploy (no system yet)", "", "", nil, false},
		{"unfinished node without a profile, earlier point kept", unfinished, "", earlier, true},
	}
	for _, c := range cases {
		if got := keepRollbackPoint(c.running, c.profile, gen1, c.snaps); got != c.want {
			t.Errorf("%s: keepRollbackPoint = %v, want %v", c.name, got, c.want)
		}
	}
}
