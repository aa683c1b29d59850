package deploybody

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// What switch-to-configuration's exit code and output say, read the way
// pkgs/by-name/sw/switch-to-configuration-ng/src/main.rs writes them, and what the
// deploy does about each (docs/activation.md#nixos-contract).
//
// Its `die()` exits with errno, not 1: "Could not acquire lock" exits 11 (EWOULDBLOCK
// of flock), and "This is not a NixOS installation!" exits with the errno its failed
// check of /etc/NIXOS left (2, ENOENT). So the output is read before the exit code:
// an exit 2 that says "not NixOS" is not a failed activation.

// SwitchExitError is a detached switch-to-configuration run that exited non-zero where
// the caller needed it to succeed (the boot entry's `boot`, the revert's): the caller
// reads Result's exit code and output as the switch's.
type SwitchExitError struct {
	Action   string
	Toplevel string
	Result   SwitchResult
}

func (e *SwitchExitError) Error() string {
	return fmt.Sprintf("switch-to-configuration %s exited %d: %s", e.Action, e.Result.ExitCode, switchDiagnosis(e.Action, e.Result))
}

// The exit codes of switch-to-configuration the deploy tells apart.
const (
	switchExitActivationFailed = 2   // "Failed to run activate script": /run/current-system is updated all the same
	switchExitUnitsFailed      = 4   // some unit failed after the switch
	switchExitLocked           = 11  // another switch holds /run/nixos/switch-to-configuration.lock
	switchExitNeedsReboot      = 100 // init-interface-version differs: nothing was activated
	switchExitNotFound         = 127 // the shell found no bin/switch-to-configuration
)

// SwitchLockFile is switch-to-configuration's own lock. The deploy only reads who holds
// it (/proc/locks), never takes it: a run of ours never stands in a real switch's way.
const SwitchLockFile = "/run/nixos/switch-to-configuration.lock"

const (
	notNixOSLine    = "This is not a NixOS installation!"
	notRootLine     = "must be run as the root user"
	bootloaderLine  = "Failed to install bootloader"
	lockLine        = "Could not acquire lock"
	activateLine    = "Failed to run activate script"
	usageLinePrefix = "Usage: "
)

// switchLocked says whether a switch was turned away by another switch's lock.
func switchLocked(sr SwitchResult) bool {
	return sr.ExitCode == switchExitLocked || strings.Contains(sr.Stderr, lockLine)
}

// activationFailed says whether the activation script failed while the switch went on
// (exit 2, "Failed to run activate script"), as opposed to an exit 2 that is die()'s
// errno before anything ran.
func activationFailed(sr SwitchResult) bool {
	if sr.ExitCode != switchExitActivationFailed {
		return false
	}
	return strings.Contains(sr.Stderr, activateLine) || !strings.Contains(sr.Stderr, notNixOSLine)
}

// activationSnippetLine is the activation script's own report of a failed snippet
// (nixos/modules/system/activation/activation-script.nix).
var activationSnippetLine = regexp.MustCompile(`Activation script snippet '[^']+' failed \(\d+\)`)

// errorLine picks the lines of the switch's output that say what went wrong.
var errorLine = regexp.MustCompile(`(?i)\b(error|failed|fatal|cannot|denied|no such)\b`)

// activationErrorLines are the lines of a switch's output that name what the activation
// script failed on: the snippets it reports failed first, then the other error lines,
// at most maxActivationLines, without the generic "Failed to run activate script".
func activationErrorLines(sr SwitchResult) []string {
	const maxActivationLines = 8
	var snippets, others []string
	for _, l := range strings.Split(sr.Stderr+"\n"+sr.Stdout, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.Contains(l, activateLine):
		case activationSnippetLine.MatchString(l):
			snippets = append(snippets, l)
		case errorLine.MatchString(l) && !strings.HasPrefix(l, "warning: the following units failed"):
			others = append(others, l)
		}
	}
	lines := append(snippets, others...)
	if len(lines) == 0 {
		return []string{activateLine + " (no other line of its output says why; read the node's journal)"}
	}
	return lines[:min(len(lines), maxActivationLines)]
}

// switchDiagnosis says in words why a switch-to-configuration run ended as it did,
// from its output first (see above) and its exit code; for an exit it does not know,
// the first line of its output.
func switchDiagnosis(action string, sr SwitchResult) string {
	out := sr.Stderr + "\n" + sr.Stdout
	switch {
	case strings.Contains(out, notNixOSLine):
		return "the node is not NixOS as switch-to-configuration tells it (it has no /etc/NIXOS and its /etc/os-release does not say ID=nixos): nothing was changed"
	case strings.Contains(out, notRootLine):
		return "switch-to-configuration was not run as root: nothing was changed (an ssh deploy as another user needs `sudo = true` and a sudoers rule)"
	case strings.Contains(out, bootloaderLine):
		return "the boot loader could not be installed (" + firstErrorLine(out, bootloaderLine) + "): the node's boot entries are as they were before this " + action
	case switchLocked(sr):
		return "another switch-to-configuration holds " + SwitchLockFile + ": this " + action + " changed nothing"
	case sr.ExitCode == switchExitNeedsReboot:
		return "the new system's init-interface-version differs from the running system's: it takes effect only after a reboot, and nothing was activated"
	case activationFailed(sr):
		return "the activation script failed: " + strings.Join(activationErrorLines(sr), "; ")
	case sr.ExitCode == switchExitNotFound:
		return "the toplevel has no bin/switch-to-configuration the node can run (" + judge.FirstLine(sr.Stderr, "no output") + "): is it a NixOS system's toplevel?"
	case strings.Contains(out, usageLinePrefix):
		return "switch-to-configuration does not know the action " + action + " (" + judge.FirstLine(sr.Stderr, "no output") + ")"
	}
	return judge.FirstLine(sr.Stderr, "no output")
}

// firstErrorLine is the first line of out that is not skip and reads like an error,
// else skip.
func firstErrorLine(out, skip string) string {
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.Contains(l, skip) && errorLine.MatchString(l) {
			return l
		}
	}
	return skip
}

// neverActivated says whether a switch's output proves it stopped before it activated
// anything, with the reason in words ("" when it does not): not NixOS, not root, a
// boot loader that could not be installed (switch), or no switch program.
func neverActivated(action string, sr SwitchResult) string {
	out := sr.Stderr + "\n" + sr.Stdout
	if strings.Contains(out, notNixOSLine) || strings.Contains(out, notRootLine) ||
		strings.Contains(out, bootloaderLine) || sr.ExitCode == switchExitNotFound ||
		(sr.ExitCode == 1 && strings.Contains(out, usageLinePrefix)) {
		return switchDiagnosis(action, sr)
	}
	return ""
}

// switchLockHolderScript names what holds switch-to-configuration's lock, when the node
// can tell: the flock on the lock file's inode in /proc/locks, its PID, the unit of
// that PID (its cgroup, /proc/<pid>/cgroup) and its command name. It prints "free"
// when no lock is held on the file, else "held <pid> <unit or -> <comm or ->" per
// holder, or "unknown" when /proc/locks cannot be read. It uses only the shell and
// stat (coreutils), which every NixOS login has; it never opens the lock itself.
// $1 the lock file.
const switchLockHolderScript = `[ -e "$1" ] || { echo free; exit 0; }
ino=$(stat -L -c %i "$1" 2>/dev/null) || { echo unknown; exit 0; }
[ -r /proc/locks ] || { echo unknown; exit 0; }
found=
while read -r _ kind _ _ pid dev _; do
  [ "$kind" = FLOCK ] || continue
  [ "${dev##*:}" = "$ino" ] || continue
  unit=-; comm=-
  if [ -r "/proc/$pid/cgroup" ]; then
    while IFS= read -r cg; do unit=${cg##*/}; done <"/proc/$pid/cgroup"
    [ -n "$unit" ] || unit=-
  fi
  [ -r "/proc/$pid/comm" ] && read -r comm <"/proc/$pid/comm"
  echo "held $pid $unit $comm"; found=1
done </proc/locks
[ -n "$found" ] || echo free`

// switchLockHolder is what holds switch-to-configuration's lock on the node.
type switchLockHolder struct {
	// free: no flock is held on the lock file; known: the answer was read.
	free, known bool
	pid         int
	unit, comm  string
}

func (h switchLockHolder) String() string {
	if !h.known {
		return "a process the node did not name"
	}
	var parts []string
	if h.unit != "" {
		parts = append(parts, h.unit)
	}
	if h.pid > 0 {
		p := "PID " + strconv.Itoa(h.pid)
		if h.comm != "" {
			p += " (" + h.comm + ")"
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "an unnamed process"
	}
	return strings.Join(parts, ", ")
}

// parseSwitchLockHolder reads switchLockHolderScript's answer (its first holder).
func parseSwitchLockHolder(out string) switchLockHolder {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 1 && f[0] == "free":
			return switchLockHolder{free: true, known: true}
		case len(f) >= 2 && f[0] == "held":
			h := switchLockHolder{known: true}
			h.pid, _ = strconv.Atoi(f[1])
			if len(f) >= 3 && f[2] != "-" && judge.ValidUnitName(f[2]) {
				h.unit = f[2]
			}
			if len(f) >= 4 && f[3] != "-" {
				h.comm = strings.Join(f[3:], " ")
			}
			return h
		}
	}
	return switchLockHolder{}
}

// readSwitchLockHolder asks the node what holds switch-to-configuration's lock.
func (e *runEnv) readSwitchLockHolder(ctx context.Context) (switchLockHolder, error) {
	res, err := e.t.Run(ctx, []string{"sh", "-c", switchLockHolderScript, "sh", SwitchLockFile}, RunOptions{Path: records.ToolPath})
	if err != nil {
		return switchLockHolder{}, err
	}
	return parseSwitchLockHolder(string(res.Stdout)), nil
}

// switchLockPoll is how often a switch turned away by another switch's lock asks
// whether that switch has ended.
const switchLockPoll = time.Second

// awaitSwitchLock waits, until deadline, for switch-to-configuration's lock to be free
// (no flock on it in /proc/locks); holder is the last holder seen before it was free. A node that cannot
// name the holder is waited out one poll at a time all the same (the switch itself
// then says whether the lock is still held).
func (e *runEnv) awaitSwitchLock(ctx context.Context, deadline time.Time) (holder switchLockHolder, free bool, err error) {
	for attempt := 0; attempt < maxSamples; attempt++ {
		read, err := e.readSwitchLockHolder(ctx)
		if err != nil {
			return holder, false, err
		}
		if read.free || !read.known && attempt > 0 {
			if attempt == 0 {
				holder = read
			}
			return holder, true, nil
		}
		holder = read
		if !e.o.Clock.Now().Add(switchLockPoll).Before(deadline) {
			return holder, false, nil
		}
		if err := e.sleep(ctx, switchLockPoll); err != nil {
			return holder, false, err
		}
	}
	return holder, false, nil
}

// switchLockError is the run's error for a switch whose lock another switch kept for
// longer than lock_wait.
func switchLockError(action string, holder switchLockHolder, waited time.Duration) error {
	return withHint(fmt.Errorf("switch-to-configuration %s could not take %s: %s holds it (another switch: nixos-rebuild, nixos-upgrade.service, comin, …); waited timings.lock_wait (%s) for it to end; nothing was changed on the node",
		action, SwitchLockFile, holder, waited),
		"let that switch finish (journalctl -u <its unit> on the node), then apply again; raise timings.lock_wait to wait longer")
}

// finalizeBoot is the transport's FinalizeBoot (the system profile, then a detached
// `boot`), waiting within timings.lock_wait while another switch holds
// switch-to-configuration's lock (its `boot` exits 11 and changes nothing).
func (e *runEnv) finalizeBoot(ctx context.Context, toplevel string) (int, error) {
	gen, err := e.t.FinalizeBoot(ctx, toplevel, e.o.Timings.SwitchTimeout)
	return e.finalizeBootAfterLocked(ctx, toplevel, gen, err)
}

// finalizeBootAfterLocked goes on from a try of the boot entry that ended with err
// (gen when it succeeded): while that was another switch holding
// switch-to-configuration's lock (exit 11), it waits for the lock within
// timings.lock_wait and writes the boot entry again.
func (e *runEnv) finalizeBootAfterLocked(ctx context.Context, toplevel string, g int, err error) (int, error) {
	var since time.Time
	for {
		var exit *SwitchExitError
		if err == nil || !errors.As(err, &exit) || !switchLocked(exit.Result) {
			return g, err
		}
		if since.IsZero() {
			since = e.o.Clock.Now()
		}
		holder, free, werr := e.awaitSwitchLock(ctx, since.Add(e.o.Timings.LockWait))
		if werr != nil {
			return 0, fmt.Errorf("%w; waiting for the other switch failed: %w", err, werr)
		}
		if !free {
			return 0, switchLockError("boot", holder, e.o.Timings.LockWait)
		}
		e.log(ctx, LevelInfo, PhaseFinalizeBootEntry, "another switch held switch-to-configuration's lock; it ended, writing the boot entry again", map[string]any{"holder": holder.String()})
		g, err = e.t.FinalizeBoot(ctx, toplevel, e.o.Timings.SwitchTimeout)
	}
}
