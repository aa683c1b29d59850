package deploybody

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The node-side revert (SSH): a switch that leaves the node refusing new logins must
// not strand it. Before the switch the body arms a revert on the node; right after the
// switch it logs in again over a new connection, which disarms it. If no new login is
// accepted within timings.confirm_timeout, the node switches itself back to the system
// it ran before (and its boot entry), and the run fails saying so. A node with a failed
// unit accepts logins, so it is disarmed and keeps its new boot entry.

// SelfReverter is implemented by transports that can arm the node-side revert.
type SelfReverter interface {
	// CanSelfRevert reports whether this transport can (it must be able to open a
	// new connection to the node).
	CanSelfRevert() bool
	// ArmRevert arms a revert to previous at the next Switch: confirm after the switch
	// ends, the node puts itself back unless DisarmRevert ran.
	ArmRevert(previous string, confirm time.Duration)
	// DisarmRevert logs in over a new connection and disarms; it wraps
	// ErrSelfReverted when the node had already put itself back.
	DisarmRevert(ctx context.Context) error
	// RevertOutcome asks over a new connection whether the revert fired and what the
	// node runs now.
	RevertOutcome(ctx context.Context) (reverted bool, running string, generation int, err error)
}

// ErrSelfReverted: the node put itself back on its previous system.
var ErrSelfReverted = errors.New("the node reverted to its previous system by itself")

// ErrLockedOut: after the switch the node accepted no new login, and reverted.
var ErrLockedOut = errors.New("the node locked the deployer out after the switch")

// armRevert arms the revert before the switch when the transport can, the run asks for
// it and there is a previous system to go back to.
func (r *run) armRevert() {
	sr, ok := r.t.(SelfReverter)
	prev := r.res.PreviousSystem
	if !r.o.SelfRevert || !ok || !sr.CanSelfRevert() || prev == "" || prev == r.toplevel {
		return
	}
	sr.ArmRevert(prev, r.o.Timings.ConfirmTimeout)
	r.armed = sr
}

// armedHint is added to the hint of a failure while the revert is armed and not
// disarmed: the operator must know the node may still switch back by itself.
func (r *run) armedHint() string {
	if r.armed == nil {
		return ""
	}
	return fmt.Sprintf("; a revert is armed on the node: unless a new login confirms within %s of the switch, it switches back to %s by itself",
		r.o.Timings.ConfirmTimeout, r.res.PreviousSystem)
}

// confirmNewLogin disarms the revert over new connections, retried until the confirm
// window is nearly over (sshd may restart during an activation). It returns a note for
// the phase, or the lock-out error once the node has put itself back.
func (r *run) confirmNewLogin() (string, error) {
	if r.armed == nil {
		return "", nil
	}
	start := r.o.Clock.Now()
	deadline := r.switchEnded.Add(r.o.Timings.ConfirmTimeout - time.Second)
	var last error
	for attempt := 1; attempt <= maxSamples; attempt++ {
		ctx, cancel := context.WithDeadline(r.ctx, deadline.Add(time.Second))
		err := r.armed.DisarmRevert(ctx)
		cancel()
		if err == nil {
			r.armed = nil
			return fmt.Sprintf("a new login disarmed the revert (%s, attempt %d)", r.o.Clock.Now().Sub(start).Round(time.Millisecond), attempt), nil
		}
		last = err
		if errors.Is(err, ErrSelfReverted) || r.ctx.Err() != nil || !r.o.Clock.Now().Before(deadline) {
			break
		}
		r.log(LevelWarn, PhaseDetectUnconfirmed, "no new login yet", map[string]any{"attempt": attempt, "error": err.Error()})
		if err := r.o.Clock.Sleep(r.ctx, min(r.o.Timings.SampleInterval, deadline.Sub(r.o.Clock.Now()))); err != nil {
			break
		}
	}
	return "", r.lockedOut(last)
}

// lockedOut waits for the node to put itself back (bounded by the confirm window and
// node_wait) and says what it runs now.
func (r *run) lockedOut(last error) error {
	sr := r.armed
	r.armed = nil
	prev := r.res.PreviousSystem
	limit := r.o.Clock.Now().Add(r.o.Timings.ConfirmTimeout + r.o.Timings.NodeWait)
	for i := 0; i < maxSamples && r.o.Clock.Now().Before(limit); i++ {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 15*time.Second)
		reverted, running, gen, err := sr.RevertOutcome(ctx)
		cancel()
		if err == nil && reverted {
			r.res.RunningSystem = running
			r.res.BootReverted = true
			r.res.SelfReverted = true
			return withHint(fmt.Errorf("%w: no new login was accepted within %s of the switch (last attempt: %v); it put itself back on %s (generation %d) by itself: %w",
				ErrLockedOut, r.o.Timings.ConfirmTimeout, last, running, gen, ErrSelfReverted),
				"the new system stops new logins (sshd, its port, a firewall or the network): fix that before applying again; the node runs and boots its previous system")
		}
		if err := r.o.Clock.Sleep(context.WithoutCancel(r.ctx), r.o.Timings.SampleInterval); err != nil {
			break
		}
	}
	return withHint(fmt.Errorf("%w: no new login was accepted within %s of the switch (last attempt: %v), and none afterwards either",
		ErrLockedOut, r.o.Timings.ConfirmTimeout, last),
		fmt.Sprintf("the node should have switched back to %s by itself: check it on its console", prev))
}
