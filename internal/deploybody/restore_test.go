package deploybody

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// restoringNode is the fake node behind a Restorer, as the Incus snapshot guard is: it
// records whether a restore ran and who held the node's lock then. Every failed run
// needs a restore (as if the guard's probe found the node silent).
type restoringNode struct {
	*fakeNode
	restores      int
	lockAtRestore string
	releasedFirst bool
}

func (n *restoringNode) NeedsRestore(_ context.Context, res *Result, runErr error, _, _ time.Duration) bool {
	return runErr != nil
}

func (n *restoringNode) Restore(context.Context) error {
	n.mu.Lock()
	n.restores++
	n.lockAtRestore = n.lockToken
	for _, c := range n.calls {
		if c.what == "run" && len(c.argv) > 4 && c.argv[2] == records.LockScript && c.argv[4] == "release" {
			n.releasedFirst = true
		}
	}
	n.mu.Unlock()
	return nil
}

func acquiredToken(n *fakeNode) string {
	for _, c := range n.lockCalls() {
		if len(c.argv) > 5 && c.argv[4] == "acquire" {
			return c.argv[5]
		}
	}
	return ""
}

// A switch that leaves the node unreachable is restored while the run still holds the
// node lock: before the release, with the lock file naming this run.
func TestRestoreRunsUnderTheLock(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.unreachableAtSwitch = true
	s.opts.Timings.NodeWait = 5 * time.Second
	g := &restoringNode{fakeNode: s.node}
	_, err := Deploy(context.Background(), g, s.opts)
	if err == nil {
		t.Fatal("a deploy that lost the node succeeded")
	}
	if g.restores != 1 {
		t.Fatalf("restored %d times, want once", g.restores)
	}
	if tok := acquiredToken(s.node); tok == "" || g.lockAtRestore != tok || g.releasedFirst {
		t.Fatalf("restore ran with the lock held by %q (this run: %q), released before: %v", g.lockAtRestore, tok, g.releasedFirst)
	}
}

// A run whose lock another run took never restores its rollback point: that run owns
// the node now. It says so.
func TestRestoreNeverAfterTheLockIsLost(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.lockTakenAtSwitch = "other-deployer"
	g := &restoringNode{fakeNode: s.node}
	res, err := Deploy(context.Background(), g, s.opts)
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("err = %v, want the lost lock", err)
	}
	if g.restores != 0 {
		t.Fatalf("a run that lost its lock restored the node %d times", g.restores)
	}
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "does not restore the node's rollback point") {
		t.Fatalf("warnings do not say why the node was not restored: %q", res.Warnings)
	}
}

// A lock that vanished is not a lock lost: a node that never came back from the run's
// own reboot answered "gone" to the heartbeat while its bricked boot emptied /run, then
// powered off. No other run took the lock, so the run restores its rollback point and
// does not say that another run owns the node.
func TestRestoreAfterTheLockVanished(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.unreachable = true
	g := &restoringNode{fakeNode: s.node}
	var warnings []string
	e := &runEnv{t: g, o: s.opts, warnings: &warnings}
	lock := &nodeLock{holder: records.LockHolder{Token: "this-run"}}
	lock.sawVanished(lock.currentEpoch())
	runErr := e.asDeployError(PhaseSwitch, NotBackError(40*time.Second, "instance is Stopped"))
	e.restoreIfUnreachable(context.Background(), lock, true, &Result{}, runErr)
	if g.restores != 1 {
		t.Fatalf("restored %d times after the lock vanished, want once", g.restores)
	}
	if w := strings.Join(warnings, "\n"); strings.Contains(w, "lost the node's lock") {
		t.Fatalf("warnings say another run took the lock: %q", w)
	}
}

// A run whose context is done (a time limit, Ctrl-C) after its switch lost the node
// still restores it, under the lock, on a context of its own.
func TestRestoreAfterTheRunsContextIsDone(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.unreachableAtSwitch = true
	ctx, cancel := context.WithCancel(context.Background())
	g := &restoringNode{fakeNode: s.node}
	s.opts.Logger = LoggerFunc(func(_ context.Context, _ Level, phase, message string, _ map[string]any) {
		if phase == PhaseSwitch && message == "phase finished" {
			cancel()
		}
	})
	_, err := Deploy(ctx, g, s.opts)
	if err == nil || g.restores != 1 || g.lockAtRestore == "" {
		t.Fatalf("err=%v restores=%d lock at restore %q", err, g.restores, g.lockAtRestore)
	}
}

// resumingNode is the fake node behind a RestoreResumer, as the Incus snapshot guard
// is when an earlier run's restore did not finish: it says what it did, or fails.
type resumingNode struct {
	*fakeNode
	did      string
	err      error
	resumed  int
	runsSeen int // commands the node had run when the resume was asked
}

func (n *resumingNode) ResumeRestore(context.Context) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.resumed++
	n.runsSeen = len(n.calls)
	return n.did, n.err
}

// An earlier run's unfinished restore is finished before anything else touches the
// node (the instance it stopped would never answer the wait), and the run says so.
func TestUnfinishedRestoreIsFinishedFirst(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	g := &resumingNode{fakeNode: s.node, did: "An earlier run's restore of rollback point fediversity-gen-2 did not finish: it was restored again"}
	res, err := Deploy(context.Background(), g, s.opts)
	if err != nil {
		t.Fatalf("deploy after finishing the restore: %v", err)
	}
	if g.resumed != 1 || g.runsSeen != 0 {
		t.Fatalf("resumed %d times, after %d node commands; want once, before any", g.resumed, g.runsSeen)
	}
	if !strings.Contains(strings.Join(res.Warnings, "\n"), g.did) {
		t.Fatalf("the run's warnings do not say the restore was finished: %q", res.Warnings)
	}
}

// A restore that cannot be finished fails the run in wait-for-node: nothing is
// copied, switched or locked on a node in that state.
func TestUnfinishedRestoreThatFailsStopsTheRun(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	g := &resumingNode{fakeNode: s.node, err: errors.New("restore snapshot: daemon gone")}
	res, err := Deploy(context.Background(), g, s.opts)
	var de *DeployError
	if !errors.As(err, &de) || de.Phase != PhaseWaitForNode || !strings.Contains(err.Error(), "did not finish") || !strings.Contains(err.Error(), "daemon gone") {
		t.Fatalf("err = %v, want a wait-for-node failure naming the unfinished restore and why", err)
	}
	if len(s.node.calls) != 0 {
		t.Fatalf("the node was touched %d times after the failed resume: %v", len(s.node.calls), s.node.calls)
	}
	_ = res
}

// The verdict-only pass never restores anything.
func TestVerdictOnlyNeverResumesARestore(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	g := &resumingNode{fakeNode: s.node, did: "x"}
	_, _ = VerdictOnly(context.Background(), g, s.opts)
	if g.resumed != 0 {
		t.Fatalf("the verdict-only pass resumed a restore %d times", g.resumed)
	}
}
