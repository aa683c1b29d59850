package deploybody

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
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

// earlierRevertScenario is a node on which an earlier run, killed after its switch
// from testPrevious to testToplevel started, left its revert armed; the switch still
// runs for switchGoing (0: it is over).
func earlierRevertScenario(t *testing.T, switchGoing time.Duration) *scenario {
	t.Helper()
	s := newRevertScenario(t)
	n := s.node
	n.store[testToplevel] = true
	n.running, n.profile = testToplevel, testPrevious
	if switchGoing > 0 {
		n.running, n.switchGoesOn, n.switchGoesOnUntil = testPrevious, testToplevel, s.clock.now.Add(switchGoing)
	}
	n.reverts = map[string]*fakeRevert{earlierUnit: {
		arm:   RevertArm{Unit: earlierUnit, Previous: testPrevious, Guarded: testToplevel, Token: "killed-run", Confirm: 30 * time.Second},
		state: "armed", switchEnds: s.clock.now.Add(switchGoing),
	}}
	return s
}

const earlierUnit = records.RevertUnitPrefix + "0123456789ab"

// The orphan revert of issue 19: a run killed after its switch leaves its revert
// armed. The next run takes the lock and deals with it: it waits for the earlier switch
// still running, disarms the revert before it began with a login made after that
// switch ended (issue 39, item 1), and warns, naming what the node runs; nothing
// reverts behind it afterwards.
func TestLaterRunSettlesEarlierRevert(t *testing.T) {
	for _, tc := range []struct {
		name        string
		switchGoing time.Duration
		// lockHeldFor: another run holds the lock that long, past the switch's end: this
		// run's connection is older than the end when it gets the lock.
		lockHeldFor time.Duration
		// fresh: the run needs a new login (its own connection predates the end).
		fresh bool
	}{
		{"switch over, revert armed", 0, 0, false},
		{"switch still running", 12 * time.Second, 0, true},
		{"the run waited in the lock past the switch's end", 12 * time.Second, 20 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := earlierRevertScenario(t, tc.switchGoing)
			n := s.node
			if tc.lockHeldFor > 0 {
				n.lockToken, n.lockFreeToken, n.lockFreeAt = "other-run", "other-run", s.clock.now.Add(tc.lockHeldFor)
			}
			res, err := s.deployReverting(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			warnings := strings.Join(res.Warnings, "\n")
			if !strings.Contains(warnings, "an earlier run left a revert armed on the node ("+earlierUnit+": back to "+testPrevious) ||
				!strings.Contains(warnings, "a new login made after its switch ended disarmed it before it began, under this run's lock; the node runs "+testToplevel) {
				t.Fatalf("warnings = %q", res.Warnings)
			}
			if tc.switchGoing > tc.lockHeldFor && !strings.Contains(phaseNote(res, PhaseLockNode), "waited") {
				t.Fatalf("lock-node note %q: the run did not wait for the earlier switch", phaseNote(res, PhaseLockNode))
			}
			// The disarm came over a login made after the earlier switch ended, not over the
			// run's own connection, made before it.
			if fresh := len(n.callsOf("fresh")) > 0; fresh != tc.fresh {
				t.Fatalf("new logins made: %v, want %v", fresh, tc.fresh)
			}
			s.later(time.Hour)
			if n.revertsFired != 0 || n.running != testToplevel || n.profile != testToplevel {
				t.Fatalf("fired %d; node runs %s, boots %s", n.revertsFired, n.running, n.profile)
			}
		})
	}
	t.Run("revert already done", func(t *testing.T) {
		s := newRevertScenario(t)
		s.node.reverts = map[string]*fakeRevert{earlierUnit: {
			arm: RevertArm{Unit: earlierUnit, Previous: testPrevious, Guarded: testToplevel}, state: "reverted 0",
		}}
		res, err := s.deployReverting(context.Background())
		if err != nil || !strings.Contains(strings.Join(res.Warnings, "\n"), "it had switched the node back before this run took the lock; the node runs "+testPrevious) {
			t.Fatalf("err=%v warnings=%q", err, res.Warnings)
		}
	})
}

// Issue 39, item 1: the earlier run's switch activates a system that refuses new
// logins, and this run's connection was made before that switch ended (it survives
// sshd's stop). Nothing that proves the new system accepts logins gets through, so the
// revert stays armed, its window ends, and it switches the node back, taking the lock:
// the run fails saying that the node locks out new logins and what it runs, and changes
// nothing itself. On the current main the run disarmed the revert over its old
// connection and reported ok for a node that refuses every new login.
func TestLaterRunLeavesTheRevertToALockedOutNode(t *testing.T) {
	for _, tc := range []struct {
		name        string
		switchGoing time.Duration
		lockHeldFor time.Duration
	}{
		{"switch still running", 12 * time.Second, 0},
		{"the run waited in the lock past the switch's end", 12 * time.Second, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := earlierRevertScenario(t, tc.switchGoing)
			n := s.node
			n.freshRefused = true
			if tc.lockHeldFor > 0 {
				n.lockToken, n.lockFreeToken, n.lockFreeAt = "other-run", "other-run", s.clock.now.Add(tc.lockHeldFor)
			}
			res, err := s.deployReverting(context.Background())
			wantDeployErr(t, err, PhaseLockNode)
			msg := err.Error()
			if !errors.Is(err, ErrLockedOut) || !errors.Is(err, ErrSelfReverted) ||
				!strings.Contains(msg, "no new login reached the node") || !strings.Contains(msg, "switched the node back to "+testPrevious) ||
				!strings.Contains(msg, "stops new logins") {
				t.Fatalf("err = %v", err)
			}
			if n.revertsFired != 1 || n.running != testPrevious || n.profile != testPrevious {
				t.Fatalf("fired %d; node runs %s, boots %s", n.revertsFired, n.running, n.profile)
			}
			if len(n.callsOf("switch")) != 0 || len(n.callsOf("finalize")) != 0 || res.Verdict != nil {
				t.Fatalf("the run went on after the revert took the node: %d switches, %d boot entries, verdict %+v",
					len(n.callsOf("switch")), len(n.callsOf("finalize")), res.Verdict)
			}
			if n.lockToken != "" {
				t.Fatalf("lock %q left behind", n.lockToken)
			}
		})
	}
}

// Issue 39, item 2: whatever stops the settling of earlier runs (an interrupt while
// it waits for an earlier switch, that switch running past its bound, a transport fault
// on pending), the lock the run took is released: a second deployer gets it at once.
// On the current main the lock stayed, its heartbeat kept fresh for the life of the
// process.
func TestLockReleasedWhenSettlingEarlierRunsFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(s *scenario, cancel context.CancelFunc)
		want  string
	}{
		{"Ctrl-C while waiting for an earlier switch", func(s *scenario, cancel context.CancelFunc) {
			s.node.onLockAcquired = cancel
		}, "context canceled"},
		{"an earlier switch past its bound", func(s *scenario, cancel context.CancelFunc) {
			s.node.switchGoesOnUntil = s.clock.now.Add(24 * time.Hour)
		}, "is still not settled on node"},
		{"a fault on pending", func(s *scenario, cancel context.CancelFunc) {
			s.node.pendingFails = true
		}, "looking for reverts armed by earlier runs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := earlierRevertScenario(t, 12*time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tc.setup(s, cancel)
			_, err := s.deployReverting(ctx)
			wantDeployErr(t, err, PhaseLockNode)
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v", err)
			}
			if s.node.lockToken != "" {
				t.Fatalf("the node keeps the lock %q of a run that stopped", s.node.lockToken)
			}
		})
	}
}

// Issue 39, item 3: a revert that began and whose unit then died stays "begun" on the
// node. The next run hears that it died, warns with what the node runs, and deploys.
func TestLaterRunDeploysOverARevertWhoseUnitDied(t *testing.T) {
	s := earlierRevertScenario(t, 0)
	rv := s.node.reverts[earlierUnit]
	rv.state, rv.dies = "begun", true
	s.node.lockToken = earlierUnit
	s.node.lockFreeAt, s.node.lockFreeToken = s.clock.now.Add(time.Minute), earlierUnit // its heartbeat went stale
	res, err := s.deployReverting(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(res.Warnings, "\n"); !strings.Contains(w, "its unit stopped before it ended") || !strings.Contains(w, "the node runs "+testToplevel) {
		t.Fatalf("warnings = %q", res.Warnings)
	}
	if len(s.node.reverts) != 0 || s.node.running != testToplevel {
		t.Fatalf("reverts left %d, node runs %s", len(s.node.reverts), s.node.running)
	}
}
