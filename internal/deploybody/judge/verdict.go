package judge

import (
	"sort"
	"time"
)

// ActivationSwitched is Verdict.Activation when the node switched to the system in place:
// the report names only the other ways (a reboot, a boot entry set only).
const ActivationSwitched = "switched"

// FailureOrigin says whether a failed unit failed because of this run.
type FailureOrigin string

const (
	// FailedNew: the unit was not failed when the run began (before the switch, or in
	// verdict-only mode before the pass's restarts).
	FailedNew FailureOrigin = "new"
	// FailedBeforeSwitch: the unit was already failed before the switch (or before
	// the verdict-only pass); the new closure did not necessarily cause it.
	FailedBeforeSwitch FailureOrigin = "already-failed-before-switch"
)

// FailedUnit is a unit of the deployed configuration in ActiveState=failed.
type FailedUnit struct {
	Unit   string
	Result string // systemd's Result= (exit-code, signal, timeout, …)
	Origin FailureOrigin
}

// LoopingUnit is a unit seen in a restart loop during the watch.
type LoopingUnit struct {
	Unit      string
	NRestarts int
	// Budget is the unit's loop budget (X-LoopBudget=, LoopBudgets, or 0).
	Budget int
	// PastBudget is true when NRestarts exceeds Budget.
	PastBudget bool
	// StillLooping is true when the unit looped in the last watch window (not only
	// earlier in the watch).
	StillLooping bool
}

// SpawnFault is a unit systemd never spawned (its process never ran its program).
type SpawnFault struct {
	Unit string
	// Status is ExecMainStatus (200–245), 0 for Result=resources.
	Status int
	// Reason is systemd's name for the status (EXEC, USER, …) or "resources".
	Reason string
}

// StaleJob is a start job older than the stale_job threshold.
type StaleJob struct {
	Unit  string
	JobID int
	Age   time.Duration
}

// Verdict is the judgement of a node (docs/design.md#verdict-classes). Unit lists are sorted.
// When a source could not be read, Unread names it and the lists that depend on it
// are nil: they mean "unread", never "none".
type Verdict struct {
	Strict      bool
	VerdictOnly bool
	// SystemState is `systemctl is-system-running` (running, degraded, …), or
	// "unread" / "unreachable".
	SystemState string
	// Unreachable: the node answered none of the samples.
	Unreachable bool
	// ShuttingDown: systemd answered "stopping" to a sample (or to the last read of
	// the system state): the node was powering off or rebooting, as a switched
	// system that asks for it does. Units it stops then are not the verdict's news,
	// and the node may stop answering at any moment, so such a verdict always fails
	// and a transport with a rollback point probes the node before it trusts it.
	ShuttingDown bool
	// Unread lists the sources that could not be read, each with its reason, e.g.
	// "unit states: Failed to connect to bus: No such file or directory".
	Unread []string
	// Samples and Answered count the watch samples taken and answered.
	Samples  int
	Answered int

	Failed              []FailedUnit
	SetAside            []string
	RestartLoops        []LoopingUnit
	Cycling             []string
	StaleJobs           []StaleJob
	NeverSpawnedClosure []SpawnFault
	NeverSpawnedHost    []SpawnFault
	SkippedOnCondition  []string
	// Restarted lists the failed units the run restarted before the watch.
	Restarted []string
	// NotRestarted lists the changed units the switch left running their old code
	// (restartIfChanged = false, …), as "<unit>: changed, not restarted (<reason>)"
	// (the deploy body's not_restarted.go). They do not fail the run: the configuration asked for it.
	NotRestarted []string
	// Checks are the operator's checks and probes, in the order configured.
	Checks []CheckResult

	// ActivationFailed are the lines of switch-to-configuration's output that say what
	// its activation script failed on (exit 2: the node runs the new system, but
	// users, /etc or secrets may not be what it says); empty when it did not fail.
	ActivationFailed []string

	// Activation says how the node came to run the judged system: "switched",
	// "rebooted (<why>); boot took <d>", or that only the boot entry was set and
	// nothing that needs the new system running was judged.
	Activation string

	// Reasons are why this verdict fails the run (Strict) or the warnings it gives
	// (lenient). Empty when the node converged.
	Reasons []string
	// OK is true when the verdict does not fail the run.
	OK bool
}

// FailedNames are the units of a verdict's failed list, in its order.
func FailedNames(f []FailedUnit) []string {
	var out []string
	for _, u := range f {
		out = append(out, u.Unit)
	}
	return out
}

// LoopNames are the units of a verdict's restart loops, in its order.
func LoopNames(l []LoopingUnit) []string {
	var out []string
	for _, u := range l {
		out = append(out, u.Unit)
	}
	return out
}

// SpawnNames are the units of a list of spawn faults, sorted.
func SpawnNames(s []SpawnFault) []string {
	var out []string
	for _, u := range s {
		out = append(out, u.Unit)
	}
	sort.Strings(out)
	return out
}
