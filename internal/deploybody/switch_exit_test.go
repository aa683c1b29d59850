package deploybody

import (
	"strings"
	"testing"
	"time"
)

// The order of a deploy on a node whose boot loader takes the switch's argument as its
// default at once (GRUB, extlinux): the boot loader's default is still the previous
// system when the verdict is recorded, and the new system after, for a clean verdict
// and for a failed unit alike (a failed unit keeps its new boot entry).
func TestDeployMovesBootDefaultOnlyAfterVerdictRecord(t *testing.T) {
	for _, c := range []struct {
		name  string
		unit  behaviour
		fails bool
	}{{"clean verdict", runs, false}, {"failed unit", fails, true}} {
		t.Run(c.name, func(t *testing.T) {
			s := newScenario(t, map[string]unitSpec{"web.service": {b: c.unit}})
			s.node.boots.entry = testPrevious
			res, err := s.deploy()
			if (err != nil) != c.fails {
				t.Fatalf("deploy: %v", err)
			}
			if !s.node.recorded || s.node.entryAtRecord != testPrevious {
				t.Fatalf("boot default when the verdict was recorded = %q (recorded %v), want the previous system", s.node.entryAtRecord, s.node.recorded)
			}
			if s.node.boots.entry != testToplevel || s.node.profile != testToplevel || res.Generation != 2 {
				t.Fatalf("after the run: default %s, profile %s, generation %d; want the new system", s.node.boots.entry, s.node.profile, res.Generation)
			}
			if got := switchActions(s.node); len(got) != 1 || got[0] != "test" {
				t.Fatalf("switch actions = %v, want [test]", got)
			}
			if s.node.pushedRoot != "" {
				t.Fatalf("the pushed closure's GC root %s was not released once the profile held the system", s.node.pushedRoot)
			}
		})
	}
}

// Exit 2: the activation script failed, /run/current-system is the new system. A strict
// deploy fails naming the activation's error lines, after writing the boot entry (the
// node runs the new system, as with a failed unit); a lenient one passes with it as a
// reason.
func TestDeployActivationFailureExit2(t *testing.T) {
	for _, strict := range []bool{true, false} {
		s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
		s.opts.Strict = strict
		s.node.activationFails = true
		res, err := s.deploy()
		if strict {
			de := deployErr(t, err, PhaseVerdict)
			if !strings.Contains(de.Error(), "activation script failed") || !strings.Contains(de.Error(), "Activation script snippet 'setupSecrets' failed (1)") ||
				!strings.Contains(de.Error(), "sops-install-secrets: cannot read") {
				t.Fatalf("error must name the activation's error lines: %v", err)
			}
		} else if err != nil {
			t.Fatalf("lenient deploy: %v", err)
		}
		v := res.Verdict
		if v == nil || len(v.ActivationFailed) == 0 || v.OK == strict || !strings.Contains(strings.Join(v.Reasons, "\n"), "setupSecrets") {
			t.Fatalf("strict=%v: verdict %+v", strict, v)
		}
		if s.node.running != testToplevel || s.node.boots.entry != testToplevel || !res.Confirmed {
			t.Fatalf("strict=%v: node runs %s, boots %s: want the new system (it is activated)", strict, s.node.running, s.node.boots.entry)
		}
	}
}

// Exit 11: another switch holds switch-to-configuration's lock. The run names what
// holds it, changes nothing and reverts nothing, waits for it within lock_wait, then
// switches.
func TestDeploySwitchLockedWaitsForOtherSwitch(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.entry = testPrevious
	s.node.otherSwitchUntil = s.clock.now.Add(20 * time.Second)
	s.node.otherSwitchUnit = "nixos-upgrade.service"
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if got := switchActions(s.node); len(got) != 2 || got[0] != "test" || got[1] != "test" {
		t.Fatalf("switch actions = %v, want a turned-away test and one after the wait", got)
	}
	if len(s.node.callsOf("revert")) != 0 || res.BootReverted {
		t.Fatal("a switch turned away by the lock changed nothing: nothing to revert")
	}
	warned := strings.Join(res.Warnings, "\n")
	if !strings.Contains(warned, "nixos-upgrade.service, PID 4242 (switch-to-confi)") || !strings.Contains(warned, SwitchLockFile) {
		t.Fatalf("warnings must name the other switch: %q", warned)
	}
	if s.node.running != testToplevel || s.node.boots.entry != testToplevel || !res.Verdict.OK {
		t.Fatalf("node runs %s, boots %s", s.node.running, s.node.boots.entry)
	}
}

// Exit 11 past lock_wait: the run fails saying what holds the lock, with the node, its
// boot entry and its profile as they were.
func TestDeploySwitchLockedPastLockWait(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.entry = testPrevious
	s.opts.Timings.LockWait = 10 * time.Second
	s.node.otherSwitchUntil = s.clock.now.Add(time.Hour)
	s.node.otherSwitchUnit = "nixos-upgrade.service"
	res, err := s.deploy()
	de := deployErr(t, err, PhaseSwitch)
	for _, want := range []string{"nixos-upgrade.service", "PID 4242", SwitchLockFile, "lock_wait (10s)", "nothing was changed"} {
		if !strings.Contains(de.Error(), want) {
			t.Fatalf("error %q lacks %q", de.Error(), want)
		}
	}
	if strings.Contains(de.Error(), "may point at the new system") || len(s.node.callsOf("revert")) != 0 || res.BootReverted {
		t.Fatalf("no boot entry moved, so none is reverted nor hinted at: %v", err)
	}
	if s.node.running != testPrevious || s.node.boots.entry != testPrevious || s.node.profile != testPrevious || len(s.node.callsOf("finalize")) != 0 {
		t.Fatalf("node runs %s, boots %s, profile %s: want all as before", s.node.running, s.node.boots.entry, s.node.profile)
	}
	if s.node.pushedRoot != "" {
		t.Fatalf("the pushed closure's GC root %s outlived the failed run", s.node.pushedRoot)
	}
}

// Exit 11 while the boot entry is written (another switch began after ours): the
// boot entry's `boot` waits for it too, then writes the entry.
func TestDeployFinalizeWaitsForOtherSwitch(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.onLog = func(phase, message string) {
		if phase == PhaseFinalizeBootEntry && message == "phase started" {
			s.node.otherSwitchUntil = s.clock.Now().Add(5 * time.Second)
			s.node.otherSwitchUnit = "comin.service"
		}
	}
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if n := len(s.node.callsOf("finalize")); n < 2 || s.node.boots.entry != testToplevel || res.Generation != 2 {
		t.Fatalf("finalize calls %d, boot entry %s, generation %d: want a retry after the other switch", n, s.node.boots.entry, res.Generation)
	}
}

// Exit 100 (init-interface-version changed): nothing was activated. Under
// reboot-if-needed the node reboots into the new system and is judged after the boot;
// otherwise the run fails saying a reboot is needed, node and boot entry unchanged.
func TestDeployInitInterfaceChangeExit100(t *testing.T) {
	t.Run("switch", func(t *testing.T) {
		s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
		s.node.boots.entry = testPrevious
		s.node.initInterfaceChanges = true
		res, err := s.deploy()
		de := deployErr(t, err, PhaseSwitch)
		if !strings.Contains(de.Error(), "needs a reboot: init-interface-version changed") || !strings.Contains(de.Hint, "reboot-if-needed") {
			t.Fatalf("error = %v", err)
		}
		if s.node.running != testPrevious || s.node.boots.entry != testPrevious || s.node.profile != testPrevious || res.Generation != 0 || len(s.node.callsOf("revert")) != 0 {
			t.Fatalf("node runs %s, boots %s, profile %s", s.node.running, s.node.boots.entry, s.node.profile)
		}
	})
	t.Run("reboot-if-needed", func(t *testing.T) {
		s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
		s.node.initInterfaceChanges = true
		s.opts.Activation = ActivationRebootIfNeeded
		res, err := s.deploy()
		if err != nil {
			t.Fatalf("deploy: %v", err)
		}
		if res.Reboot == nil || !strings.Contains(res.Reboot.Why, "init-interface-version") || s.node.boots.count != 1 {
			t.Fatalf("want a reboot for the init interface: %+v, %d reboots", res.Reboot, s.node.boots.count)
		}
		if s.node.running != testToplevel || s.node.profile != testToplevel || !res.Verdict.OK {
			t.Fatalf("node runs %s, profile %s, verdict %+v", s.node.running, s.node.profile, res.Verdict)
		}
	})
}

// A switch that stops before it changes anything for a reason its output names (here:
// not NixOS, which switch-to-configuration-ng exits with errno 2) is diagnosed as that,
// not as a failed activation, with no hint about a boot entry.
func TestDeployNotNixOSIsDiagnosed(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.notNixOS = true
	res, err := s.deploy()
	de := deployErr(t, err, PhaseSwitch)
	if !strings.Contains(de.Error(), "not NixOS") || strings.Contains(de.Error(), "activation script failed") || strings.Contains(de.Hint, "may point at the new system") {
		t.Fatalf("error = %v", err)
	}
	if res.Verdict != nil || len(s.node.callsOf("revert")) != 0 || len(s.node.callsOf("finalize")) != 0 {
		t.Fatalf("nothing may be judged, reverted or finalized: %+v", res)
	}
}

func TestSwitchDiagnosis(t *testing.T) {
	for _, c := range []struct {
		sr   SwitchResult
		want string
	}{
		{SwitchResult{ExitCode: 1, Stderr: "Error: switch-to-configuration must be run as the root user\n"}, "not run as root"},
		{SwitchResult{ExitCode: 1, Stderr: "installing the boot loader...\nerror: EFI variables are not supported\nFailed to install bootloader\n"}, "boot loader could not be installed (error: EFI variables are not supported)"},
		{SwitchResult{ExitCode: 2, Stderr: "This is not a NixOS installation!\n"}, "not NixOS"},
		{SwitchResult{ExitCode: 11, Stderr: "Could not acquire lock\n"}, "holds " + SwitchLockFile},
		{SwitchResult{ExitCode: 2, Stderr: "Activation script snippet 'users' failed (1)\nFailed to run activate script\n"}, "snippet 'users' failed"},
		{SwitchResult{ExitCode: 127, Stderr: "sh: 1: /nix/store/x/bin/switch-to-configuration: not found\n"}, "no bin/switch-to-configuration"},
	} {
		if got := switchDiagnosis("test", c.sr); !strings.Contains(got, c.want) {
			t.Errorf("diagnosis of %+v = %q, want %q", c.sr, got, c.want)
		}
	}
}

func TestParseSwitchLockHolder(t *testing.T) {
	if h := parseSwitchLockHolder("held 812 nixos-upgrade.service switch-to-confi\n"); h.String() != "nixos-upgrade.service, PID 812 (switch-to-confi)" {
		t.Fatalf("holder = %q", h)
	}
	if h := parseSwitchLockHolder("held 77 - -\n"); h.String() != "PID 77" {
		t.Fatalf("holder = %q", h)
	}
	if h := parseSwitchLockHolder("free\n"); !h.free {
		t.Fatal("free lock not read as free")
	}
	if h := parseSwitchLockHolder("unknown\n"); h.known || h.free {
		t.Fatal("an unknown holder is neither known nor free")
	}
}
