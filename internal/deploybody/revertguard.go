package deploybody

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// The node side of the lock-out revert: every step that decides whether a revert
// happens runs under the node lock's guard (flock on LockFile.guard, as lockScript),
// so the revert, the run that armed it and any later run see one order of events, on
// one clock: the node's.
//
// Each armed revert has, in the lock's directory, <unit>.arm (previous system, the
// system it guards, the lock token of the run that armed it, the switch's result
// prefix), <unit>.state and <unit>.sh (this script, run by the revert unit). The state
// is "armed" until exactly one of these happens under the guard:
//   - the arming run logs in again after its switch ended and disarms it (the files
//     are removed: "disarmed");
//   - a later run that took the node's lock finds it and disarms it (the same);
//   - its window ends and it begins ("begun"): only when the node still runs the system
//     it guards and the lock is free or still the arming run's. It then holds the lock
//     itself (token = its unit) until it has switched back ("reverted <rc>");
//   - its window ends and it stands down ("stood-down <why>").
// A revert that has begun is never stopped: the disarm then answers "begun" or
// "reverted", never "disarmed".

// RevertUnitPrefix names the transient units of armed reverts.
const RevertUnitPrefix = "fediversity-revert-"

// revertSwitchUnitPrefix names the detached switches (remote.SwitchUnitPrefix): a
// later run waits for an earlier run's switch before it goes on.
const revertSwitchUnitPrefix = "fediversity-switch-"

// RevertGuardScript is run as `sh -c RevertGuardScript sh <op> <unit> [args]` by the
// deployer (disarm, pending) and, from its file <unit>.sh, by the revert unit (arm,
// begin, touch, end). Every answer is on stdout; "busy" when the guard stayed taken.
//
//	arm <unit> <previous> <guarded> <token> <switch prefix>  → armed
//	begin <unit>                                             → begin | stand-down <why>
//	touch <unit>   (the begun revert's heartbeat on the lock) → ok
//	end <unit> <rc>                                          → ended
//	disarm <unit>  → disarmed | switching | begun | reverted <rc> | stood-down <why> | gone,
//	                 then "running <system>" and "profile <link>"
//	pending        → "revert <unit> <previous> <state>" per revert of an earlier run
//	                 (armed ones are disarmed: the caller holds the lock), "switching
//	                 <unit>" per detached switch still running, then running and profile
const RevertGuardScript = `set -u
umask 077
f=` + LockFile + `
d=${f%/*}
mkdir -p "$d"
exec 9>>"$f.guard"
flock -w 10 9 || { echo busy; exit 0; }
running=$(readlink -e /run/current-system 2>/dev/null || true)
say() { printf 'running %s\nprofile %s\n' "$running" "$(readlink /nix/var/nix/profiles/system 2>/dev/null || true)"; }
holder() { sed -n 's/^token=//p' "$f" 2>/dev/null || true; }
forget() { rm -f "$d/$1.state" "$d/$1.arm" "$d/$1.sh"; }
op=$1 u=${2:-}
s=$d/$u.state a=$d/$u.arm
case "$op" in
arm)
  printf '%s\n' "$3" "$4" "$5" "$6" >"$a" && echo armed >"$s" && echo armed ;;
begin)
  st=$(cat "$s" 2>/dev/null || true)
  if [ "$st" != armed ]; then echo "stand-down it was no longer armed (${st:-disarmed})"; exit 0; fi
  prev=$(sed -n 1p "$a"); guarded=$(sed -n 2p "$a"); token=$(sed -n 3p "$a"); cur=$(holder)
  if [ "$running" != "$guarded" ]; then why="the node runs ${running:-no system}, not the system it guarded ($guarded)"
  elif [ -n "$cur" ] && [ "$cur" != "$token" ]; then why="a later run holds the node lock"
  else
    printf 'token=%s\nhost=%s\npid=0\nstart=\nsince=%s\nwhat=revert\ntoplevel=%s\n' "$u" "$(cat /proc/sys/kernel/hostname)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$prev" >"$f.new" &&
      mv -f "$f.new" "$f" && echo begun >"$s" && echo begin
    exit 0
  fi
  echo "stood-down $why" >"$s"; echo "stand-down $why" ;;
touch)
  if [ "$(holder)" = "$u" ]; then touch "$f"; fi; echo ok ;;
end)
  echo "reverted $3" >"$s"
  if [ "$(holder)" = "$u" ]; then rm -f "$f"; fi; echo ended ;;
disarm)
  st=$(cat "$s" 2>/dev/null || true)
  case "$st" in
  armed)
    sw=$(sed -n 4p "$a")
    case "$(systemctl is-active "${sw##*/}" 2>/dev/null)" in
    active|activating|deactivating|reloading) [ -e "$sw.rc" ] && st=ended || st=switching ;;
    *) st=ended ;;
    esac
    if [ "$st" = ended ]; then forget "$u"; systemctl stop --no-block "$u" 2>/dev/null; echo disarmed; else echo switching; fi ;;
  "") echo gone ;;
  begun) echo begun ;;
  *) forget "$u"; echo "$st" ;;
  esac
  say ;;
pending)
  for s in "$d"/` + RevertUnitPrefix + `*.state; do
    [ -e "$s" ] || continue
    u=${s##*/}; u=${u%.state}
    st=$(cat "$s" 2>/dev/null || true); prev=$(sed -n 1p "$d/$u.arm" 2>/dev/null || true)
    case "$st" in
    armed) forget "$u"; systemctl stop --no-block "$u" 2>/dev/null; st=disarmed ;;
    begun) ;;
    *) forget "$u" ;;
    esac
    printf 'revert %s %s %s\n' "$u" "${prev:--}" "$st"
  done
  systemctl list-units --no-legend --plain --all '` + revertSwitchUnitPrefix + `*' 2>/dev/null | while read -r n load active rest; do
    case "$active" in active|activating|deactivating|reloading) echo "switching $n" ;; esac
  done
  say ;;
esac
`

// Revert states, as the guard script says them.
const (
	revertDisarmed  = "disarmed"
	revertSwitching = "switching" // armed; the switch it guards still runs
	revertBegun     = "begun"
	revertReverted  = "reverted"
	revertStoodDown = "stood-down"
	revertGone      = "gone" // no such revert: another run disarmed it, or /run was emptied
	revertBusy      = "busy" // the guard stayed taken
)

// revertAnswer is what the guard script said about one revert, and what the node runs.
type revertAnswer struct {
	state   string // one of the revert states
	detail  string // the exit code of a revert's switch, or why it stood down
	running string
	profile string // where the system profile points (system-<n>-link)
}

// final tells whether the revert's fate is sealed: nothing changes it any more.
func (a revertAnswer) final() bool {
	switch a.state {
	case revertDisarmed, revertReverted, revertStoodDown, revertGone:
		return true
	}
	return false
}

// generation is the system profile's generation in the answer, 0 when unknown.
func (a revertAnswer) generation() int {
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(path.Base(a.profile), "system-"), "-link"))
	if err != nil {
		return 0
	}
	return n
}

// parseRevertAnswer reads the answer of `disarm`.
func parseRevertAnswer(out string) revertAnswer {
	var a revertAnswer
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(l), " ")
		switch {
		case i == 0:
			a.state, a.detail = k, v
		case k == "running":
			a.running = v
		case k == "profile":
			a.profile = v
		}
	}
	return a
}

// earlierRevert is one revert of an earlier run, as `pending` lists it.
type earlierRevert struct {
	unit, previous string
	answer         revertAnswer
}

// pendingAnswer is the answer of `pending`.
type pendingAnswer struct {
	reverts   []earlierRevert
	switching []string // detached switches still running
	running   string
	busy      bool
}

func parsePendingAnswer(out string) pendingAnswer {
	var p pendingAnswer
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "busy":
			p.busy = true
		case "revert":
			if len(f) < 4 {
				continue
			}
			e := earlierRevert{unit: f[1], previous: strings.TrimPrefix(f[2], "-")}
			e.answer.state = f[3]
			e.answer.detail = strings.Join(f[4:], " ")
			p.reverts = append(p.reverts, e)
		case "switching":
			if len(f) > 1 {
				p.switching = append(p.switching, f[1])
			}
		case "running":
			if len(f) > 1 {
				p.running = f[1]
			}
		}
	}
	return p
}

// revertGuard runs one operation of RevertGuardScript on the node: over a new
// connection of sr when sr is set (the arming run's confirming login), else over the
// run's own. ctx is not the run's: the node must be told also when the run was
// interrupted. One call is bounded like a lock operation.
func (e *runEnv) revertGuard(ctx context.Context, sr SelfReverter, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, lockCallLimit)
	defer cancel()
	argv := append([]string{"sh", "-c", RevertGuardScript, "sh"}, args...)
	opts := RunOptions{Path: lockPath, Privileged: true} // the lock's directory is root's
	var res RunResult
	var err error
	if sr != nil {
		res, err = sr.RunFresh(ctx, argv, opts)
	} else {
		res, err = e.t.Run(ctx, argv, opts)
	}
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) == "" {
		return "", fmt.Errorf("the revert guard on the node exited %d: %s", res.ExitCode, firstLine(string(res.Stderr), "no output"))
	}
	return string(res.Stdout), nil
}
