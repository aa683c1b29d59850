package incus

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
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
		{"verdict says unreachable", &deploybody.Result{Phases: switched, Verdict: &deploybody.Verdict{Unreachable: true}}, failedUnit, true},
		// A failed unit keeps its new boot entry; it is never restored (docs/design.md#phases).
		{"failed unit", &deploybody.Result{Phases: switched, Verdict: &deploybody.Verdict{Failed: []deploybody.FailedUnit{{Unit: "a.service"}}}}, failedUnit, false},
		{"success", &deploybody.Result{Phases: switched, Verdict: &deploybody.Verdict{OK: true}}, nil, false},
		{"nil", nil, unreach, false},
	}
	for _, c := range cases {
		if got := unreachableAfterSwitch(c.res, c.err); got != c.want {
			t.Errorf("%s: unreachableAfterSwitch = %v, want %v", c.name, got, c.want)
		}
	}
}

// After the switch, any failure except a verdict the node answered is probed for
// reachability; a failed unit never is: it keeps its new boot entry.
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
		{"failed unit", &deploybody.Result{Phases: switched, Verdict: &deploybody.Verdict{Failed: []deploybody.FailedUnit{{Unit: "a.service"}}}}, verdictErr, false},
		{"error after the switch", &deploybody.Result{Phases: switched}, watchErr, true},
		{"no error", &deploybody.Result{Phases: switched, Verdict: &deploybody.Verdict{OK: true}}, nil, false},
		{"error before the switch", &deploybody.Result{}, watchErr, false},
		{"skipped switch (verdict-only)", &deploybody.Result{Phases: []deploybody.PhaseTiming{{Name: deploybody.PhaseSwitch, Note: "skipped: verdict-only"}}}, watchErr, false},
	}
	for _, c := range cases {
		if got := mayBeUnreachable(c.res, c.err); got != c.want {
			t.Errorf("%s: mayBeUnreachable = %v, want %v", c.name, got, c.want)
		}
	}
}
