package deploybody

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// readBlockingNode is the simulated node whose snapshot read (beside the push) stays
// out until the run gives it up, and whose copy fails once that read is out. It keeps
// the order in which the read ended and the lock was released.
type readBlockingNode struct {
	*fakeNode
	readOut  chan struct{}
	readOnce sync.Once
	eventsMu sync.Mutex
	events   []string
}

func (n *readBlockingNode) event(e string) {
	n.eventsMu.Lock()
	defer n.eventsMu.Unlock()
	n.events = append(n.events, e)
}

func (n *readBlockingNode) Run(ctx context.Context, argv []string, opts RunOptions) (RunResult, error) {
	if reflect.DeepEqual(argv, cmdReadRunning) {
		n.readOnce.Do(func() { close(n.readOut) })
		<-ctx.Done()
		n.event("snapshot read ended")
		return RunResult{}, ctx.Err()
	}
	if len(argv) >= 5 && argv[2] == records.LockScript && argv[4] == "release" {
		n.event("lock released")
	}
	return n.fakeNode.Run(ctx, argv, opts)
}

func (n *readBlockingNode) CopyClosure(ctx context.Context, storePath string) (CopyStats, error) {
	select {
	case <-n.readOut:
	case <-time.After(30 * time.Second): // a guard against a hang, not a measurement
	}
	return CopyStats{}, errors.New("no space left on device")
}

// A run whose push fails leaves nothing of its snapshot read on the node: the read
// taken beside the push is given up and has ended before the lock is released, and
// the run fails in the push, as it did when the snapshot came after it.
func TestPushFailureEndsTheSnapshotReadBeforeTheUnlock(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	n := &readBlockingNode{fakeNode: s.node, readOut: make(chan struct{})}
	res, err := Deploy(context.Background(), n, s.opts)
	wantDeployErr(t, err, PhasePushClosure)
	if want := []string{"snapshot read ended", "lock released"}; !reflect.DeepEqual(n.events, want) {
		t.Fatalf("events %v, want %v", n.events, want)
	}
	for _, p := range res.Phases {
		if p.Name == PhaseSnapshotUnitStates || p.Name == PhaseSwitch {
			t.Fatalf("phase %s ran after a failed push", p.Name)
		}
	}
	if len(s.node.callsOf("switch")) != 0 {
		t.Fatal("switched after a failed push")
	}
}

// With a secret chain, the snapshot is read after the chain wait (not beside the
// push): the chain's members change while it waits, and the snapshot records the
// units as the wait left them.
func TestSnapshotWithSecretChainIsReadAfterTheChainWait(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.setUnit("secrets.service", unitSpec{b: startsAfter, delay: 10 * time.Second})
	s.opts.SecretChain = []string{"secrets.service"}
	if _, err := s.deploy(); err != nil {
		t.Fatal(err)
	}
	calls := s.node.calls
	copied, lastChainSample, snapshot := -1, -1, -1
	for i, c := range calls {
		switch {
		case c.what == "copy":
			copied = i
		case c.what == "run" && len(c.argv) > 2 && c.argv[0] == "systemctl" && c.argv[1] == "show" && slices.Contains(c.argv, "secrets.service") && snapshot < 0:
			lastChainSample = i
		case c.what == "run" && reflect.DeepEqual(c.argv, cmdReadRunning) && snapshot < 0:
			snapshot = i
		}
	}
	if copied < 0 || lastChainSample < 0 || snapshot < 0 {
		t.Fatalf("copy %d, chain sample %d, snapshot %d: a step is missing", copied, lastChainSample, snapshot)
	}
	if snapshot < copied || snapshot < lastChainSample {
		t.Fatalf("snapshot read at call %d, before the copy (%d) or the chain's last sample (%d)", snapshot, copied, lastChainSample)
	}
}
