package deploybody

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Deploy builds (or takes) the node's toplevel, copies it, switches the node to it and
// judges the node. It runs every phase in order (docs/design.md#phases). The Result is returned
// even with an error, filled as far as the run got. A verdict that fails the run does
// so only after the boot entry is finalized, so a node with a failed unit keeps
// its new boot entry.
func Deploy(ctx context.Context, t Transport, o Options) (*Result, error) {
	return newRun(ctx, t, o, false).execute()
}

// VerdictOnly judges a running node without building, copying or switching: it waits
// for the secret chain, restarts failed units the closure wants, settles, watches and
// gives the verdict (docs/design.md#verdict-only).
func VerdictOnly(ctx context.Context, t Transport, o Options) (*Result, error) {
	return newRun(ctx, t, o, true).execute()
}

// unreachableSampleLimit is how many unanswered samples in a row make a node
// unreachable in the chain wait.
const unreachableSampleLimit = 3

// maxSamples bounds every sampling loop in count, whatever the timings say.
const maxSamples = 2000

type run struct {
	ctx         context.Context
	t           Transport
	o           Options
	verdictOnly bool
	tree        localTree
	res         *Result

	toplevel      string
	nodeSilent    bool // verdict-only: the node did not answer in wait-for-node
	lock          *nodeLock
	switchResult  SwitchResult
	switchStarted bool // the switch was sent to the node (it may have run, whatever came back)
	closure       *closureUnits
	failedBefore  map[string]bool
	restarted     []string
	jobs          jobTracker
	watchSamples  []sample
	budgetCache   map[string]int
	verdictFailed error
	// failedAfterSwitch is the failed-unit list read with the running system after the
	// switch, for the restart phase (one round trip less).
	failedAfterSwitch *RunResult
	// seenFailed holds every unit a watch sample found failed: later samples show them.
	seenFailed map[string]bool
	// armed is the node-side revert this run armed and has not settled yet.
	armed  *armedRevert
	checks *checkRun
	// prevUnitDigests are the previous system's unit files (name → sha256), read in
	// the snapshot's round trip; nil when unread.
	prevUnitDigests map[string]string
}

func newRun(ctx context.Context, t Transport, o Options, verdictOnly bool) *run {
	o = o.withDefaults(t)
	return &run{
		ctx:         ctx,
		t:           t,
		o:           o,
		verdictOnly: verdictOnly,
		tree:        localTree{root: o.LocalRoot},
		res:         &Result{Node: o.Node},
		budgetCache: map[string]int{},
		seenFailed:  map[string]bool{},
		checks:      newCheckRun(o),
	}
}

type step struct {
	name string
	body func() (note string, err error)
}

// skippedInVerdictOnly are the phases that build, copy or switch.
var skippedInVerdictOnly = map[string]bool{
	PhaseBuild: true, PhasePushClosure: true, PhaseSwitch: true, PhaseReadSwitchResult: true,
	PhaseDetectUnconfirmed: true, PhaseFinalizeBootEntry: true,
}

func (r *run) execute() (_ *Result, runErr error) {
	steps := []step{
		{PhaseBuild, r.build},
		{PhaseWaitForNode, r.waitForNode},
		{PhaseLockNode, r.lockNodeSettlingEarlierRuns},
		{PhasePushClosure, r.pushClosure},
		{PhaseWaitForSecretChain, r.waitForSecretChain},
		{PhaseSnapshotUnitStates, r.snapshotUnitStates},
		{PhaseSwitch, r.switchSystem},
		{PhaseReadSwitchResult, r.readSwitchResult},
		{PhaseDetectUnconfirmed, r.detectUnconfirmedSwitch},
		{PhaseCollectOwnedUnits, r.collectOwnedUnits},
		{PhaseRestartFailedUnits, r.restartFailedUnits},
		{PhaseSettle, r.settle},
		{PhaseWatch, r.watch},
		{PhaseChecks, r.runChecks},
		{PhaseClassify, r.classify},
		{PhaseVerdict, r.verdict},
		{PhaseReport, r.report},
		{PhaseFinalizeBootEntry, r.finalizeBootEntry},
		{PhaseConclude, r.conclude},
	}
	if r.verdictOnly && r.o.Toplevel != "" {
		if !validStorePath(r.o.Toplevel) {
			return r.res, r.asDeployError(PhaseBuild, withHint(fmt.Errorf("toplevel %q is not a clean absolute store path", r.o.Toplevel),
				"set toplevel to the store path of the system to judge (/nix/store/<hash>-<name>)"))
		}
		r.setToplevel(r.o.Toplevel)
	}
	for _, s := range steps {
		if r.verdictOnly && skippedInVerdictOnly[s.name] {
			r.res.Phases = append(r.res.Phases, PhaseTiming{Name: s.name, Note: skippedInVerdictOnlyNote})
			continue
		}
		err := r.phase(s)
		if err == nil {
			// Before each next phase: a run whose lock another run took stops here,
			// before it switches, restarts or writes the boot entry.
			if lost := r.lockLost(); lost != nil {
				err = r.asDeployError(s.name, lost)
			}
		}
		if s.name == PhaseLockNode && err == nil {
			defer func() {
				r.restoreIfUnreachable(runErr)
				r.unlockNode()
				if lost := r.lockLost(); lost != nil && runErr == nil {
					runErr = r.asDeployError(PhaseConclude, lost)
				}
			}()
		}
		if err != nil {
			return r.res, err
		}
	}
	return r.res, nil
}

// phase times, logs and records one phase, and turns its error into a DeployError.
func (r *run) phase(s step) error {
	start := r.o.Clock.Now()
	r.log(LevelInfo, s.name, "phase started", nil)
	note, err := s.body()
	if err == nil {
		err = r.ctx.Err()
		if err != nil && r.armed != nil {
			// Interrupted between the switch and the confirming login: the revert
			// is settled all the same, on a context of its own.
			err = r.settleAfterFailure(fmt.Errorf("interrupted after the switch: %w", err), "apply again: the next plan deploys the configuration again")
		}
	}
	elapsed := r.o.Clock.Now().Sub(start)
	if err != nil {
		deployErr := r.asDeployError(s.name, err)
		if note == "" {
			note = "failed: " + deployErr.Err.Error()
		}
		r.res.Phases = append(r.res.Phases, PhaseTiming{Name: s.name, Duration: elapsed, Note: note})
		r.log(LevelWarn, s.name, "phase failed", map[string]any{"duration": elapsed.String(), "error": deployErr.Error()})
		return deployErr
	}
	r.res.Phases = append(r.res.Phases, PhaseTiming{Name: s.name, Duration: elapsed, Note: note})
	r.log(LevelInfo, s.name, "phase finished", map[string]any{"duration": elapsed.String(), "note": note})
	return nil
}

// hintedError carries what the operator can do about an error.
type hintedError struct {
	err  error
	hint string
}

func (h *hintedError) Error() string { return h.err.Error() }
func (h *hintedError) Unwrap() error { return h.err }

func withHint(err error, hint string) error { return &hintedError{err: err, hint: hint} }

func (r *run) asDeployError(phase string, err error) *DeployError {
	var deployErr *DeployError
	if errors.As(err, &deployErr) {
		return deployErr
	}
	hint := ""
	var hinted *hintedError
	if errors.As(err, &hinted) {
		hint = hinted.hint
		err = hinted.err
	}
	if hint == "" && errors.Is(err, ErrUnreachable) {
		hint = "check that the node is running and reachable with the transport's settings, then apply again"
	}
	if hint == "" && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		hint = "the operation's time limit ran out; raise the resource's timeouts or the matching timing"
	}
	return &DeployError{Node: r.o.Node, Phase: phase, Err: err, Hint: hint}
}

func (r *run) log(level Level, phase, message string, fields map[string]any) {
	if fields == nil {
		fields = map[string]any{}
	}
	fields["node"] = r.o.Node
	r.o.Logger.Log(r.ctx, level, phase, message, fields)
}

func (r *run) warn(phase, message string) {
	r.res.Warnings = append(r.res.Warnings, message)
	r.log(LevelWarn, phase, message, nil)
}

// searchPath is put before the node's PATH for every remote command, so a node whose
// own PATH resolves nothing still finds the closure's tools.
func (r *run) searchPath() []string {
	var p []string
	if r.toplevel != "" {
		p = append(p, r.toplevel+"/sw/bin")
	}
	return append(p, "/run/current-system/sw/bin", "/usr/bin", "/bin")
}

func (r *run) remote(argv ...string) (RunResult, error) {
	return r.t.Run(r.ctx, argv, RunOptions{Path: r.searchPath()})
}

// remoteBatch runs cmds in one round trip when the transport is a BatchRunner, else one
// by one. The results are in the order of cmds; err is only for transport faults.
func (r *run) remoteBatch(cmds ...[]string) ([]RunResult, error) {
	if b, ok := r.t.(BatchRunner); ok && len(cmds) > 1 {
		res, err := b.RunBatch(r.ctx, cmds, RunOptions{Path: r.searchPath()})
		if err == nil && len(res) != len(cmds) {
			err = fmt.Errorf("the transport answered %d of a batch of %d commands", len(res), len(cmds))
		}
		return res, err
	}
	out := make([]RunResult, 0, len(cmds))
	for _, c := range cmds {
		res, err := r.remote(c...)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// The reads the body sends to a node.
var (
	cmdReadRunning = []string{"readlink", "-f", "/run/current-system"}
	cmdListFailed  = []string{"systemctl", "list-units", "--state=failed", "--no-legend", "--plain", "--full"}
	cmdListJobs    = []string{"systemctl", "list-jobs", "--no-legend", "--no-pager"}
	cmdSystemState = []string{"systemctl", "is-system-running"}
)

func cmdShow(units []string) []string {
	return append([]string{"systemctl", "show", "-p", strings.Join(showProperties, ","), "--"}, units...)
}

// sleepOrDone is a helper for loops that sleep between samples.
func (r *run) sleepOrDone(d time.Duration) error { return r.o.Clock.Sleep(r.ctx, d) }
