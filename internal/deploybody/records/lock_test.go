package records

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A holder is proven dead only on this very machine, boot and PID namespace, when its
// PID is gone or names another process; a shared host name proves nothing.
func TestHolderGoneOnlyWhenProvenOnThisMachine(t *testing.T) {
	self := ThisProcess()
	if self.MachineID == "" || self.BootID == "" || self.PIDNamespace == "" || self.Start == "" {
		t.Fatalf("this process's identity is incomplete: %+v", self)
	}
	// A process that exited: its PID is gone (a PID is reused only after a wrap-around).
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := cmd.Process.Pid
	here := func(pid int, start string) LockHolder {
		h := self
		h.PID, h.Start = pid, start
		return h
	}
	cases := []struct {
		name   string
		holder LockHolder
		want   bool
	}{
		{"this machine, process gone", here(deadPID, "12345"), true},
		{"this machine, PID reused by another process", here(os.Getpid(), self.Start+"0"), true},
		{"this machine, process alive", here(os.Getpid(), self.Start), false},
		{"same host name, another machine, PID unknown here", func() LockHolder {
			h := here(deadPID, "12345")
			h.MachineID = "0123456789abcdef0123456789abcdef"
			return h
		}(), false},
		{"same machine id, another boot (a cloned VM)", func() LockHolder {
			h := here(deadPID, "12345")
			h.BootID = "00000000-0000-0000-0000-000000000000"
			return h
		}(), false},
		{"same machine and boot, another PID namespace (a cloned container)", func() LockHolder {
			h := here(deadPID, "12345")
			h.PIDNamespace = "pid:[1]"
			return h
		}(), false},
		{"a lock of an older deployer (host and pid only)", LockHolder{Host: self.Host, PID: deadPID, Start: "12345"}, false},
		{"no start time", here(deadPID, ""), false},
	}
	for _, c := range cases {
		if got := HolderGone(c.holder, self); got != c.want {
			t.Errorf("%s: HolderGone = %v, want %v (holder %+v)", c.name, got, c.want, c.holder)
		}
	}
	// A deployer that cannot read its own /proc entry proves nothing.
	blind := self
	blind.Start = ""
	if HolderGone(here(deadPID, "12345"), blind) {
		t.Error("a deployer without its own start time took a holder for dead")
	}
}

// The identity survives the trip through the lock file.
func TestLockHolderLinesRoundTrip(t *testing.T) {
	h := ThisProcess()
	h.Token, h.What, h.Toplevel = "tok", "deploy", "/nix/store/0000000000000000000000000000000a-nixos-system-fedi-n1-26.05"
	h.Since = time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	got := ParseLockHolder(strings.Split(h.Lines(), "\n"), 0)
	if got != h {
		t.Fatalf("parsed %+v, want %+v", got, h)
	}
	if s := got.String(); !strings.Contains(s, "machine "+h.MachineID[:12]) || !strings.Contains(s, "from host "+h.Host) {
		t.Fatalf("the holder's description names neither its host nor its machine: %s", s)
	}
}

// Two deployers with one host name: the second waits for the first's live lock up to
// lock_wait, then fails naming the holder, and never takes it over or switches.

// Issue 39, item 9: the lock names the deployer's machine by an app-specific hash of
// its machine id, never the id itself (machine-id(5): confidential), in the lock
// script's arguments and on the node.
func TestLockNamesNoRawMachineID(t *testing.T) {
	raw := firstFileLine("/etc/machine-id", "/var/lib/dbus/machine-id")
	if raw == "" {
		t.Fatal("this machine has no machine id to test with")
	}
	self := ThisProcess()
	self.Token = "t"
	if self.MachineID == "" || self.MachineID == raw || strings.Contains(self.Lines(), raw) {
		t.Fatalf("the lock holder's lines name the raw machine id %s: %q", raw, self.Lines())
	}
	if self.MachineID != LockMachineID(raw) || LockMachineID(raw) == LockMachineID(raw+"x") {
		t.Fatalf("the machine's lock id %q does not tell machines apart", self.MachineID)
	}
}

// The lock script's record operation, run by the real sh on this machine against a
// lock file in a temporary directory (a fake node's /run and /var/lib; what is proven
// is the script, which the lab tests run on real nodes): it writes both records while
// the run holds the lock, and nothing once another run holds it or the lock is gone; a
// write that fails is named, and the others still happen.
func TestLockScriptRecordWritesOnlyUnderThisRunsLock(t *testing.T) {
	for _, tool := range []string{"flock", "stat", "sed"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run the lock script: %v", tool, err)
		}
	}
	run := func(t *testing.T, dir, token, recordFile string) (string, string, string) {
		t.Helper()
		script := strings.ReplaceAll(LockScript, LockFile, filepath.Join(dir, "run", "node.lock"))
		lastGood, root := filepath.Join(dir, "lib", "last-good.json"), filepath.Join(dir, "roots", "last-good")
		cmd := exec.Command("sh", "-c", script, "sh", "record", token, recordFile, lastGood, "/nix/store/aaaa-system", root, `{"toplevel":"/nix/store/aaaa-system"}`)
		cmd.Stdin = strings.NewReader(`{"verdict":"ok"}`)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("lock script: %v: %s", err, out)
		}
		rec, _ := os.ReadFile(recordFile)
		lg, _ := os.ReadFile(lastGood)
		return string(out), string(rec), string(lg)
	}
	lock := func(t *testing.T, dir, token string) {
		t.Helper()
		must(t, os.MkdirAll(filepath.Join(dir, "run"), 0o700))
		must(t, os.WriteFile(filepath.Join(dir, "run", "node.lock"), []byte("token="+token+"\nhost=h\n"), 0o600))
	}
	t.Run("held by this run", func(t *testing.T) {
		dir := t.TempDir()
		lock(t, dir, "mine")
		out, rec, lg := run(t, dir, "mine", filepath.Join(dir, "lib", "last-verdict.json"))
		if out != "ok\nrecorded\npinned\n" || rec != `{"verdict":"ok"}` || lg != `{"toplevel":"/nix/store/aaaa-system"}` {
			t.Fatalf("out %q, record %q, last good %q", out, rec, lg)
		}
		if target, err := os.Readlink(filepath.Join(dir, "roots", "last-good")); err != nil || target != "/nix/store/aaaa-system" {
			t.Fatalf("GC root -> %q (%v)", target, err)
		}
	})
	// The node's /run was emptied since the run took its lock (a reboot it did not ask
	// for): the run judged a boot that is gone, and writes nothing (issue 39, item 9).
	t.Run("no lock on the node", func(t *testing.T) {
		dir := t.TempDir()
		out, rec, lg := run(t, dir, "mine", filepath.Join(dir, "lib", "last-verdict.json"))
		if out != "gone\n" || rec != "" || lg != "" {
			t.Fatalf("out %q, record %q, last good %q: want nothing written", out, rec, lg)
		}
	})
	t.Run("held by another run", func(t *testing.T) {
		dir := t.TempDir()
		lock(t, dir, "theirs")
		out, rec, lg := run(t, dir, "mine", filepath.Join(dir, "lib", "last-verdict.json"))
		if !strings.HasPrefix(out, "lost\ntoken=theirs\n") || strings.Contains(out, "recorded") || rec != "" || lg != "" {
			t.Fatalf("out %q, record %q, last good %q: want nothing written", out, rec, lg)
		}
	})
	t.Run("the verdict record cannot be written", func(t *testing.T) {
		dir := t.TempDir()
		lock(t, dir, "mine")
		blocker := filepath.Join(dir, "file")
		must(t, os.WriteFile(blocker, nil, 0o600))
		out, _, lg := run(t, dir, "mine", filepath.Join(blocker, "last-verdict.json"))
		if !strings.HasPrefix(out, "ok\nunrecorded ") || !strings.HasSuffix(out, "\npinned\n") || lg == "" {
			t.Fatalf("out %q, last good %q", out, lg)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The lock's operations, run by the deployer's real sh and flock on a lock file in a
// temporary directory: a heartbeat of the holder touches it, another run's heartbeat
// is told it lost it (with the holder's lines as the file has them: blank lines inside
// kept, trailing ones dropped, as $(cat) gave them), a fresh lock is held against
// another run and a stale one taken over with its age, and a lock the node lost is
// "gone".
func TestLockScriptOperations(t *testing.T) {
	// Under the deployer's sh (dash here) and under bash, NixOS' /bin/sh.
	for _, shell := range []string{"sh", "bash"} {
		t.Run(shell, func(t *testing.T) { testLockScriptOperations(t, shell) })
	}
}

func testLockScriptOperations(t *testing.T, shell string) {
	for _, tool := range []string{shell, "flock", "stat", "date", "touch"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run the lock script: %v", tool, err)
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "run", "node.lock")
	script := strings.ReplaceAll(LockScript, LockFile, file)
	op := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(shell, append([]string{"-c", script, "sh"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("lock script %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	if out := op("acquire", "mine", "token=mine\nhost=h", "60", ""); out != "acquired\n" {
		t.Fatalf("acquire of a node with no lock: %q", out)
	}
	must(t, os.WriteFile(file, []byte("token=mine\n\nhost=h\n\n"), 0o600))
	old := time.Now().Add(-30 * time.Second)
	must(t, os.Chtimes(file, old, old))
	if out := op("heartbeat", "mine"); out != "ok\n" {
		t.Fatalf("the holder's heartbeat: %q", out)
	}
	if fi, err := os.Stat(file); err != nil || time.Since(fi.ModTime()) > 10*time.Second {
		t.Fatalf("the heartbeat did not touch the lock: %v, %v", fi.ModTime(), err)
	}
	if out := op("heartbeat", "theirs"); out != "lost\ntoken=mine\n\nhost=h\n" {
		t.Fatalf("another run's heartbeat: %q", out)
	}
	if out := op("acquire", "theirs", "token=theirs\nhost=g", "60", ""); out != "held 0\ntoken=mine\n\nhost=h\n" && out != "held 1\ntoken=mine\n\nhost=h\n" {
		t.Fatalf("acquire of a lock touched just now, by another run: %q", out)
	}
	old = time.Now().Add(-2 * time.Minute)
	must(t, os.Chtimes(file, old, old))
	out := op("acquire", "theirs", "token=theirs\nhost=g", "60", "")
	if !strings.HasPrefix(out, "acquired\ntook-over 12") || !strings.HasSuffix(out, "\ntoken=mine\n\nhost=h\n") {
		t.Fatalf("acquire of a stale lock by another run: %q", out)
	}
	if out := op("release", "theirs"); out != "released\n" {
		t.Fatalf("release by the holder: %q", out)
	}
	if out := op("heartbeat", "theirs"); out != "gone\n" {
		t.Fatalf("a heartbeat after the lock went: %q", out)
	}
}
