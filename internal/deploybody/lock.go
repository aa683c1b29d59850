package deploybody

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

const (
	// lockHeartbeat is how often the holder touches its lock: four times in a stale
	// age. Each beat is a round trip and a few commands on the node (a session, the
	// lock's script, flock and touch: about 40 ms of an idle lab node's CPU, twice
	// that with sixteen nodes deploying on two cores), for as long as the deploy runs;
	// at every 5 s they were about a third of the sessions a node served in a 16-node
	// deploy (docs/testing.md#node-execs).
	lockHeartbeat = 15 * time.Second
	// lockHeartbeatRetry is how soon a heartbeat that failed (a cut connection, a
	// daemon restarting) is tried again: a run rides out an outage of nearly a stale
	// age, as it did when every beat came 5 s apart.
	lockHeartbeatRetry = 5 * time.Second
	// lockStale is how old a heartbeat may be before the lock is taken over: long
	// enough for a connection to come back from a cut (and for a stalled Incus daemon),
	// short enough that lock_wait's default outlives it.
	lockStale = 60 * time.Second
	// lockCallLimit bounds one lock operation on the node.
	lockCallLimit = 20 * time.Second
)

// nodeLock is this run's hold on the node's lock. Its heartbeat runs on a context of
// its own (it outlives the run's: a snapshot restore at the end of a cancelled run
// still runs under the lock) that unlockNode cancels.
type nodeLock struct {
	holder records.LockHolder
	stop   chan struct{}
	done   chan struct{}
	cancel context.CancelFunc
	// beat and retry are lockHeartbeat and lockHeartbeatRetry (shorter in tests).
	beat, retry time.Duration

	mu   sync.Mutex
	lost *records.LockHolder // who took the lock from this run
	// vanished: the node answered that there was no lock at all, after this run took
	// it: its /run was emptied (a reboot this run did not ask for, a restore). epoch
	// counts the run's own retakes after its own reboot (relock): an answer asked for
	// before one of them says nothing about the lock after it.
	vanished bool
	epoch    int
}

// ErrLockLost is wrapped by the error of a run whose lock another deploy took.
var ErrLockLost = errors.New("another run took the node's lock")

func newToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// lockOp runs one operation of records.LockScript on the node.
func lockOp(ctx context.Context, t Transport, args ...string) ([]string, error) {
	return lockOpWith(ctx, t, nil, args...)
}

// lockOpWith is lockOp with stdin for the operation (the record operation's verdict record).
func lockOpWith(ctx context.Context, t Transport, stdin []byte, args ...string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, lockCallLimit)
	defer cancel()
	argv := append([]string{"sh", "-c", records.LockScript, "sh"}, args...)
	res, err := t.Run(ctx, argv, RunOptions{Path: records.ToolPath, Stdin: stdin, Privileged: true}) // /run/fediversity is root's
	if err != nil {
		return nil, err
	}
	out := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if res.ExitCode != 0 || len(out) == 0 || out[0] == "" {
		return nil, nodeScriptError("the lock script", res)
	}
	return out, nil
}

// lockHint is what to do about a lock operation that failed with err: the command the
// node lacks, the transport, or the script's own error.
func lockHint(err error) string {
	switch {
	case errors.Is(err, ErrMissingCommand):
		return "install it in the node's system (NixOS' default system packages have it), then apply again"
	case errors.Is(err, ErrUnreachable), errors.Is(err, ErrRefused):
		return "check that the node answers with the transport's settings, then apply again"
	case errors.Is(err, context.Canceled):
		return interruptedHint
	case errors.Is(err, context.DeadlineExceeded):
		return "the node did not answer the lock script in time; check its load and the transport, then apply again"
	}
	return "read the lock script's error above on the node (" + records.LockFile + " and its .guard beside it), then apply again"
}

// lockNode takes the node's lock for a run of toplevel, waiting up to
// timings.lock_wait for another holder. It holds no lock (nil) on a silent node.
func (e *runEnv) lockNode(ctx context.Context, toplevel string, nodeSilent bool) (*nodeLock, string, error) {
	if nodeSilent {
		e.warn(ctx, PhaseLockNode, "the node did not answer, so this pass holds no lock on it")
		return nil, "not locked: node silent", nil
	}
	self := e.o.Holder
	self.Token = newToken()
	self.Since = e.o.Clock.Now()
	self.What = "deploy"
	if e.verdictOnly {
		self.What = "verdict"
	}
	self.Toplevel = toplevel
	if self.Toplevel == "" {
		self.Toplevel = e.o.Toplevel
	}
	stale := strconv.Itoa(int(lockStale / time.Second))
	deadline := e.o.Clock.Now().Add(e.o.Timings.LockWait)
	takeover := ""
	var holder records.LockHolder
	for attempt := 1; attempt <= maxSamples; attempt++ {
		out, err := lockOp(ctx, e.t, "acquire", self.Token, self.Lines(), stale, takeover)
		if err != nil {
			e.releaseUnanswered(ctx, self.Token)
			return nil, "", withHint(fmt.Errorf("taking the node lock %s: %w", records.LockFile, err), lockHint(err))
		}
		switch {
		case out[0] == "acquired":
			hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
			lock := &nodeLock{holder: self, stop: make(chan struct{}), done: make(chan struct{}), cancel: hcancel,
				beat: lockHeartbeat, retry: lockHeartbeatRetry}
			go e.heartbeat(hctx, lock)
			return lock, e.acquiredNote(ctx, out, self, takeover, attempt), nil
		case strings.HasPrefix(out[0], "held "):
			age, _ := strconv.Atoi(strings.TrimPrefix(out[0], "held "))
			holder = records.ParseLockHolder(out[1:], time.Duration(age)*time.Second)
			if records.HolderGone(holder, e.o.Holder) {
				takeover = holder.Token
				continue
			}
			if attempt == 1 {
				e.log(ctx, LevelInfo, PhaseLockNode, "node locked by another run; waiting", map[string]any{"holder": holder.String(), "lock_wait": e.o.Timings.LockWait.String()})
			}
		}
		if !e.o.Clock.Now().Before(deadline) {
			break
		}
		if err := e.sleep(ctx, minDuration(e.o.Timings.SampleInterval, time.Second)); err != nil {
			return nil, "", err
		}
	}
	return nil, "", withHint(fmt.Errorf("node %s is locked by %s; waited timings.lock_wait (%s)", e.o.Node, holder, e.o.Timings.LockWait),
		fmt.Sprintf("let that run finish and apply again, or raise timings.lock_wait; a lock whose holder stopped is taken over once its heartbeat is %s old, or at once when its process is gone from this very machine (or remove %s on the node)", lockStale, records.LockFile))
}

// acquiredNote is the lock-node phase's note once the lock is taken (out is the
// acquire's answer), warning when it took over another run's lock.
func (e *runEnv) acquiredNote(ctx context.Context, out []string, self records.LockHolder, takeover string, attempt int) string {
	note := "locked"
	if len(out) > 1 && strings.HasPrefix(out[1], "took-over ") {
		age, _ := strconv.Atoi(strings.TrimPrefix(out[1], "took-over "))
		prev := records.ParseLockHolder(out[2:], time.Duration(age)*time.Second)
		why := fmt.Sprintf("its heartbeat was %s old", prev.Age)
		if takeover != "" && prev.Token == takeover {
			why = "its process is gone from this machine"
		}
		note = "locked, taking over the lock of " + prev.String()
		e.warn(ctx, PhaseLockNode, fmt.Sprintf("took over the node lock of %s: %s", prev, why))
	}
	if attempt > 1 {
		note += fmt.Sprintf(" after waiting %s", e.o.Clock.Now().Sub(self.Since).Round(time.Second))
	}
	return note
}

func minDuration(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// heartbeat touches the lock until the run ends (ctx is the heartbeat's own); a
// heartbeat that finds another holder records it. A heartbeat that failed (a cut
// connection) or did not get the guard ("busy": another operation held it 10 s) is
// tried again after l.retry, the others every l.beat.
func (e *runEnv) heartbeat(ctx context.Context, l *nodeLock) {
	defer close(l.done)
	next := time.NewTimer(l.beat)
	defer next.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-next.C:
		}
		next.Reset(l.beat)
		epoch := l.currentEpoch()
		out, err := lockOp(ctx, e.t, "heartbeat", l.holder.Token)
		if err != nil || out[0] == "busy" {
			why := "the node lock's guard was busy"
			if err != nil {
				why = err.Error()
			}
			e.log(ctx, LevelDebug, PhaseLockNode, "lock heartbeat failed; trying again", map[string]any{"error": why, "in": l.retry.String()})
			next.Reset(l.retry)
			continue
		}
		if out[0] == "gone" {
			// Nobody holds it (the node's /run was emptied): take it back, so that no
			// other run takes the node meanwhile, and tell the run (vanishedError): what
			// it read of the node before may be of a boot that is gone.
			l.sawVanished(epoch)
			e.log(ctx, LevelWarn, PhaseLockNode, "the node lock was gone (the node's /run was emptied); taking it again", nil)
			stale := strconv.Itoa(int(lockStale / time.Second))
			if _, err := lockOp(ctx, e.t, "acquire", l.holder.Token, l.holder.Lines(), stale, ""); err != nil {
				e.log(ctx, LevelDebug, PhaseLockNode, "taking the lock again failed; trying again", map[string]any{"error": err.Error(), "in": l.retry.String()})
				next.Reset(l.retry)
			}
			continue
		}
		if out[0] == "lost" {
			l.recordLost(records.ParseLockHolder(out[1:], 0), true)
			return
		}
	}
}

// recordLost notes who took the lock; replace false keeps an earlier finding.
func (l *nodeLock) recordLost(h records.LockHolder, replace bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if replace || l.lost == nil {
		l.lost = &h
	}
}

func (l *nodeLock) currentEpoch() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch
}

// sawVanished records that the node had no lock when asked at epoch.
func (l *nodeLock) sawVanished(epoch int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if epoch == l.epoch {
		l.vanished = true
	}
}

// relocked is the run's own retake after the reboot it asked for: the lock it had was
// gone with the boot, as expected.
func (l *nodeLock) relocked() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch++
	l.vanished = false
}

// ErrLockVanished is wrapped by the error of a run whose node lost its lock while the
// run held it: the node's /run was emptied by a reboot the run did not ask for (or a
// restore), so what the run read of the node may be of a boot that is gone.
var ErrLockVanished = errors.New("the node's lock vanished while this run held it")

// vanishedError is the error of a run whose lock vanished, nil while it did not.
func (l *nodeLock) vanishedError(node string) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.vanished {
		return nil
	}
	return withHint(fmt.Errorf("%w: node %s's /run was emptied during the run (a reboot nobody asked this run for, or a restore of the node), so what this run judged may be of a boot that is gone; it stops before it writes the boot entry", ErrLockVanished, node),
		"apply again: the next plan reads what the node runs and boots now, and the next run judges it anew")
}

// lostError is the error of a run whose lock another run took, nil while it holds it
// (and nil for no lock at all).
func (l *nodeLock) lostError(node string) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		return nil
	}
	return withHint(fmt.Errorf("%w: while this run was cut off from node %s, %s took the node's lock", ErrLockLost, node, l.lost),
		"another deploy took the node: this run stopped; the node runs what that run deploys. Apply again once it is done")
}

// token is the lock's token, "" for no lock.
func (l *nodeLock) token() string {
	if l == nil {
		return ""
	}
	return l.holder.Token
}

// unansweredReleaseLimit bounds the release after an acquire whose answer was lost: an
// interrupted run should not hang on a node that does not answer.
const unansweredReleaseLimit = 5 * time.Second

// releaseUnanswered releases, by this run's token, a lock an acquire may have taken on
// the node though its answer never came back (the run was cancelled, or the connection
// cut, while the script ran). Without it the node would keep a lock no run holds until
// its heartbeat is lockStale old. The token is this run's alone, so the release removes
// nothing another run holds; a node that does not answer is left to the stale rule.
func (e *runEnv) releaseUnanswered(ctx context.Context, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unansweredReleaseLimit)
	defer cancel()
	if out, err := lockOp(ctx, e.t, "release", token); err == nil && out[0] == "released" {
		return
	}
	e.warn(ctx, PhaseLockNode, fmt.Sprintf("the node lock %s may be left by this run's unanswered acquire; the next run takes it over once its heartbeat is %s old", records.LockFile, lockStale))
}

// unlockNode stops the heartbeat and releases the lock. It runs also when the run's
// context is done (the operator or the CLI went away), on a context of its own.
func (e *runEnv) unlockNode(ctx context.Context, l *nodeLock) {
	if l == nil {
		return
	}
	close(l.stop)
	l.cancel()
	<-l.done
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockCallLimit)
	defer cancel()
	out, err := lockOp(ctx, e.t, "release", l.holder.Token)
	switch {
	case err != nil:
		e.warn(ctx, PhaseConclude, fmt.Sprintf("the node lock %s was not released (%v); the next run takes it over once its heartbeat is %s old", records.LockFile, err, lockStale))
	case out[0] == "lost":
		l.recordLost(records.ParseLockHolder(out[1:], 0), false)
	}
}

// confirmLock asks the node, now, whether this run still holds its lock: the
// heartbeat's answer may be seconds old, and a switch or a boot entry must not be
// written by a run another run took the node from. A node that does not answer is no
// answer: the phase that follows meets the same fault. ctx may be one of the caller's
// own (the end of a run whose own context is done).
func (e *runEnv) confirmLock(ctx context.Context, l *nodeLock) error {
	if l == nil {
		return nil
	}
	epoch := l.currentEpoch()
	out, err := lockOp(ctx, e.t, "heartbeat", l.holder.Token)
	switch {
	case err == nil && out[0] == "lost":
		l.recordLost(records.ParseLockHolder(out[1:], 0), true)
	case err == nil && out[0] == "gone":
		l.sawVanished(epoch)
	}
	if err := l.lostError(e.o.Node); err != nil {
		return err
	}
	return l.vanishedError(e.o.Node)
}
