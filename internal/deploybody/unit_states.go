package deploybody

import (
	"context"
	"errors"
	"fmt"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// The phase that snapshots unit states before the switch, so the verdict can tell what the switch changed.

// snapshot is what the node looked like before the switch (in verdict-only mode:
// before the pass's restarts).
type snapshot struct {
	// running is the system the node ran.
	running string
	// toplevel is the system a verdict-only pass without a toplevel judges (the one
	// the node runs); "" otherwise.
	toplevel string
	// failedBefore is the set of failed units; nil when unread.
	failedBefore map[string]bool
	// jobs are the jobs seen so far (a job's age counts from here).
	jobs judge.JobTracker
	// unitDigests are the running system's unit files (name → sha256), read in a
	// deploy for the summary of changes; nil when unread.
	unitDigests map[string]string
}

// snapshotUnitStates reads the running system, the failed units and the job queue in
// one round trip (in a deploy also the digests of the running system's unit files).
// ahead is the same read taken beside the push (nil when it was not).
func (e *runEnv) snapshotUnitStates(ctx context.Context, toplevel string, ahead *snapshotAhead) (snapshot, string, error) {
	var snap snapshot
	cmds := e.snapshotCommands()
	answers, err := ahead.take()
	if err != nil || answers == nil || commandNotFound(answers) {
		// Not read beside the push, or that read met a transport fault, or a tool it
		// needs is not on the node's own path (the closure's is complete only after
		// the push): read now, as the phase always did, so a fault fails here and
		// nowhere else and the answers are the ones this phase always got.
		answers, err = e.remoteBatch(ctx, toplevel, cmds...)
	}
	if err != nil {
		return snap, "", withHint(fmt.Errorf("reading /run/current-system and the unit states: %w", err), "")
	}
	if len(answers) > 3 {
		snap.unitDigests, _ = parseUnitDigests(answers[3])
	}
	snap.running = runningSystem(answers[0])
	if e.verdictOnly {
		switch {
		case toplevel == "" && snap.running == "":
			return snap, "", withHint(errors.New("no toplevel was given and the node runs no NixOS system (/run/current-system is missing)"), "set toplevel to the system the node should run")
		case toplevel == "":
			snap.toplevel = snap.running
		case snap.running != toplevel:
			msg := fmt.Sprintf("node %s runs %s, not the toplevel %s this verdict judges", e.o.Node, describeSystem(snap.running), toplevel)
			if e.o.Strict {
				return snap, "", withHint(errors.New(msg),
					"deploy that toplevel first (wire toplevel to the node switch's toplevel so the pass runs after it), or set strict = false to judge its units on the system the node runs")
			}
			e.warn(ctx, PhaseSnapshotUnitStates, msg+"; its units are judged on the system the node runs (strict = false)")
		}
	}
	failed, reason := e.parseFailed(ctx, answers[1])
	if reason != "" {
		e.warn(ctx, PhaseSnapshotUnitStates, "unit states before the switch are unread ("+reason+"): failed units cannot be told new or old")
		return snap, "unread: " + reason, nil
	}
	snap.failedBefore = map[string]bool{}
	for _, u := range failed {
		snap.failedBefore[u] = true
	}
	if jobs, reason := parseJobs(answers[2]); reason == "" {
		// A job's age counts from this phase, also when it was read beside the push:
		// as long as before, however long the push took.
		snap.jobs.Observe(jobs, e.o.Clock.Now())
	}
	return snap, fmt.Sprintf("%d failed units before", len(failed)), nil
}

// snapshotCommands are the snapshot's reads, in the order its answers are read.
func (e *runEnv) snapshotCommands() [][]string {
	cmds := [][]string{cmdReadRunning, cmdListFailed, cmdListJobs}
	if !e.verdictOnly {
		cmds = append(cmds, cmdUnitDigests)
	}
	return cmds
}

// snapshotBesidePush says whether the snapshot's reads may be taken while the closure
// is pushed, on a session of their own, instead of after the push (one round trip off
// the deploy's critical path). They may when nothing between the two instants can
// change a unit: the push only adds store paths (nix-store --serve --write as root, no
// daemon, no unit), and the lock is already held, so no other run switches or
// restarts. A secret chain wait sits between push and snapshot and its members do
// change (they start, finish or fail while it waits), so with a secret chain the
// snapshot stays after the wait, where it records what the chain left failed.
func (e *runEnv) snapshotBesidePush() bool {
	return !e.verdictOnly && len(e.o.SecretChain) == 0
}

// snapshotAhead is the snapshot's read taken beside the push: its answers, or the
// transport fault that stopped it.
type snapshotAhead struct {
	done    chan struct{}
	cancel  context.CancelFunc
	answers []RunResult
	err     error
}

// startSnapshotAhead starts the snapshot's read on a session of its own. It reads
// only (the running system, the failed units, the job queue, the unit files' digests).
func (e *runEnv) startSnapshotAhead(ctx context.Context, toplevel string) *snapshotAhead {
	ctx, cancel := context.WithCancel(ctx)
	a := &snapshotAhead{done: make(chan struct{}), cancel: cancel}
	cmds := e.snapshotCommands()
	go func() {
		defer close(a.done)
		a.answers, a.err = e.remoteBatch(ctx, toplevel, cmds...)
	}()
	return a
}

// take waits for the read and returns it (nil answers when there was none).
func (a *snapshotAhead) take() ([]RunResult, error) {
	if a == nil {
		return nil, nil
	}
	<-a.done
	a.cancel()
	return a.answers, a.err
}

// abandon stops the read and waits for it: a run that stops before its snapshot has
// nothing of it still out on the node when it unlocks.
func (a *snapshotAhead) abandon() {
	if a != nil {
		a.cancel()
		<-a.done
	}
}

// commandNotFound says whether a shell could not find one of the commands (exit 127).
func commandNotFound(answers []RunResult) bool {
	for _, a := range answers {
		if a.ExitCode == 127 {
			return true
		}
	}
	return false
}
