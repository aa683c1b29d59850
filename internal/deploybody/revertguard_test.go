package deploybody

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// guardBench runs RevertGuardScript itself, with sh and flock on this machine: its fixed
// node paths (the lock, /run/current-system, the system profile) are moved into a
// temporary directory, systemctl is a stub that says which units are active and records
// stops, and the guard's walk up to PID 1 stops at this test's process instead, so that
// each call's "connection" is a process the test starts when it chooses (a login made
// before or after a switch's end). The lab tests run the script on real nodes, below
// real sshd; this one walks every rule on demand.
type guardBench struct {
	t       *testing.T
	dir     string
	lock    string
	current string
	bin     string
	script  string
	path    string
	prev    string
	guarded string
}

func newGuardBench(t *testing.T) *guardBench {
	t.Helper()
	for _, tool := range []string{"sh", "flock", "readlink", "sed", "cut", "date", "tr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run the guard script: %v", tool, err)
		}
	}
	dir := t.TempDir()
	b := &guardBench{t: t, dir: dir, lock: filepath.Join(dir, "node.lock"), current: filepath.Join(dir, "current-system"),
		bin: filepath.Join(dir, "bin"), prev: filepath.Join(dir, "store-prev"), guarded: filepath.Join(dir, "store-new")}
	must(t, os.MkdirAll(b.bin, 0o755))
	must(t, os.MkdirAll(b.prev, 0o755))
	must(t, os.MkdirAll(b.guarded, 0o755))
	// The stub systemctl: is-active reads <dir>/active-<unit> (a revert unit that has no
	// such file is gone); stop is recorded; show names no main PID.
	must(t, os.WriteFile(filepath.Join(b.bin, "systemctl"), []byte(`#!/bin/sh
case "$1" in
is-active) cat "`+dir+`/active-$2" 2>/dev/null || echo inactive ;;
stop) echo "$3" >>"`+dir+`/stopped" ;;
show) echo 0 ;;
list-units) for f in "`+dir+`"/active-fediversity-switch-*; do [ -e "$f" ] && echo "${f##*/active-} loaded $(cat "$f") running x"; done ;;
esac
`), 0o755))
	self := strconv.Itoa(os.Getpid())
	b.script = strings.NewReplacer(
		records.LockFile, b.lock,
		"/run/current-system", b.current,
		"/nix/var/nix/profiles/system", filepath.Join(dir, "system"),
		`while [ "$p" -gt 1 ]`, `while [ "$p" -gt 1 ] && [ "$p" -ne `+self+` ]`,
		`if [ "$2" -le 1 ]`, `if [ "$2" -le 1 ] || [ "$2" -eq `+self+` ]`,
	).Replace(records.RevertGuardScript)
	if b.script == records.RevertGuardScript {
		t.Fatal("the guard's node paths were not moved")
	}
	b.path = b.bin + ":" + os.Getenv("PATH")
	b.runs(b.guarded)
	return b
}

// runs points the bench's /run/current-system at system.
func (b *guardBench) runs(system string) {
	_ = os.Remove(b.current)
	must(b.t, os.Symlink(system, b.current))
}

// connection is a process that stands for an SSH connection's: it starts now and runs
// the guard once asked (its descendants are the login's commands).
type connection struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   bytes.Buffer
}

// connect makes a connection now; name is its process's argv[0] (an SSH listener's
// holds "[listener]").
func (b *guardBench) connect(name string, args ...string) *connection {
	b.t.Helper()
	c := &connection{}
	c.cmd = exec.Command("/bin/sh", append([]string{"-c", `read -r go; s=$1; shift; /bin/sh -c "$s" "$@"; exit $?`, name, b.script, "sh"}, args...)...)
	c.cmd.Args[0] = name
	c.cmd.Env = append(os.Environ(), "PATH="+b.path)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		b.t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() })
	return c
}

// ask runs the guard in c and returns its answer.
func (b *guardBench) ask(c *connection) string {
	b.t.Helper()
	_, _ = io.WriteString(c.stdin, "go\n")
	_ = c.stdin.Close()
	if err := c.cmd.Wait(); err != nil {
		b.t.Fatalf("guard %v: %v: %s", c.cmd.Args[4:], err, c.out.String())
	}
	return strings.TrimSpace(c.out.String())
}

// guard runs one operation over a connection made now.
func (b *guardBench) guard(args ...string) string {
	b.t.Helper()
	return b.ask(b.connect("sshd: root@notty", args...))
}

func (b *guardBench) arm(unit, token, sw string) {
	b.t.Helper()
	if out := b.guard("arm", unit, b.prev, b.guarded, token, sw); out != "armed" {
		b.t.Fatalf("arm: %q", out)
	}
}

func (b *guardBench) holder() string {
	raw, _ := os.ReadFile(b.lock)
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "token="); ok {
			return v
		}
	}
	return ""
}

func (b *guardBench) set(name, content string) {
	must(b.t, os.WriteFile(filepath.Join(b.dir, name), []byte(content), 0o644))
}

func (b *guardBench) stopped() string {
	raw, _ := os.ReadFile(filepath.Join(b.dir, "stopped"))
	return string(raw)
}

func first(out string) string { return strings.SplitN(out, "\n", 2)[0] }

// tickGap is longer than the guard's rounding (a few clock ticks of 10 ms) and than
// the machine's scheduling delays: a login this much after a switch's end is after it.
const tickGap = 500 * time.Millisecond

// A disarm counts only for a login made after the switch ended (issue 39, item 1):
// while the switch runs the revert stays armed; a connection made before its end
// settles nothing, whenever it asks; one made after it disarms.
func TestRevertGuardDisarmNeedsALoginAfterTheSwitch(t *testing.T) {
	b := newGuardBench(t)
	sw := filepath.Join(b.dir, "fediversity-switch-0001")
	b.arm("fediversity-revert-a", "run1", sw)
	b.set("active-fediversity-switch-0001", "active\n")
	before := b.connect("sshd: root@notty", "disarm", "fediversity-revert-a")
	if out := b.guard("disarm", "fediversity-revert-a"); first(out) != "switching" || !strings.Contains(out, "running "+b.guarded) {
		t.Fatalf("disarm during the switch: %q", out)
	}
	time.Sleep(tickGap)
	must(t, os.Remove(filepath.Join(b.dir, "active-fediversity-switch-0001")))
	must(t, os.WriteFile(sw+".rc", []byte("0\n"), 0o644))
	time.Sleep(tickGap)
	// The connection made while the switch ran asks now, after its end.
	if out := b.ask(before); !strings.HasPrefix(first(out), "unconfirmed ") {
		t.Fatalf("a login made before the switch ended: %q, want unconfirmed", out)
	}
	if b.stopped() != "" {
		t.Fatalf("an unconfirmed revert was stopped: %q", b.stopped())
	}
	if out := b.guard("disarm", "fediversity-revert-a"); first(out) != "disarmed" {
		t.Fatalf("a login made after the switch ended: %q, want disarmed", out)
	}
	if !strings.Contains(b.stopped(), "fediversity-revert-a") {
		t.Fatalf("the disarmed unit was not stopped: %q", b.stopped())
	}
	if out := b.guard("begin", "fediversity-revert-a"); !strings.HasPrefix(out, "stand-down") {
		t.Fatalf("begin after the disarm: %q", out)
	}

	// A switch that ended without a result counts from when the guard saw it gone.
	sw2 := filepath.Join(b.dir, "fediversity-switch-0002")
	b.arm("fediversity-revert-b", "run1", sw2)
	b.set("active-fediversity-switch-0002", "active\n")
	before = b.connect("sshd: root@notty", "disarm", "fediversity-revert-b")
	time.Sleep(tickGap)
	must(t, os.Remove(filepath.Join(b.dir, "active-fediversity-switch-0002")))
	if out := b.ask(before); !strings.HasPrefix(first(out), "unconfirmed ") {
		t.Fatalf("no result, a login made before the guard saw the switch gone: %q", out)
	}
	time.Sleep(tickGap)
	if out := b.guard("disarm", "fediversity-revert-b"); first(out) != "disarmed" {
		t.Fatalf("no result, a later login: %q", out)
	}
}

// The SSH listener is not part of a login: a connection it forked after the switch
// ended disarms, however old the listener is. A process below PID 1 that is not a
// listener (a connection that outlived a restart of sshd) counts with its own start.
func TestRevertGuardLoginTimeLeavesOutTheListener(t *testing.T) {
	b := newGuardBench(t)
	sw := filepath.Join(b.dir, "fediversity-switch-0003")
	b.arm("fediversity-revert-c", "run1", sw)
	listener := b.connect("sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups", "disarm", "fediversity-revert-c")
	orphan := b.connect("sshd: root@notty", "disarm", "fediversity-revert-c")
	time.Sleep(tickGap)
	must(t, os.WriteFile(sw+".rc", []byte("0\n"), 0o644))
	time.Sleep(tickGap)
	if out := b.ask(orphan); !strings.HasPrefix(first(out), "unconfirmed ") {
		t.Fatalf("a connection from before the end, below PID 1 itself: %q", out)
	}
	// The listener started before the end; the shell it forks for this login now is the
	// connection.
	if out := b.ask(listener); first(out) != "disarmed" {
		t.Fatalf("an old listener's new connection: %q, want disarmed", out)
	}
}

// The revert's own steps: it begins when its window ends if the node still runs the
// system it guards, taking the lock from whoever holds it (the arming run, or a later
// run that could not settle it); it stands down when the node runs another system; a
// begun revert is never stopped, and one whose unit died is reported once and frees
// the lock.
func TestRevertGuardBeginEndAndDied(t *testing.T) {
	b := newGuardBench(t)
	sw := filepath.Join(b.dir, "fediversity-switch-0004")

	// A later run holds the lock and could not settle it: the revert begins all the same.
	b.arm("fediversity-revert-d", "run1", sw)
	must(t, os.WriteFile(b.lock, []byte("token=run2\nhost=h\n"), 0o600))
	if out := b.guard("begin", "fediversity-revert-d"); out != "begin" || b.holder() != "fediversity-revert-d" {
		t.Fatalf("begin under a later run's lock: %q (holder %s)", out, b.holder())
	}
	b.set("active-fediversity-revert-d", "active\n")
	if out := b.guard("disarm", "fediversity-revert-d"); first(out) != "begun" {
		t.Fatalf("disarm of a begun revert: %q", out)
	}
	if strings.Contains(b.stopped(), "fediversity-revert-d") {
		t.Fatal("a begun revert was stopped")
	}
	if out := b.guard("end", "fediversity-revert-d", "0"); out != "ended" || b.holder() != "" {
		t.Fatalf("end: %q (holder %s)", out, b.holder())
	}
	if out := b.guard("disarm", "fediversity-revert-d"); first(out) != "reverted 0" {
		t.Fatalf("disarm after the revert: %q", out)
	}
	if out := b.guard("disarm", "fediversity-revert-d"); first(out) != "gone" {
		t.Fatalf("the reported revert was not forgotten: %q", out)
	}

	// The node no longer runs the system the revert guarded: it stands down.
	b.arm("fediversity-revert-e", "run1", sw)
	b.runs(b.prev)
	if out := b.guard("begin", "fediversity-revert-e"); !strings.HasPrefix(out, "stand-down the node runs "+b.prev) {
		t.Fatalf("begin on another system: %q", out)
	}
	if out := b.guard("disarm", "fediversity-revert-e"); !strings.HasPrefix(out, "stood-down the node runs") {
		t.Fatalf("disarm of a stood-down revert: %q", out)
	}

	// Item 3: a begun revert whose unit died (its time limit, OOM, systemctl stop).
	b.runs(b.guarded)
	b.arm("fediversity-revert-f", "run1", sw)
	if out := b.guard("begin", "fediversity-revert-f"); out != "begin" {
		t.Fatalf("begin: %q", out)
	}
	// No active-fediversity-revert-f: the unit is gone.
	out := b.guard("pending")
	if !strings.Contains(out, "revert fediversity-revert-f "+b.prev+" "+b.guarded+" died") || !strings.Contains(out, "running "+b.guarded) {
		t.Fatalf("pending with a begun revert whose unit died: %q", out)
	}
	if b.holder() != "" {
		t.Fatalf("the dead revert still holds the lock: %s", b.holder())
	}
	if out := b.guard("pending"); strings.Contains(out, "fediversity-revert-f") {
		t.Fatalf("the dead revert was reported twice: %q", out)
	}
}

// A later run's pending: a revert whose switch runs stays armed and the switch is named;
// once it ended, the run's login, made before its end, leaves it armed (unconfirmed); a
// login made after disarms it.
func TestRevertGuardPending(t *testing.T) {
	b := newGuardBench(t)
	sw := filepath.Join(b.dir, "fediversity-switch-0005")
	b.arm("fediversity-revert-g", "run1", sw)
	b.set("active-fediversity-switch-0005", "active\n")
	runConnection := b.connect("sshd: root@notty", "pending")
	out := b.guard("pending")
	p := records.ParsePendingAnswer(out)
	if len(p.Reverts) != 1 || p.Reverts[0].Answer.State != records.RevertSwitching || p.Reverts[0].Guarded != b.guarded ||
		len(p.Switching) != 1 || p.Switching[0] != "fediversity-switch-0005" || p.Running != b.guarded {
		t.Fatalf("pending while the switch runs: %q → %+v", out, p)
	}
	time.Sleep(tickGap)
	must(t, os.Remove(filepath.Join(b.dir, "active-fediversity-switch-0005")))
	must(t, os.WriteFile(sw+".rc", []byte("0\n"), 0o644))
	time.Sleep(tickGap)
	if out := b.ask(runConnection); !strings.Contains(out, "revert fediversity-revert-g "+b.prev+" "+b.guarded+" unconfirmed ") {
		t.Fatalf("pending over a connection made before the switch ended: %q", out)
	}
	if b.stopped() != "" {
		t.Fatalf("pending over an old connection stopped the revert: %q", b.stopped())
	}
	if out := b.guard("pending"); !strings.Contains(out, "revert fediversity-revert-g "+b.prev+" "+b.guarded+" disarmed") {
		t.Fatalf("pending over a connection made after the switch ended: %q", out)
	}
	if out := b.guard("begin", "fediversity-revert-g"); !strings.HasPrefix(out, "stand-down") {
		t.Fatalf("begin after a later run disarmed it: %q", out)
	}
}

// A node without a command the guard needs gets an error that names it, never an
// answer (issue 38: a unit started by systemd-run on NixOS has only systemd's own bin
// directory on its PATH).
func TestRevertGuardNamesAMissingCommand(t *testing.T) {
	b := newGuardBench(t)
	bare := t.TempDir()
	for _, tool := range []string{"sh", "mkdir", "readlink", "sed", "cat", "rm", "mv", "date", "cut", "tr", "touch"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		must(t, os.Symlink(p, filepath.Join(bare, tool)))
	}
	must(t, os.Symlink(filepath.Join(b.bin, "systemctl"), filepath.Join(bare, "systemctl")))
	cmd := exec.Command("/bin/sh", "-c", b.script, "sh", "pending")
	cmd.Env = append(os.Environ(), "PATH="+bare)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if err == nil || code != 127 || stdout.Len() != 0 {
		t.Fatalf("without flock the guard exited %d (%v) with %q", code, err, stdout.String())
	}
	got := nodeScriptError("the revert guard", RunResult{ExitCode: code, Stderr: stderr.Bytes()})
	if !strings.Contains(got.Error(), "the revert guard on the node needs flock, which is not on its PATH ("+bare+")") {
		t.Fatalf("error = %v", got)
	}
}
