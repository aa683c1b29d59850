package remote

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// revertUnitBench runs the armed revert unit's script (revertScript) and the guard it
// calls, under the real sh and flock, the way systemd-run starts it on NixOS: with
// systemd's own bin directory as its only PATH (a directory holding systemctl and
// nothing else). The node's fixed paths (/run/fediversity, the lock, the system
// profile, /run/current-system) are moved into a temporary directory.
type revertUnitBench struct {
	dir, results, systemdBin, prev, guarded, script, guard string
}

func newRevertUnitBench(t *testing.T) *revertUnitBench {
	t.Helper()
	dir := t.TempDir()
	b := &revertUnitBench{dir: dir, results: filepath.Join(dir, "run-fediversity"), systemdBin: filepath.Join(dir, "systemd-bin"),
		prev: filepath.Join(dir, "store-prev"), guarded: filepath.Join(dir, "store-new")}
	for _, d := range []string{b.results, b.systemdBin, b.prev + "/bin", b.prev + "/sw/bin", b.guarded} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// systemctl: every unit is active (the revert runs), show names no main PID.
	write(t, filepath.Join(b.systemdBin, "systemctl"), "#!/bin/sh\ncase \"$1\" in is-active) echo active ;; show) echo 0 ;; esac\n")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(b.guarded, filepath.Join(dir, "current-system")))
	must(os.Symlink(b.guarded, filepath.Join(dir, "system")))
	moved := strings.NewReplacer(
		records.LockFile, filepath.Join(b.results, "node.lock"),
		ResultDir, b.results,
		"/run/current-system", filepath.Join(dir, "current-system"),
		SystemProfile, filepath.Join(dir, "system"),
	)
	b.script = moved.Replace(revertScript)
	b.guard = filepath.Join(b.results, "fediversity-revert-t.sh")
	write(t, b.guard, moved.Replace(records.RevertGuardScript))
	return b
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

// run arms the revert under the guard, leaves the switch's result, and runs the unit's
// script with only systemd's bin directory on PATH; it returns the exit code and the
// revert's state afterwards.
func (b *revertUnitBench) run(t *testing.T) (int, string, string) {
	t.Helper()
	sw := filepath.Join(b.results, "fediversity-switch-t")
	arm := exec.Command("/bin/sh", b.guard, "arm", "fediversity-revert-t", b.prev, b.guarded, "run1", sw)
	arm.Env = []string{"PATH=" + os.Getenv("PATH")}
	if out, err := arm.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "armed" {
		t.Fatalf("arm: %v: %s", err, out)
	}
	write(t, sw+".rc", "0\n")
	cmd := exec.Command("/bin/sh", "-c", b.script, "sh", b.guard, "fediversity-revert-t", sw, "3", "1", b.prev)
	cmd.Env = []string{"PATH=" + b.systemdBin}
	out, _ := cmd.CombinedOutput()
	state, _ := os.ReadFile(filepath.Join(b.results, "fediversity-revert-t.state"))
	return cmd.ProcessState.ExitCode(), strings.TrimSpace(string(state)), string(out)
}

// Issue 38, finding 2: a revert unit on NixOS gets systemd's bin directory as its PATH
// and nothing else. Its script sets PATH from the previous system before its first
// command, so with that system's tools it runs to its end: it begins, switches back
// and says "reverted 0". On the current main it called sleep and sh before setting
// PATH, exited 0 at once and left the revert "armed" for the next login to disarm.
func TestRevertUnitRunsWithNixOSUnitPath(t *testing.T) {
	b := newRevertUnitBench(t)
	for _, tool := range append([]string{"sleep", "sh"}, strings.Fields(records.RevertGuardTools)...) {
		if _, err := os.Lstat(filepath.Join(b.prev, "sw/bin", tool)); tool == "systemctl" || err == nil {
			continue
		}
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s is needed to run the revert: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(b.prev, "sw/bin", tool)); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(b.prev, "sw/bin/nix-env"), "#!/bin/sh\nexit 0\n")
	write(t, filepath.Join(b.prev, "bin/switch-to-configuration"), "#!/bin/sh\necho \"$1\" >>"+filepath.Join(b.dir, "switched")+"\n")
	code, state, out := b.run(t)
	switched, _ := os.ReadFile(filepath.Join(b.dir, "switched"))
	if code != 0 || state != "reverted 0" || string(switched) != "switch\nboot\n" {
		t.Fatalf("the revert unit exited %d with state %q, switched %q:\n%s", code, state, switched, out)
	}
}

// A revert unit that misses a command says which, in the revert's state and its
// journal, and fails: never a silent exit 0 that leaves the guard "armed".
func TestRevertUnitNamesAMissingCommand(t *testing.T) {
	b := newRevertUnitBench(t) // the previous system's sw/bin is empty
	code, state, out := b.run(t)
	if code == 0 || !strings.HasPrefix(state, "broken the revert cannot run on this node: sleep is not on its PATH") || !strings.Contains(out, "sleep is not on its PATH") {
		t.Fatalf("the revert unit exited %d with state %q:\n%s", code, state, out)
	}
}
