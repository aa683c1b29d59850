package deploybody

import (
	"fmt"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// Phase names, in the order the body runs them (docs/design.md#phases).
const (
	PhaseBuild               = "build"
	PhaseWaitForNode         = "wait-for-node"
	PhaseLockNode            = "lock-node"
	PhasePushClosure         = "push-closure"
	PhaseWaitForSecretChain  = "wait-for-secret-chain"
	PhaseSnapshotUnitStates  = "snapshot-unit-states"
	PhaseSwitch              = "switch"
	PhaseReadSwitchResult    = "read-switch-result"
	PhaseDetectUnconfirmed   = "detect-unconfirmed-switch"
	PhaseCollectOwnedUnits   = "collect-owned-units"
	PhaseRestartFailedUnits  = "restart-failed-owned-units"
	PhaseSettle              = "settle"
	PhaseWatch               = "watch"
	PhaseChecks              = "checks"
	PhaseClassify            = "classify"
	PhaseVerdict             = "verdict"
	PhaseReport              = "report"
	PhaseFinalizeBootEntry   = "finalize-boot-entry"
	PhaseConclude            = "conclude"
	skippedInVerdictOnlyNote = "skipped: verdict-only pass builds, copies and switches nothing"
	skippedReadOnlyNote      = "skipped: read-only pass restarts no unit"
)

// Phases lists every phase name in order.
var Phases = []string{
	PhaseBuild, PhaseWaitForNode, PhaseLockNode, PhasePushClosure, PhaseWaitForSecretChain,
	PhaseSnapshotUnitStates, PhaseSwitch, PhaseReadSwitchResult, PhaseDetectUnconfirmed,
	PhaseCollectOwnedUnits, PhaseRestartFailedUnits, PhaseSettle, PhaseWatch,
	PhaseChecks, PhaseClassify, PhaseVerdict, PhaseReport, PhaseFinalizeBootEntry, PhaseConclude,
}

// PhaseTiming records one phase of a run.
type PhaseTiming struct {
	Name     string
	Duration time.Duration
	Note     string
}

// Result is everything a run learned. It is returned even when the run fails, filled
// as far as the run got.
type Result struct {
	Node     string
	Toplevel string
	// Generation is the system profile generation after the boot entry was finalized
	// (0 when it was not: verdict-only, or the run stopped earlier).
	Generation int
	// PreviousSystem is what /run/current-system pointed at before the switch.
	PreviousSystem string
	// RunningSystem is what /run/current-system points at after the switch (or, in
	// verdict-only mode, during the pass).
	RunningSystem string
	CacheHit      bool
	Copy          CopyStats

	SwitchExitCode   int
	SwitchStderr     string
	SwitchReconnects bool
	// Confirmed is true when the node runs the new toplevel after the switch.
	Confirmed bool
	// BootReverted is true when the boot entry was pointed back at PreviousSystem.
	BootReverted bool
	// SelfReverted is true when the node accepted no new login after the switch and
	// put itself back on PreviousSystem (the node-side revert).
	SelfReverted bool

	// Reboot is set when the deploy rebooted the node into the new system: why, and
	// how long the boot took.
	Reboot *Reboot

	Verdict *judge.Verdict
	// Changes is what the deploy changed (nil in verdict-only mode, or when the run
	// stopped before the report).
	Changes *Changes
	// Report is the verdict as text for an operator.
	Report   string
	Phases   []PhaseTiming
	Warnings []string
}

// DeployError is the error of a run: it names the node, the phase and what to do.
type DeployError struct {
	Node  string
	Phase string
	Err   error
	Hint  string
}

func (e *DeployError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s: phase %s: %v", e.Node, e.Phase, e.Err)
	if e.Hint != "" {
		b.WriteString(". ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

func (e *DeployError) Unwrap() error { return e.Err }
