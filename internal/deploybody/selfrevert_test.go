package deploybody

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The self-revert path on the fake clock: every wait is the fake clock's, so these
// tests take no real time, and the node's window is the fake node's (fakerevert_test.go).

func newRevertScenario(t *testing.T) *scenario {
	t.Helper()
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.opts.SelfRevert = true
	return s
}

func (s *scenario) deployReverting(ctx context.Context) (*Result, error) {
	return Deploy(ctx, revertNode{s.node}, s.opts)
}

// later lets the fake node's time pass: an armed revert left behind would fire.
func (s *scenario) later(d time.Duration) {
	_ = s.clock.Sleep(context.Background(), d)
	s.node.record(call{what: "later"})
}

// The good path: a new login after the switch disarms the revert before it began, and
// the node keeps the new system long after the window.
func TestSelfRevertDisarmedByNewLogin(t *testing.T) {
	s := newRevertScenario(t)
	res, err := s.deployReverting(context.Background())
	if err != nil || !res.Confirmed || res.SelfReverted {
		t.Fatalf("err=%v result=%+v", err, res)
	}
	if note := phaseNote(res, PhaseDetectUnconfirmed); !strings.Contains(note, "a new login disarmed the revert before it began") {
		t.Fatalf("detect note = %q", note)
	}
	s.later(time.Hour)
	if s.node.revertsFired != 0 || s.node.running != testToplevel || len(s.node.reverts) != 0 {
		t.Fatalf("after the run: fired %d, running %s, reverts left %d", s.node.revertsFired, s.node.running, len(s.node.reverts))
	}
}

// A node that refuses new logins until its window has ended reverts; the run says the
// node locked the deployer out and what it runs now.
func TestSelfRevertLockedOut(t *testing.T) {
	s := newRevertScenario(t)
	s.node.freshRefusedUntil = s.clock.now.Add(45 * time.Second)
	res, err := s.deployReverting(context.Background())
	wantDeployErr(t, err, PhaseDetectUnconfirmed)
	if !errors.Is(err, ErrLockedOut) || !errors.Is(err, ErrSelfReverted) || !strings.Contains(err.Error(), "put itself back on "+testPrevious) {
		t.Fatalf("err = %v", err)
	}
	if !res.SelfReverted || res.RunningSystem != testPrevious || s.node.running != testPrevious || s.node.profile != testPrevious || s.node.revertsFired != 1 {
		t.Fatalf("result %+v; node runs %s, boots %s, fired %d", res, s.node.running, s.node.profile, s.node.revertsFired)
	}
}

// Item 1 of issue 19: the disarm is late. The node counts the window; a login that
// reaches it after the window finds the revert done or under way, never stops it, and
// the run reports a revert, not "disarmed", and not a lock-out (logins work).
func TestSelfRevertLateLoginIsReportedAsRevert(t *testing.T) {
	for _, tc := range []struct {
		name        string
		delay       time.Duration
		revertTakes time.Duration
	}{
		{"revert done before the login arrives", 45 * time.Second, 0},
		{"revert under way when the login arrives", 35 * time.Second, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRevertScenario(t)
			s.node.freshDelay = tc.delay
			s.node.revertTakes = tc.revertTakes
			res, err := s.deployReverting(context.Background())
			wantDeployErr(t, err, PhaseDetectUnconfirmed)
			msg := err.Error()
			if !errors.Is(err, ErrSelfReverted) || errors.Is(err, ErrLockedOut) || strings.Contains(msg, "disarmed") ||
				!strings.Contains(msg, "only after its confirm window (30s) had ended") || !strings.Contains(msg, "put itself back on "+testPrevious) {
				t.Fatalf("err = %v", err)
			}
			if !res.SelfReverted || res.Confirmed || s.node.running != testPrevious || s.node.profile != testPrevious || s.node.revertsFired != 1 {
				t.Fatalf("result %+v; node runs %s, boots %s, fired %d", res, s.node.running, s.node.profile, s.node.revertsFired)
			}
			if n := len(s.node.callsOf("finalize")); n != 0 {
				t.Fatalf("the boot entry was written %d times after the node reverted", n)
			}
		})
	}
}

// Item 2 of issue 19: an interrupt during the confirming login is not a lock-out. The
// revert is settled on a context of its own, and the run says it was interrupted and
// what the node runs and will run.
func TestSelfRevertInterruptedConfirm(t *testing.T) {
	t.Run("the login still disarms", func(t *testing.T) {
		s := newRevertScenario(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s.node.onFresh = func(int) { cancel() }
		res, err := s.deployReverting(ctx)
		wantDeployErr(t, err, PhaseDetectUnconfirmed)
		msg := err.Error()
		if errors.Is(err, ErrLockedOut) || strings.Contains(msg, "stops new logins") || !strings.Contains(msg, "interrupted (context canceled) while confirming the switch") ||
			!strings.Contains(msg, "disarmed the revert before it began, so the node keeps running "+testToplevel+", which no verdict judged") {
			t.Fatalf("err = %v", err)
		}
		if res.Verdict != nil {
			t.Fatal("an interrupted run gave a verdict")
		}
		s.later(time.Hour)
		if s.node.revertsFired != 0 || s.node.running != testToplevel {
			t.Fatalf("fired %d, node runs %s", s.node.revertsFired, s.node.running)
		}
	})
	t.Run("no login gets through", func(t *testing.T) {
		s := newRevertScenario(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s.node.onFresh = func(int) { cancel() }
		s.node.freshRefusedUntil = s.clock.now.Add(24 * time.Hour)
		_, err := s.deployReverting(ctx)
		wantDeployErr(t, err, PhaseDetectUnconfirmed)
		msg := err.Error()
		if errors.Is(err, ErrLockedOut) || strings.Contains(msg, "stops new logins") || !strings.Contains(msg, "interrupted (context canceled) while confirming the switch") ||
			!strings.Contains(msg, "the node switches back to "+testPrevious+" by itself 30s after the switch ended") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("the window ended first", func(t *testing.T) {
		s := newRevertScenario(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s.node.onFresh = func(int) { cancel() }
		s.node.freshDelay = 40 * time.Second
		res, err := s.deployReverting(ctx)
		msg := err.Error()
		if errors.Is(err, ErrLockedOut) || !errors.Is(err, ErrSelfReverted) || !strings.Contains(msg, "interrupted (context canceled) while confirming the switch; the node's confirm window (30s) ended first") || !res.SelfReverted {
			t.Fatalf("err = %v", err)
		}
	})
}

// A run whose session loses the switch (a cut connection, Ctrl-C, its time limit)
// still confirms: the guard answers "switching" until the switch has ended on the
// node, then a new login disarms, before the node's window ends.
func TestSelfRevertAfterLostSwitch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		interrupt bool
	}{
		{"connection lost", fmt.Errorf("switch: lost the node while fediversity-switch-1 ran: %w", ErrUnreachable), false},
		{"interrupted (Ctrl-C, timeouts.update)", fmt.Errorf("switch: %w while waiting for fediversity-switch-1", context.Canceled), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRevertScenario(t)
			s.node.switchLostFor = 20 * time.Second
			s.node.switchLostErr = tc.err
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.interrupt {
				s.node.atSwitch = cancel
			}
			start := s.clock.now
			res, err := s.deployReverting(ctx)
			wantDeployErr(t, err, PhaseSwitch)
			if !strings.Contains(err.Error(), "after the switch ended a new login disarmed the revert before it began: the node runs "+testToplevel) {
				t.Fatalf("err = %v", err)
			}
			if took := s.clock.now.Sub(start); took < 20*time.Second || took > 30*time.Second {
				t.Fatalf("confirmed %s after the switch started; want after its end (20s) and within the window", took)
			}
			if res.Verdict != nil || res.Confirmed {
				t.Fatalf("a run whose switch failed claims %+v", res)
			}
			s.later(time.Hour)
			if s.node.revertsFired != 0 || s.node.running != testToplevel {
				t.Fatalf("fired %d, node runs %s", s.node.revertsFired, s.node.running)
			}
		})
	}
}

// The orphan revert of issue 19: a run killed after its switch leaves its revert
// armed. The next run takes the lock and deals with it: it waits for the earlier
// switch still running, disarms the revert before it began, and warns, naming what
// the node runs; nothing reverts behind it afterwards.
func TestLaterRunSettlesEarlierRevert(t *testing.T) {
	for _, tc := range []struct {
		name        string
		switchGoing time.Duration
	}{
		{"switch over, revert armed", 0},
		{"switch still running", 12 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRevertScenario(t)
			n := s.node
			n.store[testToplevel] = true
			n.running, n.profile = testToplevel, testPrevious
			if tc.switchGoing > 0 {
				n.running, n.switchGoesOn, n.switchGoesOnUntil = testPrevious, testToplevel, s.clock.now.Add(tc.switchGoing)
			}
			n.reverts = map[string]*fakeRevert{RevertUnitPrefix + "0123456789ab": {
				arm:   RevertArm{Unit: RevertUnitPrefix + "0123456789ab", Previous: testPrevious, Guarded: testToplevel, Token: "killed-run", Confirm: 30 * time.Second},
				state: "armed", switchEnds: s.clock.now.Add(tc.switchGoing),
			}}
			res, err := s.deployReverting(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			warnings := strings.Join(res.Warnings, "\n")
			if !strings.Contains(warnings, "an earlier run left a revert armed on the node ("+RevertUnitPrefix+"0123456789ab: back to "+testPrevious) ||
				!strings.Contains(warnings, "disarmed it before it began; the node runs "+testToplevel) {
				t.Fatalf("warnings = %q", res.Warnings)
			}
			if tc.switchGoing > 0 && !strings.Contains(phaseNote(res, PhaseLockNode), "waited") {
				t.Fatalf("lock-node note %q: the run did not wait for the earlier switch", phaseNote(res, PhaseLockNode))
			}
			s.later(time.Hour)
			if n.revertsFired != 0 || n.running != testToplevel || n.profile != testToplevel {
				t.Fatalf("fired %d; node runs %s, boots %s", n.revertsFired, n.running, n.profile)
			}
		})
	}
	t.Run("revert already done", func(t *testing.T) {
		s := newRevertScenario(t)
		s.node.reverts = map[string]*fakeRevert{RevertUnitPrefix + "0123456789ab": {
			arm: RevertArm{Unit: RevertUnitPrefix + "0123456789ab", Previous: testPrevious, Guarded: testToplevel}, state: "reverted 0",
		}}
		res, err := s.deployReverting(context.Background())
		if err != nil || !strings.Contains(strings.Join(res.Warnings, "\n"), "it had switched the node back before this run took the lock; the node runs "+testPrevious) {
			t.Fatalf("err=%v warnings=%q", err, res.Warnings)
		}
	})
}
