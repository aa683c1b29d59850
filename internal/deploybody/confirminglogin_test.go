package deploybody

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// The confirming login runs beside the phases after the switch (confirmingLogin). A
// login whose handshake takes a while is a fault a real node cannot give on demand, so
// these tests hold the fake node's new login at a gate the run itself opens.

// loginGate holds the first new login until open is called (or a real-time guard
// expires: then the run waited for the login, which is the fault under test, and
// the test fails instead of hanging).
type loginGate struct {
	t      *testing.T
	opened chan struct{}
	// runningAtDial is what the node ran, and calls how many calls it had seen, when
	// the login was dialled.
	runningAtDial string
	callsAtDial   int
}

// gateFirstLogin installs a loginGate on the scenario's node.
func gateFirstLogin(t *testing.T, s *scenario) *loginGate {
	g := &loginGate{t: t, opened: make(chan struct{})}
	first := true
	s.node.freshGate = func() {
		if !first {
			return
		}
		first = false
		func() {
			defer s.clock.hold()()
			g.runningAtDial, g.callsAtDial = s.node.running, len(s.node.calls)
		}()
		select {
		case <-g.opened:
		case <-time.After(20 * time.Second): // a guard against a hang, not a timing
			g.t.Error("the run did not go on while the new login was out: the login is on the critical path")
		}
	}
	return g
}

func (g *loginGate) open() { close(g.opened) }

// openAtSettle opens the gate when the run starts its settle phase (the last phase
// before the watch), after calling also (when set).
func (g *loginGate) openAtSettle(s *scenario, also func()) {
	s.onLog = func(phase, message string) {
		if phase == PhaseSettle && message == "phase started" {
			if also != nil {
				also()
			}
			g.open()
		}
	}
}

// indexOfLog is the position of the first log line containing text, -1 when none.
func indexOfLog(s *scenario, text string) int {
	return slices.IndexFunc(s.logs, func(l string) bool { return strings.Contains(l, text) })
}

// The login's cost is off the critical path: it is dialled once the switch has ended
// on the node (the node runs the new system), and while it is out the run reads the
// result, reads what the node runs, collects the units and starts the settle; the
// watch starts only after the login disarmed the revert.
func TestConfirmingLoginRunsBesideThePhasesAfterTheSwitch(t *testing.T) {
	s := newRevertScenario(t)
	g := gateFirstLogin(t, s)
	g.openAtSettle(s, nil)
	res, err := s.deployReverting(context.Background())
	if err != nil || !res.Confirmed || res.SelfReverted {
		t.Fatalf("err=%v result=%+v", err, res)
	}
	switchAt := slices.IndexFunc(s.node.calls, func(c call) bool { return c.what == "switch" })
	if g.runningAtDial != testToplevel || switchAt < 0 || g.callsAtDial <= switchAt {
		t.Fatalf("the login was dialled when the node ran %q after %d calls (the switch was call %d): it must be dialled after the activation", g.runningAtDial, g.callsAtDial, switchAt)
	}
	readAt := slices.IndexFunc(s.node.calls, func(c call) bool {
		return c.what == "run" && strings.Contains(strings.Join(c.argv, " "), "/run/current-system")
	})
	freshAt := slices.IndexFunc(s.node.calls, func(c call) bool { return c.what == "fresh" })
	if readAt < 0 || freshAt < 0 || readAt > freshAt {
		t.Fatalf("the read of the running system (call %d) did not happen while the login was out (its guard call is %d)", readAt, freshAt)
	}
	loginAt, watchAt := indexOfLog(s, "the confirming login: a new login disarmed the revert before it began"), indexOfLog(s, PhaseWatch+" phase started")
	if loginAt < 0 || watchAt < 0 || loginAt > watchAt {
		t.Fatalf("the watch (log line %d) started before the login disarmed the revert (log line %d): %q", watchAt, loginAt, s.logs)
	}
	if note := phaseNote(res, PhaseDetectUnconfirmed); !strings.Contains(note, "node runs the new toplevel; a new login disarmed the revert before it began") {
		t.Fatalf("detect note = %q", note)
	}
	s.later(time.Hour)
	if s.node.revertsFired != 0 || s.node.running != testToplevel || len(s.node.reverts) != 0 {
		t.Fatalf("after the run: fired %d, running %s, reverts left %d", s.node.revertsFired, s.node.running, len(s.node.reverts))
	}
}

// A login that fails after the run went on fails the deploy as when it ran first: the
// detect-unconfirmed-switch phase's lock-out error, the node put back, nothing judged,
// no boot entry written, and no failed unit restarted before the login proved the node.
func TestConfirmingLoginThatFailsFailsTheDeployAsBefore(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: fails}})
	s.opts.SelfRevert = true
	s.node.freshRefusedUntil = s.clock.now.Add(45 * time.Second)
	g := gateFirstLogin(t, s)
	// The failed unit makes the restart phase want a restart: the run must wait for
	// the login there, so the gate opens when the run is held at the restart.
	s.onLog = func(phase, message string) {
		if phase == PhaseRestartFailedUnits && message == "phase started" {
			g.open()
		}
	}
	res, err := s.deployReverting(context.Background())
	wantDeployErr(t, err, PhaseDetectUnconfirmed)
	if !errors.Is(err, ErrLockedOut) || !errors.Is(err, ErrSelfReverted) || !strings.Contains(err.Error(), "put itself back on "+testPrevious) {
		t.Fatalf("err = %v", err)
	}
	if res.Confirmed || !res.SelfReverted || !res.BootReverted || res.RunningSystem != testPrevious || res.Verdict != nil {
		t.Fatalf("result %+v", res)
	}
	if s.node.running != testPrevious || s.node.profile != testPrevious || s.node.revertsFired != 1 {
		t.Fatalf("node runs %s, boots %s, fired %d", s.node.running, s.node.profile, s.node.revertsFired)
	}
	if n := len(s.node.runsOf("systemctl", "restart")); n != 0 {
		t.Fatalf("%d unit restarts before the new login proved the node", n)
	}
	if n := len(s.node.callsOf("finalize")); n != 0 {
		t.Fatalf("the boot entry was written %d times after the node reverted", n)
	}
	if slices.ContainsFunc(res.Phases, func(p PhaseTiming) bool { return p.Name == PhaseWatch }) {
		t.Fatal("the node was watched after a failed confirming login")
	}
}

// A Ctrl-C while the login is out (the run is in its settle) stops the run as before:
// the revert is settled on a context of its own; when no new login gets through it
// stays armed and fires, and the run says it was interrupted and what the node does.
func TestConfirmingLoginInterrupted(t *testing.T) {
	t.Run("no login gets through: the revert stays armed and fires", func(t *testing.T) {
		s := newRevertScenario(t)
		s.node.freshRefusedUntil = s.clock.now.Add(24 * time.Hour)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		g := gateFirstLogin(t, s)
		g.openAtSettle(s, cancel)
		res, err := s.deployReverting(ctx)
		wantDeployErr(t, err, PhaseDetectUnconfirmed)
		msg := err.Error()
		if errors.Is(err, ErrLockedOut) || !strings.Contains(msg, "interrupted (context canceled) while confirming the switch, and no new login was answered") ||
			!strings.Contains(msg, "the node switches back to "+testPrevious+" by itself 30s after the switch ended") {
			t.Fatalf("err = %v", err)
		}
		if res.Verdict != nil || res.Confirmed || len(s.node.callsOf("finalize")) != 0 {
			t.Fatalf("an interrupted run judged or finalized: %+v", res)
		}
		s.later(time.Hour)
		if s.node.revertsFired != 1 || s.node.running != testPrevious || s.node.profile != testPrevious {
			t.Fatalf("fired %d; node runs %s, boots %s", s.node.revertsFired, s.node.running, s.node.profile)
		}
	})
	t.Run("the login still disarms", func(t *testing.T) {
		s := newRevertScenario(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		g := gateFirstLogin(t, s)
		g.openAtSettle(s, cancel)
		res, err := s.deployReverting(ctx)
		wantDeployErr(t, err, PhaseDetectUnconfirmed)
		if !strings.Contains(err.Error(), "interrupted (context canceled) while confirming the switch; a new login disarmed the revert before it began, so the node keeps running "+testToplevel+", which no verdict judged") {
			t.Fatalf("err = %v", err)
		}
		if res.Verdict != nil || len(s.node.callsOf("finalize")) != 0 {
			t.Fatalf("an interrupted run judged or finalized: %+v", res)
		}
		s.later(time.Hour)
		if s.node.revertsFired != 0 || s.node.running != testToplevel {
			t.Fatalf("fired %d, node runs %s", s.node.revertsFired, s.node.running)
		}
	})
}
