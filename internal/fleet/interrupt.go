package fleet

import (
	"slices"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// LeftOnNode says what a run that was in phase when its command quit, without
// letting it wind down, may have left on its node. phase is the last phase the run
// began ("" when it never began: it waited for a slot); verdictOnly is a verdict pass,
// which switches nothing. The answers are "may": the run could have been a moment
// further on.
func LeftOnNode(phase string, verdictOnly bool) []string {
	at := func(p string) int { return slices.Index(deploybody.Phases, p) }
	i := at(phase)
	if i < at(deploybody.PhaseLockNode) {
		return []string{"nothing: the run had not yet changed the node"}
	}
	var left []string
	if !verdictOnly {
		switch phase {
		case deploybody.PhasePushClosure:
			left = append(left, "part of the closure may have been copied (harmless: the store takes whole paths only)")
		case deploybody.PhaseSwitch:
			left = append(left, "a switch may be running")
			fallthrough
		case deploybody.PhaseReadSwitchResult, deploybody.PhaseDetectUnconfirmed:
			left = append(left, "a revert may be armed: the node switches itself back to its previous system unless a new login confirms within timings.confirm_timeout of the switch")
		}
		switch {
		case i >= at(deploybody.PhaseSwitch) && i < at(deploybody.PhaseFinalizeBootEntry):
			left = append(left, "the boot entry is not finalized: the node may run the new system and boot the previous one")
		case phase == deploybody.PhaseFinalizeBootEntry:
			left = append(left, "the boot entry may point at either system")
		}
	}
	if phase == deploybody.PhaseRestartFailedUnits {
		left = append(left, "failed units may be restarting")
	}
	return append(left, "the node lock may be held: the next run takes it over once its heartbeat goes stale")
}
