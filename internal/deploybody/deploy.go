package deploybody

import (
	"context"
	"fmt"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// Deploy builds (or takes) the node's toplevel, copies it, switches the node to it and
// judges the node. It runs every phase in order (docs/design.md#phases). The Result is returned
// even with an error, filled as far as the run got. A verdict that fails the run does
// so only after the boot entry is finalized, so a node with a failed unit keeps
// its new boot entry.
func Deploy(ctx context.Context, t Transport, o Options) (*Result, error) {
	return execute(ctx, newRunEnv(t, o, false))
}

// VerdictOnly judges a running node without building, copying or switching: it waits
// for the secret chain, restarts failed units the closure wants, settles, watches and
// gives the verdict (docs/design.md#verdict-only).
func VerdictOnly(ctx context.Context, t Transport, o Options) (*Result, error) {
	return execute(ctx, newRunEnv(t, o, true))
}

// VerdictReadOnly is the verdict-only pass that changes no unit: the same phases, the
// same lock, the same verdict, but a failed unit is judged as it is, never restarted
// (docs/design.md#node-health). It is the pass a health check runs at every plan, where
// a restart would change the node behind the operator's back.
func VerdictReadOnly(ctx context.Context, t Transport, o Options) (*Result, error) {
	e := newRunEnv(t, o, true)
	e.readOnly = true
	return execute(ctx, e)
}

// unreachableSampleLimit is how many unanswered samples in a row make a node
// unreachable in the chain wait.
const unreachableSampleLimit = 3

// maxSamples bounds every sampling loop in count, whatever the timings say.
const maxSamples = 2000

func newRunEnv(t Transport, o Options, verdictOnly bool) *runEnv {
	o = o.withDefaults(t)
	return &runEnv{t: t, o: o, verdictOnly: verdictOnly, tree: localTree{root: o.LocalRoot}}
}

// flow is what the phases hand on to each other, each field written by the step that
// produces it and read by the steps after it. Only the step table writes it.
type flow struct {
	res *Result // the record the run returns: the steps copy the phases' outputs into it

	toplevel   string    // build (verdict-only: the options, or the snapshot)
	nodeSilent bool      // wait-for-node (verdict-only: the node did not answer)
	lock       *nodeLock // lock-node
	before     snapshot  // snapshot-unit-states
	// ahead is the snapshot's read, taken beside the push (push-closure), until the
	// snapshot phase takes it.
	ahead *snapshotAhead
	// changesAhead is the summary of changes, computed during the settle and the
	// watch, until the report takes it.
	changesAhead *changesAhead
	switched     switched     // switch
	armed        *armedRevert // switch, until the revert is settled
	// login is the confirming login (switch), until awaitLogin waited for it.
	login      *confirmingLogin
	afterwards *RunResult // detect-unconfirmed-switch: the failed units, for the restart
	closure    *closureUnits
	restarted  []string
	checks     *judge.CheckRun
	budgets    *loopBudgets
	watched    watched // watch: the samples, and the jobs seen
	failed     error   // verdict: the verdict's failure, returned by conclude
	// pushed: the push began, so the pushed closure's GC root may point at toplevel;
	// rootReleased: the boot entry's round trip released it (the profile holds the
	// system now).
	pushed, rootReleased bool

	// notRestarted are the changed units the switch left running (switch), for the
	// verdict and the summary of changes.
	notRestarted []string
}

// step is one phase of the table: body runs it on what the earlier steps produced.
type step struct {
	name string
	body func(ctx context.Context) (note string, err error)
}

// skippedInVerdictOnly are the phases that build, copy or switch.
var skippedInVerdictOnly = map[string]bool{
	PhaseBuild: true, PhasePushClosure: true, PhaseSwitch: true, PhaseReadSwitchResult: true,
	PhaseDetectUnconfirmed: true, PhaseFinalizeBootEntry: true,
}

// skippedWhenBootOnly are the phases that judge the running new system, which a
// boot-only activation does not have until the node's next boot.
var skippedWhenBootOnly = map[string]bool{
	PhaseReadSwitchResult: true, PhaseDetectUnconfirmed: true, PhaseCollectOwnedUnits: true, PhaseRestartFailedUnits: true,
	PhaseSettle: true, PhaseWatch: true, PhaseChecks: true, PhaseClassify: true, PhaseVerdict: true,
}

const skippedWhenBootOnlyNote = "skipped: activation boot (the node runs the new system at its next boot)"

// steps is the step table: the phases in order, and for each what it reads and what
// it produces.
func (e *runEnv) steps(f *flow) []step {
	return []step{
		{PhaseBuild, func(ctx context.Context) (note string, err error) {
			var b built
			b, note, err = e.build(ctx)
			f.setToplevel(b.toplevel)
			f.res.CacheHit = b.cacheHit
			return note, err
		}},
		{PhaseWaitForNode, func(ctx context.Context) (note string, err error) {
			f.nodeSilent, note, err = e.waitForNode(ctx)
			return note, err
		}},
		{PhaseLockNode, func(ctx context.Context) (note string, err error) {
			f.lock, note, err = e.lockNodeSettlingEarlierRuns(ctx, f.toplevel, f.nodeSilent)
			return note, err
		}},
		{PhasePushClosure, func(ctx context.Context) (note string, err error) {
			if e.snapshotBesidePush() {
				f.ahead = e.startSnapshotAhead(ctx, f.toplevel)
			}
			f.pushed = true
			f.res.Copy, note, err = e.pushClosure(ctx, f.toplevel)
			return note, err
		}},
		{PhaseWaitForSecretChain, func(ctx context.Context) (note string, err error) {
			var unreachable *judge.Verdict
			unreachable, note, err = e.waitForSecretChain(ctx, f.toplevel, f.nodeSilent)
			if unreachable != nil {
				f.res.Verdict, f.res.Report = unreachable, judge.RenderReport(e.o.Node, unreachable)
			}
			return note, err
		}},
		{PhaseSnapshotUnitStates, func(ctx context.Context) (note string, err error) {
			f.before, note, err = e.snapshotUnitStates(ctx, f.toplevel, f.ahead)
			f.ahead = nil
			if e.verdictOnly {
				f.res.RunningSystem = f.before.running
			} else {
				f.res.PreviousSystem = f.before.running
			}
			f.setToplevel(f.before.toplevel)
			return note, err
		}},
		{PhaseSwitch, func(ctx context.Context) (note string, err error) {
			f.switched, note, err = e.activate(ctx, f.toplevel, f.res.PreviousSystem, f.lock)
			f.res.Reboot = f.switched.reboot
			if f.switched.bootOnly && err == nil {
				f.res.Verdict = bootOnlyVerdict(e.o.Strict)
			}
			f.armed, f.login = f.switched.armed, f.switched.login
			f.res.SwitchExitCode = f.switched.result.ExitCode
			f.res.SwitchStderr = f.switched.result.Stderr
			f.res.SwitchReconnects = f.switched.result.Reconnected
			f.notRestarted = e.unitsNotRestarted(f.toplevel, f.switched)
			f.settled(f.switched.settled)
			return note, err
		}},
		{PhaseReadSwitchResult, func(ctx context.Context) (string, error) {
			if f.switched.reboot != nil {
				return "rebooted instead of a switch: the verdict judges the booted system", nil
			}
			return e.readSwitchResult(ctx, f.switched.result)
		}},
		{PhaseDetectUnconfirmed, func(ctx context.Context) (note string, err error) {
			var c confirmation
			c, note, err = e.detectUnconfirmedSwitch(ctx, f.toplevel, f.switched.result, func() error { return e.awaitLogin(ctx, f) })
			f.afterwards = c.failedUnits
			if c.read {
				f.res.RunningSystem = c.running
			}
			f.res.Confirmed = f.res.Confirmed || c.confirmed
			return note, err
		}},
		{PhaseCollectOwnedUnits, func(ctx context.Context) (note string, err error) {
			f.closure, note, err = e.collectOwnedUnits(ctx, f.toplevel)
			f.budgets = newLoopBudgets(e.o, e.tree, f.toplevel)
			return note, err
		}},
		{PhaseRestartFailedUnits, func(ctx context.Context) (note string, err error) {
			// A restart changes the node again: not before the new login proved it.
			f.restarted, note, err = e.restartFailedUnits(ctx, f.toplevel, f.closure, f.afterwards, func() error { return e.awaitLogin(ctx, f) })
			f.afterwards = nil
			return note, err
		}},
		{PhaseSettle, func(ctx context.Context) (string, error) {
			if !e.verdictOnly {
				// Everything the summary is made of is known since the snapshot and it
				// reads only the deployer: made while the settle and the watch wait.
				f.changesAhead = e.startChanges(ctx, f.changesIn())
			}
			note, err := e.settle(ctx)
			if err != nil {
				return note, err
			}
			// The confirming login ran beside the phases since the switch; the watch
			// judges a node whose revert is settled.
			return note, e.awaitLogin(ctx, f)
		}},
		{PhaseWatch, func(ctx context.Context) (note string, err error) {
			f.watched, note, err = e.watch(ctx, f.judging(), f.checks)
			return note, err
		}},
		{PhaseChecks, func(ctx context.Context) (string, error) {
			return e.runChecks(ctx, f.toplevel, f.checks)
		}},
		{PhaseClassify, func(ctx context.Context) (note string, err error) {
			f.res.Verdict, note, err = e.classify(ctx, f.judging(), f.checks)
			if f.res.Verdict != nil && !e.verdictOnly {
				f.res.Verdict.Activation = switchedActivation(e.o.Activation, f.res.Reboot, f.switched.result)
				f.res.Verdict.NotRestarted = f.notRestarted
				if f.res.Reboot == nil && activationFailed(f.switched.result) {
					// The node runs the new system (switch-to-configuration updated
					// /run/current-system), but its activation script failed.
					f.res.Verdict.ActivationFailed = activationErrorLines(f.switched.result)
				}
			}
			return note, err
		}},
		{PhaseVerdict, func(ctx context.Context) (note string, err error) {
			note, f.failed = e.verdict(ctx, f.res.Verdict, f.res.Reboot)
			if f.res.Verdict != nil && f.res.Reboot != nil && !e.verdictOnly {
				// What becomes of the boot entry depends on the verdict (boot_once.go).
				f.res.Verdict.Activation = verdictActivation(e.o.Activation, f.res.Reboot, f.failed == nil)
			}
			return note, nil
		}},
		{PhaseReport, func(ctx context.Context) (string, error) {
			if !e.verdictOnly {
				f.res.Changes = f.changesAhead.take()
				f.changesAhead = nil
				if f.res.Changes == nil {
					f.res.Changes = e.computeChanges(ctx, f.changesIn())
				}
			}
			var note string
			f.res.Report, note = e.report(ctx, f.res.Verdict, f.res.Changes)
			return note, nil
		}},
		{PhaseFinalizeBootEntry, func(ctx context.Context) (note string, err error) {
			var generation int
			generation, note, err = e.finalizeBootEntry(ctx, *f.res, f.toplevel, f.lock, f.failed)
			if err == nil {
				f.res.Generation = generation
				f.rootReleased = generation > 0
			}
			return note, err
		}},
		{PhaseConclude, func(context.Context) (string, error) { return conclude(f.failed) }},
	}
}

// abandonAhead stops and waits for the reads started beside a phase that no later
// phase took, because the run stops.
func (f *flow) abandonAhead() {
	f.ahead.abandon()
	f.ahead = nil
	f.changesAhead.abandon()
	f.changesAhead = nil
}

// changesIn is what the summary of changes is made of, all known since the snapshot.
func (f *flow) changesIn() changesIn {
	return changesIn{previous: f.res.PreviousSystem, toplevel: f.toplevel, copied: f.res.Copy, previousUnits: f.before.unitDigests, notRestarted: f.notRestarted}
}

func (f *flow) setToplevel(toplevel string) {
	if toplevel != "" {
		f.toplevel, f.res.Toplevel = toplevel, toplevel
	}
}

// settled records what became of this run's armed revert, once the node said.
func (f *flow) settled(s revertSettled) {
	if s.final {
		f.armed = nil
	}
	if s.reverted {
		f.res.RunningSystem, f.res.BootReverted, f.res.SelfReverted = s.running, true, true
	}
}

// judging is what the watch and the classify phase judge the node on.
func (f *flow) judging() judgeIn {
	jobs := f.watched.jobs
	if f.watched.samples == nil {
		jobs = f.before.jobs // the watch has not run yet
	}
	return judgeIn{toplevel: f.toplevel, closure: f.closure, failedBefore: f.before.failedBefore, jobs: jobs,
		restarted: f.restarted, budgets: f.budgets, samples: f.watched.samples}
}

func execute(ctx context.Context, e *runEnv) (_ *Result, runErr error) {
	f := &flow{res: &Result{Node: e.o.Node}, checks: judge.NewCheckRun(e.o.Checks, e.o.Probes)}
	e.warnings = &f.res.Warnings
	if e.verdictOnly && e.o.Toplevel != "" {
		if !validStorePath(e.o.Toplevel) {
			return f.res, e.asDeployError(PhaseBuild, withHint(fmt.Errorf("toplevel %q is not a clean absolute store path", e.o.Toplevel),
				"set toplevel to the store path of the system to judge (/nix/store/<hash>-<name>)"))
		}
		f.setToplevel(e.o.Toplevel)
	}
	for _, s := range e.steps(f) {
		if e.verdictOnly && skippedInVerdictOnly[s.name] {
			f.res.Phases = append(f.res.Phases, PhaseTiming{Name: s.name, Note: skippedInVerdictOnlyNote})
			continue
		}
		if e.readOnly && s.name == PhaseRestartFailedUnits {
			f.res.Phases = append(f.res.Phases, PhaseTiming{Name: s.name, Note: skippedReadOnlyNote})
			continue
		}
		if f.switched.bootOnly && skippedWhenBootOnly[s.name] {
			f.res.Phases = append(f.res.Phases, PhaseTiming{Name: s.name, Note: skippedWhenBootOnlyNote})
			continue
		}
		err := e.phase(ctx, f, s)
		if err == nil {
			// Before each next phase: a run whose lock another run took stops here,
			// before it switches, restarts or writes the boot entry; so does one whose
			// lock vanished with the node's /run (a reboot it did not ask for).
			if lost := f.lock.lostError(e.o.Node); lost != nil {
				err = e.asDeployError(s.name, lost)
			} else if gone := f.lock.vanishedError(e.o.Node); gone != nil {
				err = e.asDeployError(s.name, gone)
			}
		}
		if s.name == PhaseLockNode && f.lock != nil {
			// Every path that took the lock releases it: also a lock phase that took it
			// and then failed to settle what earlier runs left (an interrupt while it
			// waited, a transport fault), or the heartbeat would keep it fresh for
			// the life of the process.
			defer func() {
				e.restoreIfUnreachable(ctx, f.lock, f.switched.started, f.res, runErr)
				if f.pushed && !f.rootReleased && f.lock.lostError(e.o.Node) == nil {
					e.releasePushedRoot(ctx, f.toplevel)
				}
				e.unlockNode(ctx, f.lock)
				if lost := f.lock.lostError(e.o.Node); lost != nil && runErr == nil {
					runErr = e.asDeployError(PhaseConclude, lost)
				}
			}()
		}
		if err != nil {
			// Nothing this run started beside its phases is left on the node when it
			// unlocks (the deferred unlock runs after this return).
			f.abandonAhead()
			// A run that stops here (a lost lock) still waits for its confirming login,
			// whose verdict comes first, as when the login ran in its own phase.
			if loginErr := e.awaitLogin(ctx, f); loginErr != nil {
				err = loginErr
			}
			return f.res, err
		}
	}
	return f.res, nil
}

// phase times, logs and records one phase, and turns its error into a DeployError.
func (e *runEnv) phase(ctx context.Context, f *flow, s step) error {
	start := e.o.Clock.Now()
	e.log(ctx, LevelInfo, s.name, "phase started", nil)
	note, err := s.body(ctx)
	if f.login != nil && (err != nil || ctx.Err() != nil) {
		// The run stops while its confirming login is out: wait for what the login
		// proved; its verdict comes first, as when it ran before the later phases.
		if loginErr := e.awaitLogin(ctx, f); loginErr != nil {
			err = loginErr
		}
	}
	if err == nil {
		err = ctx.Err()
		if err != nil && f.armed != nil {
			// Interrupted between the switch and the confirming login: the revert
			// is settled all the same, on a context of its own.
			var s revertSettled
			s, err = e.settleAfterFailure(ctx, f.armed, fmt.Errorf("interrupted after the switch: %w", err), "apply again: the next plan deploys the configuration again")
			f.settled(s)
		}
	}
	elapsed := e.o.Clock.Now().Sub(start)
	if err != nil {
		deployErr := e.asDeployError(s.name, err)
		if note == "" {
			note = "failed: " + deployErr.Err.Error()
		}
		f.res.Phases = append(f.res.Phases, PhaseTiming{Name: s.name, Duration: elapsed, Note: note})
		e.log(ctx, LevelWarn, s.name, "phase failed", map[string]any{"duration": elapsed.String(), "error": deployErr.Error()})
		return deployErr
	}
	f.res.Phases = append(f.res.Phases, PhaseTiming{Name: s.name, Duration: elapsed, Note: note})
	e.log(ctx, LevelInfo, s.name, "phase finished", map[string]any{"duration": elapsed.String(), "note": note})
	return nil
}

// awaitLogin waits for the confirming login dialled when the switch returned (nil
// when there is none or it was waited for already) and records what became of the
// revert. Its error is the detect-unconfirmed-switch phase's: then nothing the run read
// after the switch counts, as when the login ran before those reads.
func (e *runEnv) awaitLogin(ctx context.Context, f *flow) error {
	l := f.login
	if l == nil {
		return nil
	}
	<-l.done
	f.login = nil
	if l.err != nil {
		f.res.Confirmed, f.res.RunningSystem = false, ""
		f.settled(l.settled)
		return e.asDeployError(PhaseDetectUnconfirmed, l.err)
	}
	f.settled(l.settled)
	if l.note == "" {
		return nil
	}
	for i := range f.res.Phases {
		if f.res.Phases[i].Name == PhaseDetectUnconfirmed {
			f.res.Phases[i].Note = joinNotes(f.res.Phases[i].Note, l.note)
		}
	}
	e.log(ctx, LevelInfo, PhaseDetectUnconfirmed, "the confirming login: "+l.note, nil)
	return nil
}

func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
