package deploybody

// The node lock: one deploy or verdict pass at a time on a node, whoever runs it.
//
// The lock lives on the node (/run/fediversity/node.lock), so it holds across
// deployers, state directories and transports. Every operation on it runs under
// flock(1) on a guard file, so checking and taking it is one atomic step on the node.
// The holder touches the file every lockHeartbeat; a lock whose heartbeat is older
// than lockStale, or whose holder is proven dead (a process of this very machine, boot
// and PID namespace that no longer runs: holderGone), is taken over. A host name is
// never proof: two deployers may share one (NixOS' default "nixos", cloned CI
// machines). A connection that drops and comes back does not lose the lock: the lock
// is the node's file and this run's token, not the connection. A run that finds its
// token replaced (another deployer took a lock it saw as stale) stops before it
// switches or writes the boot entry, and says who took the node.

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LockFile is where a node's lock lives. /run is emptied at boot, and so is the lock.
const LockFile = "/run/fediversity/node.lock"

const (
	// lockHeartbeat is how often the holder touches its lock.
	lockHeartbeat = 5 * time.Second
	// lockStale is how old a heartbeat may be before the lock is taken over: long
	// enough for a connection to come back from a cut (and for a stalled Incus daemon),
	// short enough that lock_wait's default outlives it.
	lockStale = 60 * time.Second
	// lockCallLimit bounds one lock operation on the node.
	lockCallLimit = 20 * time.Second
)

// lockScript is run as `sh -c lockScript sh <op> <token> [<holder> <stale seconds> <takeover token>]`,
// or for the record operation `… record <token> <verdict record file> <last good file>
// <toplevel> <GC root> <last good JSON>` (the last four empty: no last good system).
// It prints "acquired", "ok", "released", "gone" (no lock at all: the node's /run was
// emptied, by a reboot or a snapshot restore), or "held <age seconds>" / "lost"
// followed by the holder's lines; the record operation adds "recorded" or "unrecorded
// <error>", then "pinned" or "unpinned <error>" when it was given a last good system.
const lockScript = `set -u
umask 077
` + requireToolsHead + lockTools + requireToolsTail + `f=` + LockFile + `
mkdir -p "${f%/*}"
exec 9>>"$f.guard"
flock -w 10 9 || { echo busy; exit 0; }
held=""; age=0; cur=""
if [ -f "$f" ]; then
  held=$(cat "$f")
  age=$(( $(date +%s) - $(stat -c %Y "$f") ))
  cur=$(sed -n 's/^token=//p' "$f")
fi
case "$1" in
acquire)
  if [ -z "$held" ] || [ "$cur" = "$2" ] || [ "$age" -gt "$4" ] || { [ -n "$5" ] && [ "$cur" = "$5" ]; }; then
    printf '%s\n' "$3" >"$f.new" && mv -f "$f.new" "$f" && echo acquired
    if [ -n "$held" ] && [ "$cur" != "$2" ]; then echo "took-over $age"; printf '%s\n' "$held"; fi
  else
    echo "held $age"; printf '%s\n' "$held"
  fi ;;
heartbeat)
  if [ "$cur" = "$2" ]; then touch "$f" && echo ok
  elif [ -z "$held" ]; then echo gone
  else echo lost; printf '%s\n' "$held"; fi ;;
release)
  if [ "$cur" = "$2" ]; then rm -f "$f" && echo released
  elif [ -z "$held" ]; then echo released
  else echo lost; printf '%s\n' "$held"; fi ;;
record)
  # The heartbeat, then, unless the lock is another run's or gone: the verdict record $3 from
  # stdin and, when $4 is set, the last good system $5 pinned by the GC root $6 and its
  # record $4 (the JSON $7), each by the script that writes it on its own (neither holds
  # a single quote), each failure a line of its own.
  if [ "$cur" = "$2" ]; then touch "$f" && echo ok
  elif [ -z "$held" ]; then echo gone; exit 0
  else echo lost; printf '%s\n' "$held"; exit 0; fi
  if e=$(sh -c '` + writeRecordScript + `' sh "$3" ` + legacyVerdictRecordFile + ` 2>&1); then echo recorded
  else printf 'unrecorded %s\n' "$(printf '%s\n' "$e" | head -n 1)"; fi
  if [ -n "${4:-}" ]; then
    if e=$(printf '%s' "$7" | sh -c '` + writeLastGoodScript + `' sh "$4" "$5" "$6" ` + legacyLastGoodFile + ` 2>&1); then echo pinned
    else printf 'unpinned %s\n' "$(printf '%s\n' "$e" | head -n 1)"; fi
  elif [ ! -e ` + LastGoodFile + ` ] && [ -f ` + legacyLastGoodFile + ` ] && [ ! -L ` + legacyLastGoodFile + ` ]; then
    # An older version's last good system, not replaced by this run: moved to the new place.
    sh -c '` + writeRecordScript + `' sh ` + LastGoodFile + ` ` + legacyLastGoodFile + ` <` + legacyLastGoodFile + ` || true
  fi ;;
esac
`

// lockTools are the commands lockScript calls (NixOS' default system packages:
// coreutils, util-linux, gnused).
const lockTools = "mkdir flock cat date stat sed mv rm touch head sh"

// lockPath is where the lock's tools are looked up (fixed: the heartbeat runs beside
// the phases, which may change the run's toplevel).
var lockPath = []string{"/run/current-system/sw/bin", "/usr/bin", "/bin"}

// LockHolder is who holds a node's lock, as written into the lock.
type LockHolder struct {
	Token string
	// Host is the deployer's host name, for people: it proves nothing (two deployers
	// may share one).
	Host string
	// MachineID (an app-specific hash of /etc/machine-id, LockMachineID), BootID (the
	// kernel's boot id) and PIDNamespace (the inode of /proc/self/ns/pid) say where the
	// process runs; PID and Start (its start
	// time in clock ticks since boot) which process it is there, so a reused PID is not
	// mistaken for a live holder. Together they name one deployer process.
	MachineID    string
	BootID       string
	PIDNamespace string
	PID          int
	Start        string
	Since        time.Time
	// What is "deploy" or "verdict"; Toplevel is what it deploys or judges.
	What     string
	Toplevel string
	// Age is how long ago the holder last touched the lock (when read from the node).
	Age time.Duration
}

func (h LockHolder) String() string {
	what := h.What
	if what == "" {
		what = "run"
	}
	s := fmt.Sprintf("a %s", what)
	if h.Toplevel != "" {
		s += " of " + h.Toplevel
	}
	s += fmt.Sprintf(" from host %s (process %d", orNamed(h.Host), h.PID)
	if h.MachineID != "" {
		s += ", machine " + shortID(h.MachineID)
	}
	s += ")"
	if !h.Since.IsZero() {
		s += " since " + h.Since.UTC().Format(time.RFC3339)
	}
	if h.Age > 0 {
		s += fmt.Sprintf(", last heartbeat %s ago", h.Age.Round(time.Second))
	}
	return s
}

// shortID is the first 12 characters of a machine id: enough to tell machines apart
// in a message.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func orNamed(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func (h LockHolder) lines() string {
	clean := func(s string) string { return strings.NewReplacer("\n", " ", "\r", " ").Replace(s) }
	return strings.Join([]string{
		"token=" + clean(h.Token),
		"host=" + clean(h.Host),
		"machine=" + clean(h.MachineID),
		"boot=" + clean(h.BootID),
		"pidns=" + clean(h.PIDNamespace),
		"pid=" + strconv.Itoa(h.PID),
		"start=" + clean(h.Start),
		"since=" + h.Since.UTC().Format(time.RFC3339),
		"what=" + clean(h.What),
		"toplevel=" + clean(h.Toplevel),
	}, "\n")
}

func parseLockHolder(lines []string, age time.Duration) LockHolder {
	h := LockHolder{Age: age}
	for _, l := range lines {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		switch k {
		case "token":
			h.Token = v
		case "host":
			h.Host = v
		case "machine":
			h.MachineID = v
		case "boot":
			h.BootID = v
		case "pidns":
			h.PIDNamespace = v
		case "pid":
			h.PID, _ = strconv.Atoi(v)
		case "start":
			h.Start = v
		case "since":
			h.Since, _ = time.Parse(time.RFC3339, v)
		case "what":
			h.What = v
		case "toplevel":
			h.Toplevel = v
		}
	}
	return h
}

// ThisProcess is the holder identity of this process (token, since, what and toplevel
// are filled by the run).
func ThisProcess() LockHolder {
	host, _ := os.Hostname()
	h := LockHolder{
		Host:         host,
		MachineID:    LockMachineID(firstFileLine("/etc/machine-id", "/var/lib/dbus/machine-id")),
		BootID:       firstFileLine("/proc/sys/kernel/random/boot_id"),
		PIDNamespace: pidNamespace(),
		PID:          os.Getpid(),
	}
	// /proc must be this PID namespace's own (a process unshared into a new namespace
	// without a /proc of its own sees its parent's): then /proc/self is os.Getpid().
	if pid, start := procStat("/proc/self/stat"); pid == h.PID {
		h.Start = start
	} else {
		h.PIDNamespace = "" // this process cannot prove any other one dead
	}
	return h
}

// lockAppID names this use of the machine id: the lock's hash of it is this project's
// own, and tells nothing of the id to whoever reads the node's lock.
const lockAppID = "fediversity node lock holder"

// LockMachineID is the deployer's machine id as the node's lock names it: an
// app-specific hash (HMAC-SHA256 keyed with the machine id, over lockAppID, cut to 128
// bits), as machine-id(5) asks of an id shown to others ("" for no machine id). The raw
// id is confidential; the hash still tells two deployers apart, and the same deployer
// from one run to the next.
func LockMachineID(raw string) string {
	if raw == "" {
		return ""
	}
	mac := hmac.New(sha256.New, []byte(raw))
	mac.Write([]byte(lockAppID))
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// firstFileLine is the first non-empty first line of the files, "" when none has one.
func firstFileLine(files ...string) string {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n"); line != "" {
			return line
		}
	}
	return ""
}

// pidNamespace is this process's PID namespace ("pid:[4026531836]"), "" when unknown.
func pidNamespace() string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return ns
}

// processStart is field 22 of /proc/<pid>/stat (start time since boot), "" when unknown.
func processStart(pid int) string {
	got, start := procStat(fmt.Sprintf("/proc/%d/stat", pid))
	if got != pid {
		return ""
	}
	return start
}

// procStat reads a /proc/<pid>/stat file: the pid (field 1) and the start time since
// boot (field 22); 0 and "" when unreadable.
func procStat(file string) (pid int, start string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, ""
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, ""
	}
	pid, _ = strconv.Atoi(strings.TrimSpace(strings.SplitN(s[:i], "(", 2)[0]))
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return pid, ""
	}
	return pid, f[19]
}

// holderGone tells whether the holder h is proven dead: it ran on this very machine, in
// this boot and this PID namespace (the only place where its PID means the same
// process), and its PID no longer runs or runs another process (another start time).
// A holder from another machine, boot or namespace, or one that does not say where it
// ran (a lock written by an older deployer), is never proven dead: its lock is taken
// over only once its heartbeat is stale. The host name is not compared: it proves
// nothing.
func holderGone(h LockHolder, self LockHolder) bool {
	if h.MachineID == "" || h.BootID == "" || h.PIDNamespace == "" || h.PID <= 0 || h.Start == "" {
		return false
	}
	if self.Start == "" || h.MachineID != self.MachineID || h.BootID != self.BootID || h.PIDNamespace != self.PIDNamespace {
		return false
	}
	return processStart(h.PID) != h.Start
}

// nodeLock is this run's hold on the node's lock. Its heartbeat runs on a context of
// its own (it outlives the run's: a snapshot restore at the end of a cancelled run
// still runs under the lock) that unlockNode cancels.
type nodeLock struct {
	holder LockHolder
	stop   chan struct{}
	done   chan struct{}
	cancel context.CancelFunc

	mu   sync.Mutex
	lost *LockHolder // who took the lock from this run
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

// lockOp runs one operation of lockScript on the node.
func lockOp(ctx context.Context, t Transport, args ...string) ([]string, error) {
	return lockOpWith(ctx, t, nil, args...)
}

// lockOpWith is lockOp with stdin for the operation (the record operation's verdict record).
func lockOpWith(ctx context.Context, t Transport, stdin []byte, args ...string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, lockCallLimit)
	defer cancel()
	argv := append([]string{"sh", "-c", lockScript, "sh"}, args...)
	res, err := t.Run(ctx, argv, RunOptions{Path: lockPath, Stdin: stdin, Privileged: true}) // /run/fediversity is root's
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
	return "read the lock script's error above on the node (" + LockFile + " and its .guard beside it), then apply again"
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
	var holder LockHolder
	for attempt := 1; attempt <= maxSamples; attempt++ {
		out, err := lockOp(ctx, e.t, "acquire", self.Token, self.lines(), stale, takeover)
		if err != nil {
			e.releaseUnanswered(ctx, self.Token)
			return nil, "", withHint(fmt.Errorf("taking the node lock %s: %w", LockFile, err), lockHint(err))
		}
		switch {
		case out[0] == "acquired":
			hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
			lock := &nodeLock{holder: self, stop: make(chan struct{}), done: make(chan struct{}), cancel: hcancel}
			go e.heartbeat(hctx, lock)
			return lock, e.acquiredNote(ctx, out, self, takeover, attempt), nil
		case strings.HasPrefix(out[0], "held "):
			age, _ := strconv.Atoi(strings.TrimPrefix(out[0], "held "))
			holder = parseLockHolder(out[1:], time.Duration(age)*time.Second)
			if holderGone(holder, e.o.Holder) {
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
		fmt.Sprintf("let that run finish and apply again, or raise timings.lock_wait; a lock whose holder stopped is taken over once its heartbeat is %s old, or at once when its process is gone from this very machine (or remove %s on the node)", lockStale, LockFile))
}

// acquiredNote is the lock-node phase's note once the lock is taken (out is the
// acquire's answer), warning when it took over another run's lock.
func (e *runEnv) acquiredNote(ctx context.Context, out []string, self LockHolder, takeover string, attempt int) string {
	note := "locked"
	if len(out) > 1 && strings.HasPrefix(out[1], "took-over ") {
		age, _ := strconv.Atoi(strings.TrimPrefix(out[1], "took-over "))
		prev := parseLockHolder(out[2:], time.Duration(age)*time.Second)
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
// heartbeat that finds another holder records it. A failed heartbeat (a cut
// connection) is tried again next tick.
func (e *runEnv) heartbeat(ctx context.Context, l *nodeLock) {
	defer close(l.done)
	tick := time.NewTicker(lockHeartbeat)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		epoch := l.currentEpoch()
		out, err := lockOp(ctx, e.t, "heartbeat", l.holder.Token)
		if err != nil {
			e.log(ctx, LevelDebug, PhaseLockNode, "lock heartbeat failed; trying again", map[string]any{"error": err.Error()})
			continue
		}
		if out[0] == "gone" {
			// Nobody holds it (the node's /run was emptied): take it back, so that no
			// other run takes the node meanwhile, and tell the run (vanishedError): what
			// it read of the node before may be of a boot that is gone.
			l.sawVanished(epoch)
			e.log(ctx, LevelWarn, PhaseLockNode, "the node lock was gone (the node's /run was emptied); taking it again", nil)
			stale := strconv.Itoa(int(lockStale / time.Second))
			if _, err := lockOp(ctx, e.t, "acquire", l.holder.Token, l.holder.lines(), stale, ""); err != nil {
				e.log(ctx, LevelDebug, PhaseLockNode, "taking the lock again failed; trying next tick", map[string]any{"error": err.Error()})
			}
			continue
		}
		if out[0] == "lost" {
			l.recordLost(parseLockHolder(out[1:], 0), true)
			return
		}
	}
}

// recordLost notes who took the lock; replace false keeps an earlier finding.
func (l *nodeLock) recordLost(h LockHolder, replace bool) {
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
	e.warn(ctx, PhaseLockNode, fmt.Sprintf("the node lock %s may be left by this run's unanswered acquire; the next run takes it over once its heartbeat is %s old", LockFile, lockStale))
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
		e.warn(ctx, PhaseConclude, fmt.Sprintf("the node lock %s was not released (%v); the next run takes it over once its heartbeat is %s old", LockFile, err, lockStale))
	case out[0] == "lost":
		l.recordLost(parseLockHolder(out[1:], 0), false)
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
		l.recordLost(parseLockHolder(out[1:], 0), true)
	case err == nil && out[0] == "gone":
		l.sawVanished(epoch)
	}
	if err := l.lostError(e.o.Node); err != nil {
		return err
	}
	return l.vanishedError(e.o.Node)
}
