package deploybody

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// The fake node's side of the lock-out revert: it plays RevertGuardScript (whose real
// behaviour TestRevertGuardScript proves with sh and flock, and the lab tests on real
// nodes) on the fake clock, so the engine's self-revert path runs without real time.
// Faults a real node cannot give on demand: a new login refused for a while, a new
// login that reaches the node late, an interrupt at a chosen attempt, a switch that
// goes on after the session lost it.

// fakeRevert is one armed revert on the fake node.
type fakeRevert struct {
	arm   RevertArm
	state string // armed, begun, reverted <rc>, stood-down <why>
	// switchEnds is when the guarded switch leaves its result (the window starts).
	switchEnds time.Time
	begunAt    time.Time
	// dies: once begun, its unit stops before it ends (its time limit, OOM, systemctl
	// stop), leaving the state "begun".
	dies bool
}

// revertNode is a fake node whose transport can arm the revert (SSH-like).
type revertNode struct {
	*fakeNode
}

func (n revertNode) CanSelfRevert() bool { return true }

func (n revertNode) ArmRevert(arm RevertArm) { n.armNext = &arm }

// The confirming login runs beside the phases after the switch: every call into the
// node holds the clock's lock, so the node and its time see one order of events.

func (n revertNode) Reach(ctx context.Context) error {
	defer n.clock.hold()()
	return n.fakeNode.Reach(ctx)
}

func (n revertNode) Run(ctx context.Context, argv []string, opts RunOptions) (RunResult, error) {
	defer n.clock.hold()()
	return n.fakeNode.Run(ctx, argv, opts)
}

func (n revertNode) CopyClosure(ctx context.Context, storePath string) (CopyStats, error) {
	defer n.clock.hold()()
	return n.fakeNode.CopyClosure(ctx, storePath)
}

func (n revertNode) Switch(ctx context.Context, toplevel, action string, limit time.Duration) (SwitchResult, error) {
	defer n.clock.hold()()
	return n.fakeNode.Switch(ctx, toplevel, action, limit)
}

func (n revertNode) FinalizeBoot(ctx context.Context, toplevel string, limit time.Duration) (int, error) {
	defer n.clock.hold()()
	return n.fakeNode.FinalizeBoot(ctx, toplevel, limit)
}

func (n revertNode) RevertBoot(ctx context.Context, running string, limit time.Duration) error {
	defer n.clock.hold()()
	return n.fakeNode.RevertBoot(ctx, running, limit)
}

// RunFresh is a new login: held by freshGate (outside the clock's lock: the run goes
// on meanwhile), refused while freshRefusedUntil, delayed by freshDelay (the clock
// moves: the login reaches the node that much later), and onFresh may interrupt the
// run.
func (n revertNode) RunFresh(ctx context.Context, argv []string, opts RunOptions) (RunResult, error) {
	if n.freshGate != nil {
		n.freshGate()
	}
	defer n.clock.hold()()
	n.freshAttempts++
	if n.onFresh != nil {
		n.onFresh(n.freshAttempts)
	}
	n.clock.now = n.clock.now.Add(n.freshDelay)
	n.record(call{what: "fresh", argv: argv})
	if n.clock.now.Before(n.freshRefusedUntil) || n.freshRefused {
		return RunResult{}, fmt.Errorf("ssh root@127.0.0.1:2201: connection refused: %w", ErrUnreachable)
	}
	if len(argv) >= 5 && argv[0] == "sh" && argv[2] == records.RevertGuardScript {
		return n.guardCall(argv[4:], n.clock.now), nil // a login made now
	}
	return n.fakeNode.Run(ctx, argv, opts)
}

// advance lets the node's own time act: a detached switch that ends, a lock another
// holder releases, an armed revert whose window ended (it begins, taking the lock from
// whoever holds it, or stands down), a begun revert that finishes (or whose unit dies).
// Called with n.mu held.
func (n *fakeNode) advance() {
	now := n.clock.now
	if n.switchGoesOn != "" && !now.Before(n.switchGoesOnUntil) {
		n.running, n.switchGoesOn = n.switchGoesOn, ""
	}
	if !n.rebootsAt.IsZero() && !now.Before(n.rebootsAt) {
		// A reboot nobody asked for: /run is emptied, the boot entry's system runs.
		n.lockToken, n.running, n.rebootsAt = "", n.profile, time.Time{}
	}
	if !n.lockFreeAt.IsZero() && !now.Before(n.lockFreeAt) {
		if n.lockToken == n.lockFreeToken {
			n.lockToken = ""
		}
		n.lockFreeAt = time.Time{}
	}
	for _, u := range n.sortedReverts() {
		rv := n.reverts[u]
		if rv.state == "armed" && n.switchGoesOn == "" && !now.Before(rv.switchEnds.Add(rv.arm.Confirm)) {
			if n.running != rv.arm.Guarded {
				rv.state = "stood-down the node runs " + n.running
			} else {
				rv.state, rv.begunAt, n.lockToken = "begun", rv.switchEnds.Add(rv.arm.Confirm), u
			}
		}
		if rv.state == "begun" && !rv.dies && !now.Before(rv.begunAt.Add(n.revertTakes)) {
			n.running, n.profile = rv.arm.Previous, rv.arm.Previous
			n.gen++
			rv.state = "reverted 0"
			n.revertsFired++
			if n.lockToken == u {
				n.lockToken = ""
			}
		}
	}
}

func (n *fakeNode) sortedReverts() []string {
	units := make([]string, 0, len(n.reverts))
	for u := range n.reverts {
		units = append(units, u)
	}
	sort.Strings(units)
	return units
}

// armAtSwitch arms the revert the transport was asked for, at a switch that ends at
// ends.
func (n *fakeNode) armAtSwitch(ends time.Time) {
	if n.armNext == nil {
		return
	}
	if n.reverts == nil {
		n.reverts = map[string]*fakeRevert{}
	}
	n.reverts[n.armNext.Unit] = &fakeRevert{arm: *n.armNext, state: "armed", switchEnds: ends}
	n.armNext = nil
}

// guardCall plays RevertGuardScript's disarm and pending for a login made at login
// (zero: the run's own connection): an armed revert is settled only by a login made
// after its switch ended.
func (n *fakeNode) guardCall(args []string, login time.Time) RunResult {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.advance()
	if login.IsZero() {
		login = n.connectedAt
	}
	say := fmt.Sprintf("running %s\nprofile system-%d-link\n", n.running, n.gen)
	// settle is what the guard does with an armed or begun revert for this login.
	settle := func(u string, rv *fakeRevert) string {
		switch {
		case rv.state == "armed" && n.switchGoesOn != "":
			return "switching"
		case rv.state == "armed" && login.Before(rv.switchEnds):
			return fmt.Sprintf("unconfirmed %d %d", login.Unix(), rv.switchEnds.Unix())
		case rv.state == "armed":
			delete(n.reverts, u)
			return "disarmed"
		case rv.state == "begun" && rv.dies:
			delete(n.reverts, u)
			if n.lockToken == u {
				n.lockToken = ""
			}
			return "died"
		case rv.state == "begun":
			return "begun"
		}
		delete(n.reverts, u)
		return rv.state
	}
	switch args[0] {
	case "disarm":
		rv := n.reverts[args[1]]
		if rv == nil {
			return RunResult{Stdout: []byte("gone\n" + say)}
		}
		return RunResult{Stdout: []byte(settle(args[1], rv) + "\n" + say)}
	case "pending":
		var b strings.Builder
		for _, u := range n.sortedReverts() {
			rv := n.reverts[u]
			fmt.Fprintf(&b, "revert %s %s %s %s\n", u, rv.arm.Previous, rv.arm.Guarded, settle(u, rv))
		}
		if n.switchGoesOn != "" {
			b.WriteString("switching fediversity-switch-0123456789ab\n")
		}
		if n.pendingFails {
			return RunResult{ExitCode: 1, Stderr: []byte("sh: 1: cannot create /run/fediversity/node.lock.guard: Read-only file system\n")}
		}
		return RunResult{Stdout: []byte(b.String() + say)}
	}
	return RunResult{ExitCode: 2, Stderr: []byte("unknown guard op " + args[0])}
}
