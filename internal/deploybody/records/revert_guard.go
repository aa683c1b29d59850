package records

import (
	"path"
	"strconv"
	"strings"
)

// The node side of the lock-out revert: every step that decides whether a revert
// happens runs under the node lock's guard (flock on LockFile.guard, as LockScript),
// so the revert, the run that armed it and any later run see one order of events, on
// one clock: the node's.
//
// Each armed revert has, in the lock's directory, <unit>.arm (previous system, the
// system it guards, the lock token of the run that armed it, the switch's result
// prefix), <unit>.state and <unit>.sh (this script, run by the revert unit). The state
// is "armed" until exactly one of these happens under the guard:
//   - a login made after the guarded switch ended disarms it (the files are removed:
//     "disarmed"): the arming run's new login, or a later run's (which holds the lock);
//   - its window ends and it begins ("begun"): only when the node still runs the system
//     it guards. It then holds the lock itself (token = its unit), whoever held it (the
//     arming run, or a later run that could not yet settle it: a run settles every
//     earlier revert before it changes anything), until it has switched back
//     ("reverted <rc>");
//   - its window ends and it stands down ("stood-down <why>");
//   - its unit finds a tool missing and cannot run at all ("broken <why>").
// A revert that has begun is never stopped: the disarm then answers "begun" or
// "reverted", never "disarmed". A begun revert whose unit is gone (its time limit, out
// of memory, systemctl stop) is "died": the guard forgets it and frees the lock.
//
// When a login was made is the start of the process that accepted its connection, in
// clock ticks since boot (/proc/<pid>/stat): the oldest of the guard's ancestors below
// PID 1, the SSH listener left out (a parent starts before its children, and every
// process of a connection descends from the one sshd forked for it). A connection that
// outlived a restart of sshd hangs below PID 1 itself and keeps its old start. The
// switch's end is the mtime of its exit-code file, turned into ticks since boot against
// the wall clock read between the starts of two processes made for the purpose (a
// container's /proc/uptime may be its own; its processes' start times are the
// kernel's), so that both are on one clock. Every rounding (the ticks, the file's
// coarse mtime, the reads) errs on the side of "made before the end", by at most a few
// ticks; a switch that ended without a result counts from when the guard first saw it
// gone. A login made before the end
// proves nothing about the new system (its sshd child was forked by the old one), so it
// settles nothing: the guard answers "unconfirmed", and the deployer logs in anew.

// RevertUnitPrefix names the transient units of armed reverts.
const RevertUnitPrefix = "fediversity-revert-"

// RevertSwitchUnitPrefix names the detached switches (remote.SwitchUnitPrefix): a
// later run waits for an earlier run's switch before it goes on.
const RevertSwitchUnitPrefix = "fediversity-switch-"

// RevertGuardTools are the commands the guard calls, space-separated: the revert unit
// checks for them before it arms anything and, when one is missing, says so in the
// revert's state ("broken"), never leaving it armed in silence. Each is in NixOS'
// default system packages (coreutils, util-linux, gnused, systemd).
const RevertGuardTools = "mkdir flock readlink sed cat rm mv date cut tr touch systemctl"

// requireToolsHead and requireToolsTail wrap a list of commands into a script fragment
// that exits 127 naming the first one that is not on PATH: a clear error, never a
// silent success. (Constants, so that a checker can read every node-side script.)
const (
	requireToolsHead = `for c in `
	requireToolsTail = `; do command -v "$c" >/dev/null 2>&1 || { echo "missing command $c (PATH=$PATH)" >&2; exit 127; }; done
`
)

// RevertGuardScript is run as `sh -c RevertGuardScript sh <op> <unit> [args]` by the
// deployer (disarm, pending) and, from its file <unit>.sh, by the revert unit (arm,
// begin, touch, end). Every answer is on stdout; "busy" when the guard stayed taken.
//
//	arm <unit> <previous> <guarded> <token> <switch prefix>  → armed
//	begin <unit>                                             → begin | stand-down <why>
//	touch <unit>   (the begun revert's heartbeat on the lock) → ok
//	end <unit> <rc>                                          → ended
//	disarm <unit>  → disarmed | switching | unconfirmed <login> <end> | begun |
//	                 reverted <rc> | stood-down <why> | broken <why> | died | gone,
//	                 then "running <system>" and "profile <link>"
//	pending        → "revert <unit> <previous> <guarded> <state>" per revert of an
//	                 earlier run (those this login may settle are disarmed: the caller
//	                 holds the lock), "switching <unit>" per detached switch still
//	                 running, then running and profile
const RevertGuardScript = `set -u
umask 077
` + requireToolsHead + RevertGuardTools + requireToolsTail + `f=` + LockFile + `
d=${f%/*}
mkdir -p "$d"
exec 9>>"$f.guard"
flock -w 10 9 || { echo busy; exit 0; }
running=$(readlink -e /run/current-system 2>/dev/null || true)
hz=$(getconf CLK_TCK 2>/dev/null) || hz=100
say() { printf 'running %s\nprofile %s\n' "$running" "$(readlink /nix/var/nix/profiles/system 2>/dev/null || true)"; }
holder() { sed -n 's/^token=//p' "$f" 2>/dev/null || true; }
forget() { rm -f "$d/$1.state" "$d/$1.arm" "$d/$1.sh" "$d/$1.ended"; }
state_of() { case "$(systemctl is-active "$1" 2>/dev/null)" in active|activating|deactivating|reloading) echo up ;; inactive|failed) echo gone ;; *) echo unknown ;; esac; }
now_ticks() { cut -d ' ' -f 22 /proc/self/stat; }
listener() {
  case "$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | sed -n 1p)" in *'[listener]'*) return 0 ;; esac
  svc=$(sed -n '/\/[^/@]*\.service$/{s|.*/||p;q}' "/proc/$1/cgroup" 2>/dev/null)
  [ -n "$svc" ] && [ "$(systemctl show -p MainPID --value "$svc" 2>/dev/null)" = "$1" ]
}
login_ticks() {
  p=$$ l=
  while [ "$p" -gt 1 ]; do
    st=$(cat "/proc/$p/stat" 2>/dev/null) || break
    st=${st##*) }
    set -f; set -- $st; set +f
    if [ "$2" -le 1 ] && listener "$p"; then break; fi
    l=${20} p=$2
  done
  echo "${l:-0}"
}
switch_end() {
  if [ -e "$2.rc" ]; then
    e=$(date -r "$2.rc" +%s%N) || return 1
    for try in 1 2 3; do
      t0=$(now_ticks); n=$(date +%s%N); t=$(now_ticks)
      [ $((t - t0)) -le 2 ] && break
    done
    echo $(( t - (n - e) * hz / 1000000000 + 2 ))
    return 0
  fi
  [ "$(state_of "${2##*/}")" = up ] && return 1
  [ -s "$d/$1.ended" ] || now_ticks >"$d/$1.ended"
  echo $(( $(cat "$d/$1.ended") + 2 ))
}
settle_armed() {
  sw=$(sed -n 4p "$d/$1.arm" 2>/dev/null)
  if ! e=$(switch_end "$1" "$sw"); then echo switching; return; fi
  [ -n "$login" ] || login=$(login_ticks)
  if [ "$login" -ge "$e" ]; then forget "$1"; systemctl stop --no-block "$1" 2>/dev/null; echo disarmed
  else echo "unconfirmed $login $e"; fi
}
settle_begun() {
  if [ "$(state_of "$1")" = gone ]; then
    if [ "$(holder)" = "$1" ]; then rm -f "$f"; fi
    forget "$1"; echo died
  else echo begun; fi
}
login=
op=$1 u=${2:-}
s=$d/$u.state a=$d/$u.arm
case "$op" in
arm)
  printf '%s\n' "$3" "$4" "$5" "$6" >"$a" && echo armed >"$s" && echo armed ;;
begin)
  st=$(cat "$s" 2>/dev/null || true)
  if [ "$st" != armed ]; then echo "stand-down it was no longer armed (${st:-disarmed})"; exit 0; fi
  prev=$(sed -n 1p "$a"); guarded=$(sed -n 2p "$a")
  if [ "$running" != "$guarded" ]; then
    why="the node runs ${running:-no system}, not the system it guarded ($guarded)"
    echo "stood-down $why" >"$s"; echo "stand-down $why"; exit 0
  fi
  printf 'token=%s\nhost=%s\npid=0\nstart=\nsince=%s\nwhat=revert\ntoplevel=%s\n' "$u" "$(cat /proc/sys/kernel/hostname)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$prev" >"$f.new" &&
    mv -f "$f.new" "$f" && echo begun >"$s" && echo begin ;;
touch)
  if [ "$(holder)" = "$u" ]; then touch "$f"; fi; echo ok ;;
end)
  echo "reverted $3" >"$s"
  if [ "$(holder)" = "$u" ]; then rm -f "$f"; fi; echo ended ;;
disarm)
  st=$(cat "$s" 2>/dev/null || true)
  case "$st" in
  armed) settle_armed "$u" ;;
  "") echo gone ;;
  begun) settle_begun "$u" ;;
  *) forget "$u"; echo "$st" ;;
  esac
  say ;;
pending)
  for s in "$d"/` + RevertUnitPrefix + `*.state; do
    [ -e "$s" ] || continue
    u=${s##*/}; u=${u%.state}
    st=$(cat "$s" 2>/dev/null || true)
    prev=$(sed -n 1p "$d/$u.arm" 2>/dev/null || true); guarded=$(sed -n 2p "$d/$u.arm" 2>/dev/null || true)
    case "$st" in
    armed) st=$(settle_armed "$u") ;;
    begun) st=$(settle_begun "$u") ;;
    *) forget "$u" ;;
    esac
    printf 'revert %s %s %s %s\n' "$u" "${prev:--}" "${guarded:--}" "$st"
  done
  systemctl list-units --no-legend --plain --all '` + RevertSwitchUnitPrefix + `*' 2>/dev/null | while read -r n load active rest; do
    case "$active" in active|activating|deactivating|reloading) echo "switching $n" ;; esac
  done
  say ;;
esac
`

// Revert states, as the guard script says them.
const (
	RevertDisarmed  = "disarmed"
	RevertSwitching = "switching" // armed; the switch it guards still runs
	// RevertUnconfirmed: armed; the switch ended, but the login that asked was made
	// before its end, so it proves nothing about the new system.
	RevertUnconfirmed = "unconfirmed"
	RevertBegun       = "begun"
	RevertReverted    = "reverted"
	RevertStoodDown   = "stood-down"
	RevertBroken      = "broken" // its unit found a tool missing and never ran
	RevertDied        = "died"   // it began, and its unit stopped before it ended
	RevertGone        = "gone"   // no such revert: another run disarmed it, or /run was emptied
	RevertBusy        = "busy"   // the guard stayed taken
)

// RevertAnswer is what the guard script said about one revert, and what the node runs.
type RevertAnswer struct {
	State   string // one of the revert states
	Detail  string // the exit code of a revert's switch, or why it stood down
	Running string
	Profile string // where the system profile points (system-<n>-link)
}

// Final tells whether the revert's fate is sealed: nothing changes it any more.
func (a RevertAnswer) Final() bool {
	switch a.State {
	case RevertDisarmed, RevertReverted, RevertStoodDown, RevertGone, RevertBroken, RevertDied:
		return true
	}
	return false
}

// Generation is the system profile's generation in the answer, 0 when unknown.
func (a RevertAnswer) Generation() int { return ProfileGeneration(a.Profile) }

// ProfileGeneration is N of a system profile link "system-N-link", or of a path ending
// in one (0 when it is not one).
func ProfileGeneration(link string) int {
	s, ok := strings.CutPrefix(path.Base(link), "system-")
	if !ok {
		return 0
	}
	s, ok = strings.CutSuffix(s, "-link")
	n, err := strconv.Atoi(s)
	if !ok || err != nil {
		return 0
	}
	return n
}

// ParseRevertAnswer reads the answer of `disarm`.
func ParseRevertAnswer(out string) RevertAnswer {
	var a RevertAnswer
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(l), " ")
		switch {
		case i == 0:
			a.State, a.Detail = k, v
		case k == "running":
			a.Running = v
		case k == "profile":
			a.Profile = v
		}
	}
	return a
}

// EarlierRevert is one revert of an earlier run, as `pending` lists it: Previous is
// the system it goes back to, Guarded the one whose switch it guards.
type EarlierRevert struct {
	Unit, Previous, Guarded string
	Answer                  RevertAnswer
}

// PendingAnswer is the answer of `pending`.
type PendingAnswer struct {
	Reverts   []EarlierRevert
	Switching []string // detached switches still running
	Running   string
	Profile   string
	Busy      bool
}

// ParsePendingAnswer reads the answer of `pending`.
func ParsePendingAnswer(out string) PendingAnswer {
	var p PendingAnswer
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "busy":
			p.Busy = true
		case "revert":
			if len(f) < 5 {
				continue
			}
			e := EarlierRevert{Unit: f[1], Previous: strings.TrimPrefix(f[2], "-"), Guarded: strings.TrimPrefix(f[3], "-")}
			e.Answer.State = f[4]
			e.Answer.Detail = strings.Join(f[5:], " ")
			p.Reverts = append(p.Reverts, e)
		case "switching":
			if len(f) > 1 {
				p.Switching = append(p.Switching, f[1])
			}
		case "running":
			if len(f) > 1 {
				p.Running = f[1]
			}
		case "profile":
			if len(f) > 1 {
				p.Profile = f[1]
			}
		}
	}
	return p
}
