package deploybody

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// The node-side revert (SSH): a switch that leaves the node refusing new logins must
// not strand it. Before the switch the body arms a revert on the node; once the switch
// has ended it logs in again over a new connection, which disarms it. If no new login
// disarms it within timings.confirm_timeout of the switch's end, counted by the node,
// the node switches itself back to the system it ran before (and its boot entry), and
// the run fails saying so. A node with a failed unit accepts logins, so it is disarmed
// and keeps its new boot entry. What decides, and when, is the node's guard
// (revertguard.go); the deployer only asks and reports what the node answered.

// SelfReverter is implemented by transports that can arm the node-side revert.
type SelfReverter interface {
	// CanSelfRevert reports whether this transport can (it must be able to open a
	// new connection to the node).
	CanSelfRevert() bool
	// ArmRevert arms arm at the next Switch, in the same round trip that starts it.
	ArmRevert(arm RevertArm)
	// RunFresh is Run over a new connection (a new login), closed afterwards.
	RunFresh(ctx context.Context, argv []string, opts RunOptions) (RunResult, error)
}

// RevertArm is what the node needs to arm a revert (RevertGuardScript's arm).
type RevertArm struct {
	// Unit names the revert's transient unit (RevertUnitPrefix + a random suffix).
	Unit string
	// Previous is the system to go back to; Guarded the one the switch activates.
	Previous, Guarded string
	// Token is the arming run's lock token: the revert begins only while the lock is
	// free or still this run's.
	Token string
	// Confirm is the window after the switch's end.
	Confirm time.Duration
}

// ErrSelfReverted: the node put itself back on its previous system.
var ErrSelfReverted = errors.New("the node reverted to its previous system by itself")

// ErrLockedOut: after the switch the node accepted no new login, and reverted.
var ErrLockedOut = errors.New("the node locked the deployer out after the switch")

// armedRevert is this run's armed revert, not yet settled.
type armedRevert struct {
	sr  SelfReverter
	arm RevertArm
}

// revertSettled is what became of this run's armed revert, as far as the node said.
type revertSettled struct {
	// final is true when nothing changes its fate any more: it is no longer armed.
	final bool
	// reverted is true when the node switched back (or began to); running is then
	// what it runs.
	reverted bool
	running  string
}

// armRevert arms the revert before the switch when the transport can, the run asks for
// it and there is a previous system to go back to. It returns nil when it armed none.
func (e *runEnv) armRevert(toplevel, previous string, lock *nodeLock) *armedRevert {
	sr, ok := e.t.(SelfReverter)
	if !e.o.SelfRevert || !ok || !sr.CanSelfRevert() || previous == "" || previous == toplevel {
		return nil
	}
	arm := RevertArm{Unit: records.RevertUnitPrefix + newToken()[:12], Previous: previous, Guarded: toplevel, Confirm: e.o.Timings.ConfirmTimeout, Token: lock.token()}
	sr.ArmRevert(arm)
	return &armedRevert{sr: sr, arm: arm}
}

// settleOwnRevert asks the node, over new logins and on a context of its own (the
// run's may be done), to disarm this run's revert, until the node answers what became
// of it. "switching" (the switch still runs) and "begun" are waited out. It tries for
// confirm_timeout plus node_wait on the body's clock; the window itself is the node's.
// answered is false when no login got an answer at all; last is the last login error.
func (e *runEnv) settleOwnRevert(ctx context.Context, armed *armedRevert) (ans records.RevertAnswer, answered bool, attempts int, last error) {
	ctx = context.WithoutCancel(ctx)
	limit := e.o.Clock.Now().Add(e.o.Timings.ConfirmTimeout + e.o.Timings.NodeWait)
	for attempts = 1; attempts <= maxSamples; attempts++ {
		out, err := e.revertGuard(ctx, armed.sr, "disarm", armed.arm.Unit)
		if err == nil {
			ans, answered = records.ParseRevertAnswer(out), true
			if ans.Final() {
				break
			}
		} else {
			last = err
			e.log(ctx, LevelWarn, PhaseDetectUnconfirmed, "no new login yet", map[string]any{"attempt": attempts, "error": err.Error()})
		}
		if !e.o.Clock.Now().Before(limit) {
			break
		}
		if err := e.sleep(ctx, e.o.Timings.SampleInterval); err != nil {
			break
		}
	}
	return ans, answered, attempts, last
}

// confirmingLogin is the new login that settles the revert after a switch that
// returned (confirmNewLogin), run beside the phases after the switch so that its
// handshake (a new TCP connection, key exchange, authentication: about 150 ms over
// SSH) is off the run's critical path. It only has to be accepted within the node's
// confirm window, which the node counts from the switch's end.
//
// Why it is dialled when Switch returns, and not when the switch starts: the login must
// prove that the system the switch activated accepts new logins. A connection set up
// before or during the activation is served by what ran before it: sshd forks a child
// per connection, and that child (with the old configuration, host keys, users and
// PAM stack) survives a restart of the listening sshd, so a login that completes before
// the activation changed sshd proves nothing about the new system, and one whose
// handshake straddles the activation proves little more. Switch returns only once the
// switch has ended on the node (its result was read, after a reconnect if need be), so
// every byte of this login's handshake is sent after the activation, exactly as when
// the login was dialled after the switch result was read: what it proves is unchanged.
// The node checks it as well: the guard answers "switching", never "disarmed", while
// the switch unit still runs.
//
// What it decides is decided as before: the run waits for it (awaitLogin) before
// anything that changes the node again (a unit restart), before the watch, whenever
// the run stops early, and when the switch did not take; its error is the
// detect-unconfirmed-switch phase's and comes before any later phase's. It runs on the
// run's context for the "interrupted" verdict only: its attempts run on a context of
// their own (settleOwnRevert), so a Ctrl-C during it still settles the revert over a
// new login, or, when no login gets through, leaves it armed to fire, as before.
type confirmingLogin struct {
	done    chan struct{}
	note    string
	settled revertSettled
	err     error
}

// dialConfirmingLogin starts the confirming login of armed (nil when none is armed).
func (e *runEnv) dialConfirmingLogin(ctx context.Context, armed *armedRevert) *confirmingLogin {
	if armed == nil {
		return nil
	}
	l := &confirmingLogin{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.note, l.settled, l.err = e.confirmNewLogin(ctx, armed)
	}()
	return l
}

// confirmNewLogin settles the revert after a switch that returned. It returns a note
// for the phase, or the error that says what the node did. A run interrupted here
// (Ctrl-C, its time limit) still settles the revert on a context of its own, and
// then fails saying it was interrupted and what the node runs and will run.
func (e *runEnv) confirmNewLogin(ctx context.Context, armed *armedRevert) (string, revertSettled, error) {
	if armed == nil {
		return "", revertSettled{}, nil
	}
	start := e.o.Clock.Now()
	prev := armed.arm.Previous
	ans, answered, attempts, last := e.settleOwnRevert(ctx, armed)
	settled := revertSettled{final: ans.Final()}
	took := e.o.Clock.Now().Sub(start).Round(time.Millisecond)
	interrupted := ctx.Err()
	switch ans.State {
	case records.RevertDisarmed:
		const disarmed = "a new login disarmed the revert before it began"
		if interrupted != nil {
			return "", settled, withHint(fmt.Errorf("interrupted (%w) while confirming the switch; %s, so the node keeps running %s, which no verdict judged", interrupted, disarmed, describeSystem(ans.Running)),
				"apply again: the next plan deploys it again and judges it")
		}
		return fmt.Sprintf("%s (%s, attempt %d)", disarmed, took, attempts), settled, nil
	case records.RevertReverted, records.RevertBegun, records.RevertDied:
		done := reverted(ans, prev, &settled)
		return "", settled, e.revertedError(done, answered && last == nil, interrupted, last)
	case records.RevertBroken:
		// The new login got through, so the node accepts logins; but the revert could
		// not have saved it had it not.
		e.warn(ctx, PhaseDetectUnconfirmed, fmt.Sprintf("the lock-out revert could not run on the node (%s): had the new system refused new logins, nothing would have switched it back", ans.Detail))
		note := "a new login was accepted; the revert could not run: " + ans.Detail
		if interrupted != nil {
			return "", settled, fmt.Errorf("interrupted (%w) while confirming the switch; %s; the node runs %s", interrupted, note, describeSystem(ans.Running))
		}
		return note, settled, nil
	case records.RevertStoodDown, records.RevertGone:
		// The revert will not fire: the node does not run the system it guarded, or a
		// later run took the node (the lock check after this phase says so).
		why := strings.TrimSpace(ans.State + " " + ans.Detail)
		if why == "" {
			why = "unknown"
		}
		note := fmt.Sprintf("the revert stood down: %s", why)
		if interrupted != nil {
			return "", settled, fmt.Errorf("interrupted (%w) while confirming the switch; %s; the node runs %s", interrupted, note, describeSystem(ans.Running))
		}
		return note, settled, nil
	}
	// No final answer within the bound.
	pending := fmt.Sprintf("unless a later run takes the node's lock first, the node switches back to %s by itself %s after the switch ended", prev, e.o.Timings.ConfirmTimeout)
	if interrupted != nil {
		return "", settled, withHint(fmt.Errorf("interrupted (%w) while confirming the switch, and no new login was answered (last attempt: %v): %s", interrupted, last, pending),
			"apply again: the next run deals with the armed revert and deploys the configuration again")
	}
	if answered {
		return "", settled, withHint(fmt.Errorf("the node did not settle the armed revert (it says %q): %s", ans.State, pending), "check the node on its console, then apply again")
	}
	return "", settled, withHint(fmt.Errorf("%w: no new login was accepted within %s (last attempt: %v), and none afterwards either",
		ErrLockedOut, e.o.Timings.ConfirmTimeout+e.o.Timings.NodeWait, last),
		fmt.Sprintf("the node should have switched back to %s by itself: check it on its console", prev))
}

// reverted records in settled that the node reverted (or began to) and says how: its
// confirm window ended before a new login reached it. previous is the system it
// reverts to.
func reverted(ans records.RevertAnswer, previous string, settled *revertSettled) string {
	settled.reverted, settled.running = true, ans.Running
	switch ans.State {
	case records.RevertBegun:
		return fmt.Sprintf("it began to switch back to %s and was still at it when this run stopped waiting", previous)
	case records.RevertDied:
		return fmt.Sprintf("it began to switch back to %s, and its revert unit stopped before it ended (its time limit, out of memory, or systemctl stop); the node runs %s", previous, describeSystem(ans.Running))
	}
	done := fmt.Sprintf("it put itself back on %s (generation %d)", describeSystem(ans.Running), ans.Generation())
	if ans.Detail != "" && ans.Detail != "0" {
		done += fmt.Sprintf("; its switch-to-configuration exited %s", ans.Detail)
	}
	return done
}

// revertedError is the error of a run whose node reverted (done says how). loginLate
// says a login worked but came too late (not a lock-out).
func (e *runEnv) revertedError(done string, loginLate bool, interrupted, last error) error {
	window := e.o.Timings.ConfirmTimeout
	switch {
	case interrupted != nil:
		return withHint(fmt.Errorf("interrupted (%w) while confirming the switch; the node's confirm window (%s) ended first and %s: %w", interrupted, window, done, ErrSelfReverted),
			"apply again: the node runs and boots its previous system, and the next plan deploys the configuration again")
	case loginLate:
		return withHint(fmt.Errorf("the new login reached the node only after its confirm window (%s) had ended; %s: %w", window, done, ErrSelfReverted),
			"the node runs and boots its previous system; if logins are slow to reach it, raise timings.confirm_timeout and apply again")
	}
	return withHint(fmt.Errorf("%w: no new login was accepted within %s of the switch (last attempt: %v); %s: %w", ErrLockedOut, window, last, done, ErrSelfReverted),
		"the new system stops new logins (sshd, its port, a firewall or the network): fix that before applying again; the node runs and boots its previous system")
}

// settleAfterFailure settles the revert of a run that failed or was interrupted in or
// right after its switch: the switch may go on on the node, so the guard waits for its
// end before a new login disarms. It returns switchErr with what became of the revert.
func (e *runEnv) settleAfterFailure(ctx context.Context, armed *armedRevert, switchErr error, hint string) (revertSettled, error) {
	if armed == nil {
		return revertSettled{}, withHint(switchErr, hint)
	}
	prev := armed.arm.Previous
	ans, _, _, _ := e.settleOwnRevert(ctx, armed)
	settled := revertSettled{final: ans.Final()}
	switch ans.State {
	case records.RevertDisarmed:
		// RunningSystem stays unset: the run never read it itself, and the provider
		// takes a set one for a judged system.
		return settled, withHint(fmt.Errorf("%w; after the switch ended a new login disarmed the revert before it began: the node runs %s", switchErr, describeSystem(ans.Running)), hint)
	case records.RevertReverted, records.RevertBegun, records.RevertDied:
		done := reverted(ans, prev, &settled)
		return settled, withHint(fmt.Errorf("%w; the node's confirm window (%s) ended before a new login reached it, and %s: %w", switchErr, e.o.Timings.ConfirmTimeout, done, ErrSelfReverted),
			"the node runs and boots its previous system; apply again")
	case records.RevertStoodDown, records.RevertGone, records.RevertBroken:
		return settled, withHint(fmt.Errorf("%w; the revert stood down (%s); the node runs %s", switchErr, strings.TrimSpace(ans.State+" "+ans.Detail), describeSystem(ans.Running)), hint)
	}
	return settled, withHint(switchErr, fmt.Sprintf("%s; a revert is still armed on the node: unless a later run takes the node's lock first, it switches back to %s by itself %s after the switch ends (the next apply deals with it)",
		hint, prev, e.o.Timings.ConfirmTimeout))
}
