package deploybody

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// RevertGuardScript itself, run by sh with flock on this machine: its fixed node paths
// (the lock, /run/current-system, the system profile) are moved into a temporary
// directory, and systemctl is a stub that says which units are active and records
// stops. The lab tests run it on real nodes; this one walks every rule on demand.
func TestRevertGuardScript(t *testing.T) {
	for _, tool := range []string{"sh", "flock", "readlink", "sed"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run the guard script: %v", tool, err)
		}
	}
	dir := t.TempDir()
	lock := filepath.Join(dir, "node.lock")
	current := filepath.Join(dir, "current-system")
	bin := filepath.Join(dir, "bin")
	must(t, os.MkdirAll(bin, 0o755))
	// The stub systemctl: is-active reads <dir>/active-<unit>; stop is recorded.
	must(t, os.WriteFile(filepath.Join(bin, "systemctl"), []byte(`#!/bin/sh
case "$1" in
is-active) cat "`+dir+`/active-$2" 2>/dev/null || echo inactive ;;
stop) echo "$3" >>"`+dir+`/stopped" ;;
list-units) for f in "`+dir+`"/active-fediversity-switch-*; do [ -e "$f" ] && echo "${f##*/active-} loaded $(cat "$f") running x"; done ;;
esac
`), 0o755))
	script := strings.NewReplacer(LockFile, lock, "/run/current-system", current, "/nix/var/nix/profiles/system", filepath.Join(dir, "system")).Replace(RevertGuardScript)
	prev := filepath.Join(dir, "store-prev")
	guarded := filepath.Join(dir, "store-new")
	must(t, os.MkdirAll(prev, 0o755))
	must(t, os.MkdirAll(guarded, 0o755))
	runsSystem := func(p string) {
		_ = os.Remove(current)
		must(t, os.Symlink(p, current))
	}
	guard := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("guard %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	first := func(out string) string { return strings.SplitN(out, "\n", 2)[0] }
	sw := filepath.Join(dir, "fediversity-switch-0001")
	arm := func(unit, token string) {
		t.Helper()
		if out := guard("arm", unit, prev, guarded, token, sw); out != "armed" {
			t.Fatalf("arm: %q", out)
		}
	}
	holder := func() string {
		b, _ := os.ReadFile(lock)
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "token="); ok {
				return v
			}
		}
		return ""
	}
	runsSystem(guarded)

	// The switch still runs: the arming run's login is not a confirmation yet.
	arm("fediversity-revert-a", "run1")
	must(t, os.WriteFile(filepath.Join(dir, "active-fediversity-switch-0001"), []byte("active\n"), 0o644))
	if out := guard("disarm", "fediversity-revert-a"); first(out) != "switching" || !strings.Contains(out, "running "+guarded) {
		t.Fatalf("disarm during the switch: %q", out)
	}
	// The switch ended: the login disarms, and the unit is stopped; a late begin stands down.
	must(t, os.Remove(filepath.Join(dir, "active-fediversity-switch-0001")))
	must(t, os.WriteFile(sw+".rc", []byte("0\n"), 0o644))
	if out := guard("disarm", "fediversity-revert-a"); first(out) != "disarmed" {
		t.Fatalf("disarm after the switch: %q", out)
	}
	if out := guard("begin", "fediversity-revert-a"); !strings.HasPrefix(out, "stand-down") {
		t.Fatalf("begin after the disarm: %q", out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "stopped")); !strings.Contains(string(b), "fediversity-revert-a") {
		t.Fatalf("the disarmed unit was not stopped: %q", b)
	}

	// A later run holds the lock: the revert stands down.
	arm("fediversity-revert-b", "run1")
	must(t, os.WriteFile(lock, []byte("token=run2\nhost=h\n"), 0o600))
	if out := guard("begin", "fediversity-revert-b"); out != "stand-down a later run holds the node lock" || holder() != "run2" {
		t.Fatalf("begin under a later run's lock: %q (holder %s)", out, holder())
	}
	// The node no longer runs the system the revert guarded: it stands down.
	must(t, os.Remove(lock))
	arm("fediversity-revert-c", "run1")
	runsSystem(prev)
	if out := guard("begin", "fediversity-revert-c"); !strings.HasPrefix(out, "stand-down the node runs "+prev) {
		t.Fatalf("begin on another system: %q", out)
	}
	if out := guard("disarm", "fediversity-revert-c"); !strings.HasPrefix(out, "stood-down the node runs") {
		t.Fatalf("disarm of a stood-down revert: %q", out)
	}

	// Lock still the arming run's (it was killed): the revert begins and holds the lock;
	// a disarm now answers "begun" and never stops it; then it ends and says reverted.
	runsSystem(guarded)
	arm("fediversity-revert-d", "run1")
	must(t, os.WriteFile(lock, []byte("token=run1\nhost=h\n"), 0o600))
	if out := guard("begin", "fediversity-revert-d"); out != "begin" || holder() != "fediversity-revert-d" {
		t.Fatalf("begin: %q (holder %s)", out, holder())
	}
	if out := guard("disarm", "fediversity-revert-d"); first(out) != "begun" {
		t.Fatalf("disarm of a begun revert: %q", out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "stopped")); strings.Contains(string(b), "fediversity-revert-d") {
		t.Fatal("a begun revert was stopped")
	}
	if out := guard("end", "fediversity-revert-d", "0"); out != "ended" || holder() != "" {
		t.Fatalf("end: %q (holder %s)", out, holder())
	}
	if out := guard("disarm", "fediversity-revert-d"); first(out) != "reverted 0" {
		t.Fatalf("disarm after the revert: %q", out)
	}
	if out := guard("disarm", "fediversity-revert-d"); first(out) != "gone" {
		t.Fatalf("the reported revert was not forgotten: %q", out)
	}

	// A later run's pending: an armed revert is disarmed, a running switch is named.
	arm("fediversity-revert-e", "run1")
	must(t, os.WriteFile(filepath.Join(dir, "active-fediversity-switch-0002"), []byte("active\n"), 0o644))
	out := guard("pending")
	if !strings.Contains(out, "revert fediversity-revert-e "+prev+" disarmed") || !strings.Contains(out, "switching fediversity-switch-0002") || !strings.Contains(out, "running "+guarded) {
		t.Fatalf("pending: %q", out)
	}
	p := parsePendingAnswer(out)
	// b stood down earlier: pending reports it once and forgets it.
	if len(p.reverts) != 2 || p.reverts[0].answer.state != revertStoodDown || p.reverts[1].answer.state != revertDisarmed || len(p.switching) != 1 || p.running != guarded {
		t.Fatalf("parsed pending: %+v", p)
	}
	if out := guard("begin", "fediversity-revert-e"); !strings.HasPrefix(out, "stand-down") {
		t.Fatalf("begin after a later run disarmed it: %q", out)
	}
}
