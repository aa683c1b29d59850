package records

// The node lock: one deploy or verdict pass at a time on a node, whoever runs it.
//
// The lock lives on the node (/run/fediversity/node.lock), so it holds across
// deployers, state directories and transports. Every operation on it runs under
// flock(1) on a guard file, so checking and taking it is one atomic step on the node.
// The holder touches the file every lockHeartbeat; a lock whose heartbeat is older
// than lockStale, or whose holder is proven dead (a process of this very machine, boot
// and PID namespace that no longer runs: HolderGone), is taken over. A host name is
// never proof: two deployers may share one (NixOS' default "nixos", cloned CI
// machines). A connection that drops and comes back does not lose the lock: the lock
// is the node's file and this run's token, not the connection. A run that finds its
// token replaced (another deployer took a lock it saw as stale) stops before it
// switches or writes the boot entry, and says who took the node.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// LockFile is where a node's lock lives. /run is emptied at boot, and so is the lock.
const LockFile = "/run/fediversity/node.lock"

// LockScript is run as `sh -c LockScript sh <op> <token> [<holder> <stale seconds> <takeover token>]`,
// or for the record operation `… record <token> <verdict record file> <last good file>
// <toplevel> <GC root> <last good JSON>` (the last four empty: no last good system).
// It prints "acquired", "ok", "released", "gone" (no lock at all: the node's /run was
// emptied, by a reboot or a snapshot restore), or "held <age seconds>" / "lost"
// followed by the holder's lines; the record operation adds "recorded" or "unrecorded
// <error>", then "pinned" or "unpinned <error>" when it was given a last good system.
const LockScript = `set -u
umask 077
` + requireToolsHead + LockTools + requireToolsTail + `f=` + LockFile + `
[ -d "${f%/*}" ] || mkdir -p "${f%/*}"
exec 9>>"$f.guard"
flock -w 10 9 || { echo busy; exit 0; }
held=""; age=0; cur=""; nl='
'
if [ -f "$f" ]; then
  # The holder's lines and its token line(s), read by the shell itself: what
  # $(cat "$f") and $(sed -n 's/^token=//p' "$f") give, without their two commands (a
  # heartbeat runs every 15 s; a command forked costs a node about 9 ms of CPU,
  # docs/testing.md#node-execs). Only acquire asks the lock's age.
  while IFS= read -r l || [ -n "$l" ]; do
    held=$held$l$nl
    case $l in token=*) cur=$cur${l#token=}$nl ;; esac
  done <"$f"
  while [ "${held%"$nl"}" != "$held" ]; do held=${held%"$nl"}; done
  while [ "${cur%"$nl"}" != "$cur" ]; do cur=${cur%"$nl"}; done
  [ "$1" != acquire ] || age=$(( $(date +%s) - $(stat -c %Y "$f") ))
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
  if e=$(sh -c '` + WriteRecordScript + `' sh "$3" ` + LegacyVerdictRecordFile + ` 2>&1); then echo recorded
  else printf 'unrecorded %s\n' "$(printf '%s\n' "$e" | head -n 1)"; fi
  if [ -n "${4:-}" ]; then
    if e=$(printf '%s' "$7" | sh -c '` + WriteLastGoodScript + `' sh "$4" "$5" "$6" ` + LegacyLastGoodFile + ` 2>&1); then echo pinned
    else printf 'unpinned %s\n' "$(printf '%s\n' "$e" | head -n 1)"; fi
  elif [ ! -e ` + LastGoodFile + ` ] && [ -f ` + LegacyLastGoodFile + ` ] && [ ! -L ` + LegacyLastGoodFile + ` ]; then
    # An older version's last good system, not replaced by this run: moved to the new place.
    sh -c '` + WriteRecordScript + `' sh ` + LastGoodFile + ` ` + LegacyLastGoodFile + ` <` + LegacyLastGoodFile + ` || true
  fi ;;
esac
`

// LockTools are the commands LockScript calls (NixOS' default system packages:
// coreutils, util-linux, gnused).
const LockTools = "mkdir flock cat date stat sed mv rm touch head sh"

// ToolPath is where the tools of the records' scripts are looked up (fixed: the lock's
// heartbeat runs beside the phases, which may change the run's toplevel).
var ToolPath = []string{"/run/current-system/sw/bin", "/usr/bin", "/bin"}

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

func (h LockHolder) Lines() string {
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

func ParseLockHolder(lines []string, age time.Duration) LockHolder {
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

// HolderGone tells whether the holder h is proven dead: it ran on this very machine, in
// this boot and this PID namespace (the only place where its PID means the same
// process), and its PID no longer runs or runs another process (another start time).
// A holder from another machine, boot or namespace, or one that does not say where it
// ran (a lock written by an older deployer), is never proven dead: its lock is taken
// over only once its heartbeat is stale. The host name is not compared: it proves
// nothing.
func HolderGone(h LockHolder, self LockHolder) bool {
	if h.MachineID == "" || h.BootID == "" || h.PIDNamespace == "" || h.PID <= 0 || h.Start == "" {
		return false
	}
	if self.Start == "" || h.MachineID != self.MachineID || h.BootID != self.BootID || h.PIDNamespace != self.PIDNamespace {
		return false
	}
	return processStart(h.PID) != h.Start
}
