package labtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The lab's stand-in switch-to-configuration keeps the contract of NixOS's
// (switch-to-configuration-ng): each test here runs it on a lab node as nixos-rebuild
// does (by absolute path in a transient unit, with a unit's PATH) and checks what the
// real one does, from its source (pkgs/by-name/sw/switch-to-configuration-ng/src/main.rs).

// standinNode is a throwaway lab node with the closures of attrs copied into its store;
// it returns the node and the closures' paths by attribute.
func standinNode(t *testing.T, name string, attrs ...string) (Node, map[string]string) {
	t.Helper()
	n := NewInstance(t, name)
	paths := map[string]string{}
	for _, a := range attrs {
		paths[a] = BuildClosure(t, a)
		CopyClosure(t, n, paths[a])
	}
	return n, paths
}

// mustSwitch switches to toplevel (a new generation of the profile first, as
// nixos-rebuild does) and wants exit 0.
func mustSwitch(t *testing.T, n Node, toplevel string) SwitchResult {
	t.Helper()
	SetProfile(t, n, toplevel)
	r := Switch(t, n, toplevel, "switch")
	if r.Exit != 0 {
		t.Fatalf("switch to %s: %s", toplevel, r)
	}
	return r
}

// processEnv is the environment of a unit's main process (what it runs with, which
// systemctl show does not tell once the unit file changed).
func processEnv(t *testing.T, n Node, unit string) string {
	t.Helper()
	pid := UnitProperty(t, n, unit, "MainPID")
	return Incus(t, "exec", n.Instance, "--", "/bin/sh", "-c", "tr '\\0' '\\n' </proc/"+pid+"/environ")
}

func wantOutput(t *testing.T, r SwitchResult, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(r.Output, l) {
			t.Errorf("output lacks %q:\n%s", l, r)
		}
	}
}

func wantCurrent(t *testing.T, n Node, want string) {
	t.Helper()
	if got := Readlink(t, n, "/run/current-system"); got != want {
		t.Errorf("/run/current-system = %s, want %s", got, want)
	}
}

// Another switch holds the lock (as nixos-upgrade.service or a hand-run nixos-rebuild
// would): exit 11, "Could not acquire lock", nothing changed.
func TestStandinLockHeldExits11(t *testing.T) {
	t.Parallel()
	n, c := standinNode(t, "stc-lock", ClosureGood)
	base := Readlink(t, n, "/run/current-system")
	Incus(t, "exec", n.Instance, "--", "/usr/bin/mkdir", "-p", "/run/nixos")
	Incus(t, "exec", n.Instance, "--", "/usr/bin/systemd-run", "--unit=fedi-holds-the-switch-lock", "--collect",
		"/usr/bin/flock", "/run/nixos/switch-to-configuration.lock", "/usr/bin/sleep", "300")
	for i := 0; ; i++ {
		if _, err := IncusErr("exec", n.Instance, "--", "/usr/bin/flock", "-n", "/run/nixos/switch-to-configuration.lock", "/usr/bin/true"); err != nil {
			break
		}
		if i == 100 {
			t.Fatal("the holder never took the lock")
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := Switch(t, n, c[ClosureGood], "switch")
	if r.Exit != 11 {
		t.Fatalf("switch with the lock held: %s, want exit 11", r)
	}
	wantOutput(t, r, "Could not acquire lock")
	wantCurrent(t, n, base)
	if d := BootDefault(t, n); d != base {
		t.Errorf("boot default %s after a refused switch, want %s", d, base)
	}

	Incus(t, "exec", n.Instance, "--", "/usr/bin/systemctl", "stop", "fedi-holds-the-switch-lock")
	mustSwitch(t, n, c[ClosureGood])
	wantCurrent(t, n, c[ClosureGood])
}

// A failed activation script: exit 2 after "Failed to run activate script", the snippet
// named, /run/current-system the new system anyway, its units started.
func TestStandinActivationFailsExits2(t *testing.T) {
	t.Parallel()
	n, c := standinNode(t, "stc-activate", ClosureActivationFails)
	SetProfile(t, n, c[ClosureActivationFails])
	r := Switch(t, n, c[ClosureActivationFails], "switch")
	if r.Exit != 2 {
		t.Fatalf("switch to a system whose activation fails: %s, want exit 2", r)
	}
	wantOutput(t, r, "fedi-secrets: cannot decrypt", "Activation script snippet 'fediversity' failed (1)", "Failed to run activate script")
	wantCurrent(t, n, c[ClosureActivationFails])
	if s := UnitProperty(t, n, "fedi-web.service", "ActiveState"); s != "active" {
		t.Errorf("fedi-web.service is %s after the failed activation, want active (the switch goes on)", s)
	}
}

// A new init-interface-version: exit 100 before activating, the boot loader already
// installed for switch (the new system is the boot default), not for test.
func TestStandinInitInterfaceChangeExits100(t *testing.T) {
	t.Parallel()
	n, c := standinNode(t, "stc-init", ClosureGood, ClosureGoodInitV3)
	mustSwitch(t, n, c[ClosureGood])

	r := Switch(t, n, c[ClosureGoodInitV3], "test")
	if r.Exit != 100 {
		t.Fatalf("test of a system with another init interface: %s, want exit 100", r)
	}
	wantOutput(t, r, "has an ‘init’ that is\nincompatible with the current configuration.")
	if d := BootDefault(t, n); d != c[ClosureGood] {
		t.Errorf("boot default %s after test, want %s (test installs no boot loader)", d, c[ClosureGood])
	}

	SetProfile(t, n, c[ClosureGoodInitV3])
	r = Switch(t, n, c[ClosureGoodInitV3], "switch")
	if r.Exit != 100 {
		t.Fatalf("switch to a system with another init interface: %s, want exit 100", r)
	}
	wantCurrent(t, n, c[ClosureGood])
	if d := BootDefault(t, n); d != c[ClosureGoodInitV3] {
		t.Errorf("boot default %s after exit 100, want the new system %s (the boot loader comes first)", d, c[ClosureGoodInitV3])
	}
}

// Switch inhibitors: <toplevel>/switch-inhibitors (JSON) against the running system's;
// a key in both with another value refuses switch, test, check and dry-activate with
// the real text, not boot; NIXOS_NO_CHECK=1 skips the checks.
func TestStandinSwitchInhibitorsRefuse(t *testing.T) {
	t.Parallel()
	n, c := standinNode(t, "stc-inhibit", ClosureInhibitorA, ClosureInhibitorB)
	a, b := c[ClosureInhibitorA], c[ClosureInhibitorB]
	mustSwitch(t, n, a)

	var inh map[string]string
	if err := json.Unmarshal([]byte(Incus(t, "exec", n.Instance, "--", "/usr/bin/cat", b+"/switch-inhibitors")), &inh); err != nil || inh["fedi-driver"] != "575" {
		t.Fatalf("inhibitor-b's switch-inhibitors: %v %v, want {\"fedi-driver\": \"575\"}", inh, err)
	}
	if r := Switch(t, n, a, "check"); r.Exit != 0 {
		t.Errorf("check of the running system: %s, want exit 0", r)
	}
	for _, action := range []string{"check", "switch", "test", "dry-activate"} {
		r := Switch(t, n, b, action)
		if r.Exit != 1 {
			t.Errorf("%s of a system whose inhibitor changed: %s, want exit 1", action, r)
			continue
		}
		wantOutput(t, r, "There are changes to critical components of the system:\n\nfedi-driver : 570 -> 575\n",
			"Pre-switch check 'switchInhibitors' failed", "Pre-switch checks failed")
	}
	wantCurrent(t, n, a)
	if d := BootDefault(t, n); d != a {
		t.Errorf("boot default %s after refused switches, want %s", d, a)
	}

	SetProfile(t, n, b)
	r := Switch(t, n, b, "boot")
	if r.Exit != 0 {
		t.Fatalf("boot of a system whose inhibitor changed: %s, want exit 0 (boot is not inhibited)", r)
	}
	wantOutput(t, r, "Not checking switch inhibitors (action = boot)")
	if d := BootDefault(t, n); d != b {
		t.Errorf("boot default %s after boot, want %s", d, b)
	}
	if r := Switch(t, n, b, "switch", "NIXOS_NO_CHECK=1"); r.Exit != 0 {
		t.Errorf("switch with NIXOS_NO_CHECK=1: %s, want exit 0", r)
	}
	wantCurrent(t, n, b)
}

// A failed pre-switch check of the system's own: named, then "Pre-switch checks failed",
// exit 1, nothing changed; `check` says the same; NIXOS_NO_CHECK=1 skips it.
func TestStandinPreSwitchCheckFails(t *testing.T) {
	t.Parallel()
	n, c := standinNode(t, "stc-check", ClosureCheckFails)
	base := Readlink(t, n, "/run/current-system")
	for _, action := range []string{"check", "switch"} {
		r := Switch(t, n, c[ClosureCheckFails], action)
		if r.Exit != 1 {
			t.Fatalf("%s with a failing pre-switch check: %s, want exit 1", action, r)
		}
		wantOutput(t, r, "Pre-switch check 'fediAlwaysFails' failed", "Pre-switch checks failed")
	}
	wantCurrent(t, n, base)
	if r := Switch(t, n, c[ClosureCheckFails], "test", "NIXOS_NO_CHECK=1"); r.Exit != 0 {
		t.Fatalf("test with NIXOS_NO_CHECK=1: %s, want exit 0", r)
	}
	wantCurrent(t, n, c[ClosureCheckFails])
}

// Changed units as the real one judges them: restartIfChanged = false is not restarted
// and runs its old code on; a change in a drop-in only stops and starts the unit;
// reloadIfChanged reloads it; dry-activate says what switch would do and changes nothing;
// a failed unit anywhere on the node is exit 4.
func TestStandinChangedUnits(t *testing.T) {
	t.Parallel()
	n, c := standinNode(t, "stc-units", ClosureGood, ClosureGoodV2, ClosureGoodV2NoRestart, ClosureGoodDropin, ClosureGoodV2Reload, ClosureFailedUnit)
	mustSwitch(t, n, c[ClosureGood])
	pid := UnitProperty(t, n, "fedi-web.service", "MainPID")

	r := Switch(t, n, c[ClosureGoodV2], "dry-activate")
	if r.Exit != 0 {
		t.Fatalf("dry-activate: %s", r)
	}
	wantOutput(t, r, "would stop the following units: fedi-web.service", "would start the following units: fedi-web.service")
	wantCurrent(t, n, c[ClosureGood])
	if p := UnitProperty(t, n, "fedi-web.service", "MainPID"); p != pid {
		t.Errorf("fedi-web's main PID went from %s to %s in a dry activation", pid, p)
	}

	r = mustSwitch(t, n, c[ClosureGoodV2NoRestart])
	wantOutput(t, r, "NOT restarting the following changed units: fedi-web.service")
	if p := UnitProperty(t, n, "fedi-web.service", "MainPID"); p != pid {
		t.Errorf("fedi-web (X-RestartIfChanged=false) was restarted: main PID %s, was %s", p, pid)
	}
	if env := processEnv(t, n, "fedi-web.service"); !strings.Contains(env, "FEDI_VERSION=1\n") {
		t.Errorf("fedi-web's process runs with %q, want the old definition's FEDI_VERSION=1", env)
	}

	mustSwitch(t, n, c[ClosureGood])
	pid = UnitProperty(t, n, "fedi-web.service", "MainPID")
	r = mustSwitch(t, n, c[ClosureGoodDropin])
	wantOutput(t, r, "stopping the following units: fedi-web.service", "starting the following units: fedi-web.service")
	if p := UnitProperty(t, n, "fedi-web.service", "MainPID"); p == pid {
		t.Errorf("fedi-web, changed by its drop-in only, was not restarted (main PID %s)", p)
	}
	if env := processEnv(t, n, "fedi-web.service"); !strings.Contains(env, "FEDI_DROPIN=1\n") {
		t.Errorf("fedi-web's process runs with %q, want its drop-in's FEDI_DROPIN=1", env)
	}

	pid = UnitProperty(t, n, "fedi-web.service", "MainPID")
	r = mustSwitch(t, n, c[ClosureGoodV2Reload])
	wantOutput(t, r, "reloading the following units: fedi-web.service")
	if p := UnitProperty(t, n, "fedi-web.service", "MainPID"); p != pid {
		t.Errorf("fedi-web (X-ReloadIfChanged) was restarted: main PID %s, was %s", p, pid)
	}

	SetProfile(t, n, c[ClosureFailedUnit])
	r = Switch(t, n, c[ClosureFailedUnit], "switch")
	if r.Exit != 4 {
		t.Fatalf("switch with a failing unit: %s, want exit 4", r)
	}
	wantOutput(t, r, "warning: the following units failed: fedi-broken.service")
}

// A system whose systemd changed (and nothing else): the switch re-executes PID 1
// ("restarting systemd..."), whose units then get the new systemd's bin as PATH, and
// needs no reboot.
func TestStandinChangedSystemdReexecutes(t *testing.T) {
	t.Parallel()
	n, c := standinNode(t, "stc-reexec", ClosureGood, ClosureGoodSystemdB)
	mustSwitch(t, n, c[ClosureGood])
	booted := Readlink(t, n, "/run/booted-system")
	Incus(t, "exec", n.Instance, "--", "/usr/bin/touch", "/run/fedi-before-the-switch")

	r := mustSwitch(t, n, c[ClosureGoodSystemdB])
	wantOutput(t, r, "restarting systemd...")
	sd := Readlink(t, n, c[ClosureGoodSystemdB]+"/systemd")
	out := Incus(t, "exec", n.Instance, "--", "/usr/bin/systemd-run", "--wait", "--pipe", "--quiet", "/bin/sh", "-c", `echo "$PATH"`)
	if strings.TrimSpace(out) != sd+"/bin/" {
		t.Errorf("a unit's PATH after the switch: %q, want the new systemd's %s/bin/", out, sd)
	}
	if j := Incus(t, "exec", n.Instance, "--", "/usr/bin/journalctl", "-b", "--no-pager", "-o", "cat", "_PID=1"); !strings.Contains(j, "Reexecuting") {
		t.Errorf("PID 1's journal says nothing of a re-execution:\n%s", j)
	}
	if b := Readlink(t, n, "/run/booted-system"); b != booted {
		t.Errorf("/run/booted-system went from %s to %s: the node rebooted", booted, b)
	}
	if _, err := IncusErr("exec", n.Instance, "--", "/usr/bin/test", "-e", "/run/fedi-before-the-switch"); err != nil {
		t.Error("/run was emptied: the node rebooted")
	}
}

// Both boot loaders after switch and boot: systemd-boot makes entries from the profile's
// generations only (a system that is no generation moves no default); GRUB makes the
// system a switch or boot names the default at once, and test touches neither.
func TestStandinBootLoaderDefaults(t *testing.T) {
	t.Parallel()
	n, c := standinNode(t, "stc-loaders", ClosureGood, ClosureGoodV2)
	good, v2 := c[ClosureGood], c[ClosureGoodV2]

	t.Run("systemd-boot", func(t *testing.T) {
		mustSwitch(t, n, good)
		if d := BootDefault(t, n); d != good {
			t.Fatalf("boot default after switch: %s, want %s", d, good)
		}
		if r := Switch(t, n, v2, "boot"); r.Exit != 0 {
			t.Fatalf("boot of a system that is no generation: %s", r)
		}
		if d := BootDefault(t, n); d != good {
			t.Errorf("boot default after boot of a system that is no generation: %s, want %s", d, good)
		}
		if out := Incus(t, "exec", n.Instance, "--", "/bin/sh", "-c", "cat /boot/loader/entries/*.conf"); strings.Contains(out, v2) {
			t.Errorf("an entry boots %s, which is no generation:\n%s", v2, out)
		}
		if r := Switch(t, n, v2, "switch"); r.Exit != 0 {
			t.Fatalf("switch to a system that is no generation: %s", r)
		}
		wantCurrent(t, n, v2)
		if d := BootDefault(t, n); d != good {
			t.Errorf("boot default after switch to a system that is no generation: %s, want %s", d, good)
		}
		SetProfile(t, n, v2)
		if r := Switch(t, n, v2, "boot"); r.Exit != 0 {
			t.Fatalf("boot of the new generation: %s", r)
		}
		if d := BootDefault(t, n); d != v2 {
			t.Errorf("boot default after boot of the new generation: %s, want %s", d, v2)
		}
	})

	t.Run("grub", func(t *testing.T) {
		SetBootLoader(t, n, BootLoaderGRUB)
		if r := Switch(t, n, good, "switch"); r.Exit != 0 {
			t.Fatalf("switch: %s", r)
		}
		if d := BootDefault(t, n); d != good {
			t.Errorf("boot default after switch (no new generation): %s, want the switched system %s at once", d, good)
		}
		if r := Switch(t, n, v2, "test"); r.Exit != 0 {
			t.Fatalf("test: %s", r)
		}
		if d := BootDefault(t, n); d != good {
			t.Errorf("boot default after test: %s, want %s (test installs no boot loader)", d, good)
		}
		if r := Switch(t, n, v2, "boot"); r.Exit != 0 {
			t.Fatalf("boot: %s", r)
		}
		if d := BootDefault(t, n); d != v2 {
			t.Errorf("boot default after boot: %s, want %s", d, v2)
		}
		if _, err := IncusErr("exec", n.Instance, "--", "/run/current-system/sw/bin/bootctl", "is-installed"); err == nil {
			t.Error("bootctl is-installed succeeds on a GRUB node")
		}
	})
}

// Boot counting: a new entry's file name carries +<tries>, its ID (what loader.conf's
// default and bootctl set-oneshot name) does not; a one-shot naming the file name
// names no entry; a boot counts a try down and, once up, blesses the entry.
func TestStandinBootCountingNames(t *testing.T) {
	t.Parallel()
	n, c := standinNode(t, "stc-counting", ClosureGood, ClosureGoodV2)
	EnableBootCounting(t, n, 3)
	mustSwitch(t, n, c[ClosureGood])
	SetProfile(t, n, c[ClosureGoodV2])
	if r := Switch(t, n, c[ClosureGoodV2], "boot"); r.Exit != 0 {
		t.Fatalf("boot: %s", r)
	}
	entries := strings.Fields(Incus(t, "exec", n.Instance, "--", "/bin/sh", "-c", "cd /boot/loader/entries && ls; sed -n 's/^default //p' ../loader.conf"))
	want := []string{"nixos-generation-1.conf", "nixos-generation-2+3.conf", "nixos-generation-3+3.conf", "nixos-generation-3.conf"}
	if strings.Join(entries, " ") != strings.Join(want, " ") {
		t.Fatalf("entries and loader.conf's default: %v, want %v", entries, want)
	}

	Incus(t, "exec", n.Instance, "--", "/run/current-system/sw/bin/bootctl", "set-oneshot", "nixos-generation-2+3.conf")
	if next := BootNext(t, n); next != c[ClosureGoodV2] {
		t.Errorf("next boot with a one-shot naming an entry's file name: %s, want the default %s (no entry has that ID)", next, c[ClosureGoodV2])
	}
	Incus(t, "exec", n.Instance, "--", "/run/current-system/sw/bin/bootctl", "set-oneshot", "nixos-generation-2.conf")
	if next := BootNext(t, n); next != c[ClosureGood] {
		t.Errorf("next boot with a one-shot naming generation 2's ID: %s, want %s", next, c[ClosureGood])
	}
	if d := BootDefault(t, n); d != c[ClosureGoodV2] {
		t.Errorf("boot default: %s, want %s", d, c[ClosureGoodV2])
	}

	Incus(t, "restart", n.Instance)
	waitSystemd(t, n.Instance)
	if b := Readlink(t, n, "/run/booted-system"); b != c[ClosureGood] {
		t.Errorf("booted %s, want the one-shot's %s", b, c[ClosureGood])
	}
	after := strings.Fields(Incus(t, "exec", n.Instance, "--", "/bin/sh", "-c", "cd /boot/loader/entries && ls"))
	if strings.Join(after, " ") != "nixos-generation-1.conf nixos-generation-2.conf nixos-generation-3+3.conf" {
		t.Errorf("entries after booting generation 2: %v, want its try counted and the entry blessed (nixos-generation-2.conf)", after)
	}
}

// A switch killed during its activation leaves /run/nixos/start-list with the units it
// stopped; the next switch starts them.
func TestStandinKilledSwitchIsFinishedByTheNext(t *testing.T) {
	t.Parallel()
	slow := BuildSlowSwitch(t, 30)
	n, c := standinNode(t, "stc-killed", ClosureGoodV2)
	CopyClosure(t, n, slow)
	mustSwitch(t, n, c[ClosureGoodV2])

	unit := "fediversity-labtest-killed-switch"
	SetProfile(t, n, slow)
	Incus(t, "exec", n.Instance, "--", "/usr/bin/systemd-run", "--unit="+unit, "--collect", "--service-type=exec", slow+"/bin/switch-to-configuration", "switch")
	for i := 0; ; i++ {
		out, _ := IncusErr("exec", n.Instance, "--", "/bin/sh", "-c", "cat /run/nixos/start-list; systemctl show -p ActiveState --value fedi-web.service")
		if strings.Contains(out, "fedi-web.service\n") && strings.HasSuffix(out, "inactive\n") {
			break
		}
		if i == 300 {
			t.Fatalf("the switch never stopped fedi-web.service with it on its start list: %q", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	Incus(t, "exec", n.Instance, "--", "/usr/bin/systemctl", "kill", "--signal=SIGKILL", unit)
	time.Sleep(time.Second)
	if out := Incus(t, "exec", n.Instance, "--", "/usr/bin/cat", "/run/nixos/start-list"); !strings.Contains(out, "fedi-web.service") {
		t.Fatalf("start list after the kill: %q, want fedi-web.service", out)
	}

	short := BuildSlowSwitch(t, 1)
	CopyClosure(t, n, short)
	r := mustSwitch(t, n, short)
	wantOutput(t, r, "fedi-web.service")
	if s := UnitProperty(t, n, "fedi-web.service", "ActiveState"); s != "active" {
		t.Errorf("fedi-web.service is %s after the next switch, want active", s)
	}
	if _, err := IncusErr("exec", n.Instance, "--", "/usr/bin/test", "-e", "/run/nixos/start-list"); err == nil {
		t.Error("/run/nixos/start-list is still there after the next switch")
	}
}

// reboot-triggers (nixos/modules/tasks/auto-upgrade.nix): a system with a kernel names
// its kernel, firmware and kernel parameters and its inhibitors; kernel-a-params differs
// from kernel-a in kernel-params only, kernel-a-firmware in firmware only; a system
// without a kernel (a container) names its inhibitors only.
func TestStandinRebootTriggers(t *testing.T) {
	read := func(attr string) map[string]string {
		b, err := os.ReadFile(filepath.Join(BuildClosure(t, attr), "reboot-triggers"))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]string
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s's reboot-triggers: %v\n%s", attr, err, b)
		}
		return m
	}
	diff := func(a, b map[string]string) []string {
		var keys []string
		for k := range a {
			if a[k] != b[k] {
				keys = append(keys, k)
			}
		}
		for k := range b {
			if _, ok := a[k]; !ok {
				keys = append(keys, k)
			}
		}
		return keys
	}
	a := read(ClosureKernelA)
	if a["kernel"] == "" || a["firmware"] == "" || a["kernel-params"] != "console=ttyS0,loglevel=4" {
		t.Errorf("kernel-a's reboot-triggers: %v", a)
	}
	if d := diff(a, read(ClosureKernelAParams)); strings.Join(d, ",") != "kernel-params" {
		t.Errorf("kernel-a-params differs from kernel-a in %v, want kernel-params only", d)
	}
	if d := diff(a, read(ClosureKernelAFirmware)); strings.Join(d, ",") != "firmware" {
		t.Errorf("kernel-a-firmware differs from kernel-a in %v, want firmware only", d)
	}
	if i := read(ClosureInhibitorA); i["fedi-driver"] != "570" {
		t.Errorf("inhibitor-a's reboot-triggers %v lack its inhibitor", i)
	}
	if g := read(ClosureGood); len(g) != 0 {
		t.Errorf("good (no kernel, no inhibitor) has reboot-triggers %v, want none", g)
	}
}
