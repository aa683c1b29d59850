package deploybody

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// guardedNode is the fake node with a transport that runs the boot entry's guard in
// the round trip that starts the boot (GuardedBootFinalizer), as remote's StartScript
// does: the lock script's answer first, and the profile and the boot only after "ok".
// lost makes the round trip's answer lost to a transport fault once, after the node
// did what it does.
type guardedNode struct {
	*fakeNode
	lost    bool
	guarded int
}

func (g *guardedNode) FinalizeBootGuarded(ctx context.Context, toplevel string, limit time.Duration, guard BootGuard) ([]string, int, error) {
	g.guarded++
	if guard.Script == "" || len(guard.Args) == 0 || guard.Args[0] != "record" {
		return nil, 0, fmt.Errorf("fake: the guard is not the lock script's record operation: %q", guard.Args)
	}
	answer := strings.Split(strings.TrimSpace(string(g.lockCall(guard.Args, guard.Stdin).Stdout)), "\n")
	gen, err := 0, error(nil)
	if answer[0] == "ok" {
		gen, err = g.FinalizeBoot(ctx, toplevel, limit)
	}
	if g.lost {
		g.lost = false
		return nil, 0, fmt.Errorf("connection lost: %w", ErrGuardUnanswered)
	}
	return answer, gen, err
}

// lockRecords are the record operations the body ran on their own (not as the guard).
func (g *guardedNode) lockRecords() int {
	n := 0
	for _, c := range g.lockCalls() {
		if len(c.argv) > 4 && c.argv[4] == "record" {
			n++
		}
	}
	return n
}

// On a transport that can, the lock's check, the verdict record and the boot entry are
// one round trip: the record is written before the boot entry moves, and nothing is
// asked of the node on its own for them.
func TestFinalizeRecordsAndWritesTheBootEntryInOneRoundTrip(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	g := &guardedNode{fakeNode: s.node}
	res, err := Deploy(context.Background(), g, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	if g.guarded != 1 || g.lockRecords() != 0 || len(g.callsOf("finalize")) != 1 {
		t.Fatalf("guarded %d, records on their own %d, boot entries %d: want 1, 0, 1", g.guarded, g.lockRecords(), len(g.callsOf("finalize")))
	}
	if !g.recorded || g.entryAtRecord != "" || g.boots.entry != testToplevel || g.profile != testToplevel {
		t.Fatalf("recorded %v with the boot entry at %q; entry now %q, profile %q", g.recorded, g.entryAtRecord, g.boots.entry, g.profile)
	}
	if g.verdictRecord == nil || g.lastGood == nil || res.Generation != g.gen {
		t.Fatalf("verdict record %s, last good %s, generation %d (node %d)", g.verdictRecord, g.lastGood, res.Generation, g.gen)
	}
}

// A run whose lock another run took by the time of the boot entry stops there: the
// node's guard moves no boot entry and writes no record, and the error names the lock.
func TestFinalizeGuardMovesNothingUnderALostLock(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	g := &guardedNode{fakeNode: s.node}
	s.onLog = func(phase, message string) {
		if phase == PhaseReport {
			s.node.mu.Lock()
			s.node.lockToken = "someone-else"
			s.node.mu.Unlock()
		}
	}
	_, err := Deploy(context.Background(), g, s.opts)
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("err = %v, want the lost lock", err)
	}
	if g.guarded != 1 || len(g.callsOf("finalize")) != 0 || g.recorded || g.profile != testPrevious {
		t.Fatalf("guarded %d, boot entries %d, recorded %v, profile %q: want the boot entry untouched", g.guarded, len(g.callsOf("finalize")), g.recorded, g.profile)
	}
}

// An answer lost to a transport fault says nothing of what the node did: the run asks
// again on its own (the lock, the records, the boot entry), as it does when the lock
// script's answer is lost.
func TestFinalizeGuardUnansweredAsksAgainApart(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	g := &guardedNode{fakeNode: s.node, lost: true}
	if _, err := Deploy(context.Background(), g, s.opts); err != nil {
		t.Fatal(err)
	}
	if g.guarded != 1 || g.lockRecords() != 1 || len(g.callsOf("finalize")) != 2 || g.profile != testToplevel || g.boots.entry != testToplevel {
		t.Fatalf("guarded %d, records on their own %d, boot entries %d, profile %q", g.guarded, g.lockRecords(), len(g.callsOf("finalize")), g.profile)
	}
}
