package deploybody

// The rollback of a node the switch left unreachable (the Incus snapshot guard), run by
// the body at the end of a deploy: still under the node lock, and never by a run that
// lost it. Outside the lock a restore could roll back what a later run deployed, or
// stop the node in the middle of that run's switch.

import (
	"context"
	"fmt"
	"time"
)

// Restorer is implemented by a transport that can put a node the switch left
// unreachable back on its rollback point (the Incus snapshot guard).
type Restorer interface {
	// NeedsRestore tells whether the run (res, runErr) left the node unreachable after
	// its switch; it may probe the node for up to nodeWait, every interval.
	NeedsRestore(ctx context.Context, res *Result, runErr error, nodeWait, interval time.Duration) bool
	// Restore puts the node back on the rollback point taken before the switch. The
	// transport keeps what happened for its owner to report.
	Restore(ctx context.Context) error
}

// RestoreResumer is implemented by a transport whose node an earlier run's restore may
// have left unfinished (the Incus snapshot guard): the body asks it to finish that
// restore before it waits for the node, which a stopped instance would never answer.
type RestoreResumer interface {
	// ResumeRestore finishes an unfinished restore and says what it did ("" when there
	// was none).
	ResumeRestore(ctx context.Context) (string, error)
}

// PendingRestoreReader is implemented by a transport whose node an earlier run's
// restore may have left unfinished (the Incus snapshot guard's journal): an instance
// that runs the state a cut-off restore kept aside answers like any other, and one the
// restore stopped does not answer; only the transport's own records tell.
type PendingRestoreReader interface {
	// PendingRestore describes the latest unfinished restore of the node and what the
	// next deploy does about it ("" when there is none).
	PendingRestore(ctx context.Context) (string, error)
}

// JudgeUnfinishedRestore is the drift decision's question for a node an earlier run's
// restore may have left unfinished, asked by both front ends when a read of the node
// failed (readErr) or found it running another system than q.Known: the provider's
// Read (then an unfinished deploy, which the next plan deploys again) and the command's
// resume (then not resumed). It returns the fact in the words both show, naming the
// node; "" when the node runs q.Known, the transport keeps no such records, or they
// tell of no unfinished restore (or cannot be read: the read's own error says enough).
func JudgeUnfinishedRestore(ctx context.Context, t Transport, q DriftQuestion, s NodeSystem, readErr error) string {
	if readErr == nil && s.Running == q.Known {
		return ""
	}
	r, ok := t.(PendingRestoreReader)
	if !ok {
		return ""
	}
	what, err := r.PendingRestore(ctx)
	if err != nil || what == "" {
		return ""
	}
	if readErr != nil {
		return fmt.Sprintf("Node %s does not answer: %s.", q.Node, what)
	}
	return fmt.Sprintf("Node %s runs %s: %s.", q.Node, DescribeProfile(s.Running), what)
}

// resumeRestore runs before the wait for the node: the node lock lives on the node, so
// an instance stopped by a cut-off restore has none to take. The transport tells a
// restore still at work from a cut-off one (see its ResumeRestore).
func (e *runEnv) resumeRestore(ctx context.Context) error {
	r, ok := e.t.(RestoreResumer)
	if !ok || e.verdictOnly {
		return nil
	}
	did, err := r.ResumeRestore(ctx)
	if err != nil {
		return withHint(fmt.Errorf("an earlier run's restore of the node's rollback point did not finish, and finishing it failed: %w", err),
			"see the error above; `incus snapshot list` shows the snapshot fediversity-restoring-<time>-from-<set>, whose name says which set was being restored")
	}
	if did != "" {
		e.warn(ctx, PhaseWaitForNode, did)
	}
	return nil
}

// restoreIfUnreachable runs at the end of a deploy that took the node lock, before the
// lock is released; res and runErr are the run's outcome, switchStarted whether it
// started a switch. It uses a context of its own: the run's may be done (a time limit,
// the operator) and the node still needs its rollback.
func (e *runEnv) restoreIfUnreachable(ctx context.Context, lock *nodeLock, switchStarted bool, res *Result, runErr error) {
	g, ok := e.t.(Restorer)
	if !ok || e.verdictOnly {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if lock.lostError(e.o.Node) != nil {
		e.noRestoreLockLost(ctx, switchStarted)
		return
	}
	if !g.NeedsRestore(ctx, res, runErr, e.o.Timings.NodeWait, e.o.Timings.SampleInterval) {
		return
	}
	// The heartbeat's answer may be old: ask the node once more. An unreachable node
	// does not answer (that is why it is restored); only a "lost" answer stops it. A
	// lock that vanished does not: the heartbeat took it back (a node that never came
	// back from this run's own reboot answered "gone" while its bricked boot emptied
	// /run, before it powered off), and no other run took it.
	lctx, cancel := context.WithTimeout(ctx, lockCallLimit)
	defer cancel()
	_ = e.confirmLock(lctx, lock)
	if lock.lostError(e.o.Node) != nil {
		e.noRestoreLockLost(ctx, switchStarted)
		return
	}
	e.log(ctx, LevelWarn, PhaseConclude, "the node is unreachable after the switch: restoring its rollback point under the node lock", nil)
	if err := g.Restore(ctx); err != nil {
		e.log(ctx, LevelWarn, PhaseConclude, "restoring the rollback point failed", map[string]any{"error": err.Error()})
	}
}

// noRestoreLockLost says why a run that switched and then lost its lock leaves the
// node alone: another run took the node while this one was cut off, it owns the node
// now, and a rollback would undo (or cut into) what that run deploys.
func (e *runEnv) noRestoreLockLost(ctx context.Context, switchStarted bool) {
	if !switchStarted {
		return
	}
	e.warn(ctx, PhaseConclude, "this run lost the node's lock, so it does not restore the node's rollback point, whatever the node's state: the run that took the lock owns the node now")
}
