package fleet

import (
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

func TestLeftOnNodeFollowsThePhases(t *testing.T) {
	for _, tc := range []struct {
		phase       string
		verdictOnly bool
		want, not   []string
	}{
		{phase: "", want: []string{"nothing"}, not: []string{"lock"}},
		{phase: deploybody.PhaseWaitForNode, want: []string{"nothing"}},
		{phase: deploybody.PhaseLockNode, want: []string{"the node lock may be held"}, not: []string{"switch", "revert", "boot entry"}},
		{phase: deploybody.PhasePushClosure, want: []string{"part of the closure", "lock"}, not: []string{"revert"}},
		{phase: deploybody.PhaseSwitch, want: []string{"a switch may be running", "a revert may be armed", "boot entry is not finalized", "lock"}},
		{phase: deploybody.PhaseDetectUnconfirmed, want: []string{"a revert may be armed", "boot entry is not finalized"}, not: []string{"a switch may be running"}},
		{phase: deploybody.PhaseRestartFailedUnits, want: []string{"failed units may be restarting", "boot entry is not finalized"}, not: []string{"revert"}},
		{phase: deploybody.PhaseWatch, want: []string{"boot entry is not finalized", "lock"}, not: []string{"revert", "switch may"}},
		{phase: deploybody.PhaseFinalizeBootEntry, want: []string{"the boot entry may point at either system"}},
		{phase: deploybody.PhaseConclude, want: []string{"lock"}, not: []string{"boot entry", "revert"}},
		// A verdict pass switches nothing and writes no boot entry.
		{phase: deploybody.PhaseWatch, verdictOnly: true, want: []string{"lock"}, not: []string{"boot entry", "revert", "switch"}},
		{phase: deploybody.PhaseRestartFailedUnits, verdictOnly: true, want: []string{"failed units may be restarting"}, not: []string{"boot entry"}},
	} {
		got := strings.Join(LeftOnNode(tc.phase, tc.verdictOnly), "; ")
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("phase %q (verdict only %v): %q lacks %q", tc.phase, tc.verdictOnly, got, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(got, n) {
				t.Errorf("phase %q (verdict only %v): %q says %q", tc.phase, tc.verdictOnly, got, n)
			}
		}
	}
}
