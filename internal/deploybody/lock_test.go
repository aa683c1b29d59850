package deploybody

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

func TestDeployDoesNotTakeOverALiveLockOfAnotherMachineWithTheSameHostName(t *testing.T) {
	self := records.ThisProcess()
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.lockToken = "first-deployer"
	// The first deployer: host name and PID namespace like ours, PID gone here, another
	// machine (a cloned CI machine with its own machine id).
	s.node.lockHolderLines = strings.Join([]string{
		"token=first-deployer", "host=" + self.Host, "machine=0123456789abcdef0123456789abcdef", "boot=" + self.BootID,
		"pidns=" + self.PIDNamespace, "pid=999999", "start=42", "what=deploy", "toplevel=" + testToplevel,
	}, "\n")
	s.opts.Timings.LockWait = 5 * time.Second
	_, err := s.deploy()
	de := deployErr(t, err, PhaseLockNode)
	if !strings.Contains(de.Error(), "is locked by a deploy of "+testToplevel+" from host "+self.Host+" (process 999999, machine 0123456789ab)") {
		t.Fatalf("the refusal does not name the holder: %v", err)
	}
	if s.node.lockToken != "first-deployer" || len(s.node.callsOf("switch")) != 0 {
		t.Fatalf("the live lock was taken over (holder now %q, %d switches)", s.node.lockToken, len(s.node.callsOf("switch")))
	}
	if s.clock.slept < 5*time.Second {
		t.Fatalf("the run waited %s, want lock_wait (5s)", s.clock.slept)
	}
}

func phaseDuration(res *Result, name string) time.Duration {
	for _, p := range res.Phases {
		if p.Name == name {
			return p.Duration
		}
	}
	return -1
}

// A holder proven dead on this very machine is taken over at once, with a warning that
// names it and says why.
func TestDeployTakesOverTheLockOfADeadProcessOnThisMachine(t *testing.T) {
	self := records.ThisProcess()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.lockToken = "dead-deployer"
	s.node.lockHolderLines = strings.Join([]string{
		"token=dead-deployer", "host=" + self.Host, "machine=" + self.MachineID, "boot=" + self.BootID,
		"pidns=" + self.PIDNamespace, "pid=" + strconv.Itoa(cmd.Process.Pid), "start=42", "what=deploy",
	}, "\n")
	res, err := s.deploy()
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(res.Warnings, "\n")
	if !strings.Contains(w, "took over the node lock of a deploy from host "+self.Host+" (process "+strconv.Itoa(cmd.Process.Pid)) ||
		!strings.Contains(w, "its process is gone from this machine") {
		t.Fatalf("warnings do not name the dead holder and why: %q", res.Warnings)
	}
	if n := len(s.node.callsOf("switch")); n != 1 || s.node.lockToken != "" || phaseDuration(res, PhaseLockNode) > 0 {
		t.Fatalf("after the takeover: %d switches, lock %q left, waited %s for the lock", n, s.node.lockToken, phaseDuration(res, PhaseLockNode))
	}
}

// An acquire that took the lock on the node but whose answer was lost (the operator's
// Ctrl-C, or a cut connection, while the lock script ran) leaves no lock behind: the
// run releases it by its own token before it reports the failure. Faked because the
// instant a real cancel lands inside the script cannot be chosen on demand; the lab
// test TestLabCLIExports (cmd/fediversity) checks the node's lock file after a real
// SIGTERM during a verdict pass.
func TestAcquireWhoseAnswerWasLostLeavesNoLock(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.lockAnswerLost = context.Canceled
	_, err := s.deploy()
	wantDeployErr(t, err, PhaseLockNode)
	if s.node.lockToken != "" {
		t.Fatalf("the node keeps the lock %q of a run that failed to take it", s.node.lockToken)
	}
	if n := len(s.node.callsOf("switch")); n != 0 {
		t.Fatalf("%d switches after the lock was not taken", n)
	}
}

// The release after a lost answer removes nothing another run holds.
func TestAcquireWhoseAnswerWasLostKeepsAnotherRunsLock(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.lockToken = "another-run"
	s.node.lockAnswerLost = context.Canceled
	s.opts.Timings.LockWait = time.Second
	_, err := s.deploy()
	wantDeployErr(t, err, PhaseLockNode)
	if s.node.lockToken != "another-run" {
		t.Fatalf("another run's lock was replaced by %q", s.node.lockToken)
	}
}

// Issue 39, item 9: a reboot nobody asked for between the switch and the boot entry
// empties the node's /run, and the lock with it. The run notices (the lock is gone when
// it asks before the boot entry), writes no record and no boot entry, and fails saying
// the node's /run was emptied. On the current main it wrote both over the new boot.
func TestUnplannedRebootBeforeTheBootEntryFailsTheRun(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.atSwitch = func() { s.node.rebootsAt = s.clock.now.Add(time.Second) }
	res, err := Deploy(context.Background(), s.node, s.opts)
	if err == nil || !errors.Is(err, ErrLockVanished) || !strings.Contains(err.Error(), "/run was emptied") {
		t.Fatalf("err = %v", err)
	}
	if n := len(s.node.callsOf("finalize")); n != 0 || s.node.verdictRecord != nil || s.node.profile != testPrevious {
		t.Fatalf("after the reboot: %d boot entries written, record %q, profile %s", n, s.node.verdictRecord, s.node.profile)
	}
	if res.Generation != 0 {
		t.Fatalf("generation %d claimed", res.Generation)
	}
}

// Issue 39, item 9: a lock error says what to do for its cause: the command the node
// lacks (named, as the script found it missing), or the transport; never the blanket
// "the node needs sh, flock, stat and date in its PATH". On the current main every
// lock error carried that hint, whatever the cause.
func TestLockErrorSaysWhatToDoForItsCause(t *testing.T) {
	for _, tc := range []struct {
		name             string
		fails            RunResult
		wantErr, wantFix string
	}{
		{"a command is missing", RunResult{ExitCode: 127, Stderr: []byte("missing command flock (PATH=/run/current-system/sw/bin:/usr/bin:/bin)\n")},
			"the lock script on the node needs flock, which is not on its PATH (/run/current-system/sw/bin:/usr/bin:/bin)", "install it in the node's system"},
		{"the script fails otherwise", RunResult{ExitCode: 1, Stderr: []byte("mkdir: cannot create directory '/run/fediversity': Read-only file system\n")},
			"the lock script on the node exited 1: mkdir: cannot create directory", "read the lock script's error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
			s.node.lockScriptFails = &tc.fails
			_, err := Deploy(context.Background(), s.node, s.opts)
			de := deployErr(t, err, PhaseLockNode)
			if !strings.Contains(de.Err.Error(), tc.wantErr) || !strings.Contains(de.Hint, tc.wantFix) || strings.Contains(de.Hint, "stat and date") {
				t.Fatalf("err %q, hint %q", de.Err, de.Hint)
			}
		})
	}
}

// heartbeatNode answers the lock script's heartbeats: the first as a cut connection
// fails, the second "busy" (the guard stayed taken), the rest "ok"; it sends the time
// of each on beats. Only Run is called by the heartbeat; the embedded nil Transport
// would panic on anything else.
type heartbeatNode struct {
	Transport
	mu    sync.Mutex
	n     int
	beats chan time.Time
}

func (n *heartbeatNode) Run(_ context.Context, argv []string, _ RunOptions) (RunResult, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if op := argv[len(argv)-2]; op != "heartbeat" {
		return RunResult{}, errors.New("unexpected lock operation " + op)
	}
	n.n++
	n.beats <- time.Now()
	switch n.n {
	case 1:
		return RunResult{}, ErrUnreachable
	case 2:
		return RunResult{Stdout: []byte("busy\n")}, nil
	}
	return RunResult{Stdout: []byte("ok\n")}, nil
}

// The heartbeat beats every l.beat (15 s: each beat costs the node a session and two
// commands for as long as the deploy runs), and a beat that failed or found the guard
// busy is tried again after l.retry (5 s), so that a cut connection still gets about
// eleven tries before the lock is 60 s stale. The intervals are shortened here, with a
// fake transport: a real node cannot fail a round trip on demand at an exact moment.
func TestHeartbeatRetriesAFailedBeatSoonerThanItBeats(t *testing.T) {
	const beat, retry = 2 * time.Second, 100 * time.Millisecond
	if lockHeartbeat != 3*lockHeartbeatRetry || lockStale/lockHeartbeatRetry < 11 {
		t.Fatalf("heartbeat %s, retry %s, stale %s: want a beat three retries long and at least 11 retries in a stale age", lockHeartbeat, lockHeartbeatRetry, lockStale)
	}
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	node := &heartbeatNode{beats: make(chan time.Time, 8)}
	var warnings []string
	e := &runEnv{t: node, o: s.opts, warnings: &warnings}
	l := &nodeLock{holder: records.LockHolder{Token: "this-run"}, stop: make(chan struct{}), done: make(chan struct{}), beat: beat, retry: retry}
	at := []time.Time{time.Now()}
	go e.heartbeat(context.Background(), l)
	for len(at) < 5 {
		select {
		case b := <-node.beats:
			at = append(at, b)
		case <-time.After(time.Minute):
			t.Fatalf("%d beats in a minute, want 4", len(at)-1)
		}
	}
	close(l.stop)
	<-l.done
	// After the start: a beat (cut), its retry (busy), a retry (ok), then a whole beat.
	for i, want := range []time.Duration{beat, retry, retry, beat} {
		gap := at[i+1].Sub(at[i])
		if gap < want || (want == retry && gap >= beat/2) {
			t.Fatalf("beat %d came %s after the one before, want %s", i+1, gap, want)
		}
	}
}
