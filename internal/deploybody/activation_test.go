package deploybody

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const newKernel = "/nix/store/11111111111111111111111111111111-linux-6.18"

// switchActions are the actions the run gave switch-to-configuration.
func switchActions(n *fakeNode) []string {
	var out []string
	for _, c := range n.callsOf("switch") {
		out = append(out, c.argv[1])
	}
	return out
}

// reboot-if-needed with a new kernel: the node is rebooted into the new system (boot
// entry, reboot, the node back on it) and the booted system is judged; the verdict
// says it rebooted, why, and how long the boot took.
func TestActivationRebootIfNeededRebootsForNewKernel(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.kernel = map[string]string{testToplevel: newKernel}
	s.opts.Activation = ActivationRebootIfNeeded
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if s.node.boots.count != 1 || s.node.boots.booted != testToplevel || s.node.running != testToplevel {
		t.Fatalf("want one reboot into the new toplevel: %d reboots, booted %s, running %s", s.node.boots.count, s.node.boots.booted, s.node.running)
	}
	if got := switchActions(s.node); !slices.Equal(got, []string{"boot"}) {
		t.Fatalf("switch-to-configuration actions = %v, want [boot] (a switch cannot apply a new kernel)", got)
	}
	if res.Reboot == nil || res.Reboot.Why != "kernel changed" || res.Reboot.BootDuration <= 0 {
		t.Fatalf("result's reboot = %+v, want why kernel changed and a boot duration", res.Reboot)
	}
	if !res.Verdict.OK || !strings.Contains(res.Verdict.Activation, "rebooted (kernel changed); boot took") || !strings.Contains(res.Report, "rebooted (kernel changed)") {
		t.Fatalf("verdict must pass and say it rebooted and why: %+v\n%s", res.Verdict, res.Report)
	}
	if res.Verdict.Samples == 0 || res.Verdict.Answered == 0 {
		t.Fatalf("the booted system must be watched: %+v", res.Verdict)
	}
	if s.node.profile != testToplevel || !res.Confirmed {
		t.Fatalf("boot entry %s confirmed %v, want the new toplevel, confirmed", s.node.profile, res.Confirmed)
	}
}

// reboot-if-needed with the same kernel (and systemd) switches, without a reboot.
func TestActivationRebootIfNeededSwitchesWhenKernelUnchanged(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.opts.Activation = ActivationRebootIfNeeded
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if s.node.boots.count != 0 || res.Reboot != nil {
		t.Fatalf("no reboot wanted: %d reboots, %+v", s.node.boots.count, res.Reboot)
	}
	if got := switchActions(s.node); !slices.Equal(got, []string{"switch"}) {
		t.Fatalf("actions = %v, want [switch]", got)
	}
	if res.Verdict.Activation != "switched" {
		t.Fatalf("activation = %q, want switched", res.Verdict.Activation)
	}
}

const inhibitorRefused = "switch inhibitor nvidia-driver changed: 570.1 -> 575.2\nPre-switch check 'switchInhibitors' failed\n"

// activation = switch: a switch the inhibitors refuse fails as "needs a reboot",
// naming the inhibitor, not as a closure fault; the node keeps its system.
func TestActivationSwitchRefusedByInhibitorNamesIt(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.refuse = map[string]string{testToplevel: inhibitorRefused}
	res, err := s.deploy()
	de := deployErr(t, err, PhaseSwitch)
	if !strings.Contains(de.Err.Error(), "needs a reboot: inhibitor nvidia-driver changed") || !strings.Contains(de.Hint, "reboot-if-needed") {
		t.Fatalf("error must name the inhibitor and hint at reboot-if-needed: %v", err)
	}
	if s.node.running != testPrevious || s.node.profile != testPrevious || s.node.boots.count != 0 || res.Reboot != nil {
		t.Fatalf("node must keep its system: running %s boot %s reboots %d", s.node.running, s.node.profile, s.node.boots.count)
	}
}

// reboot-if-needed: the same refusal reboots the node into the new system, and the
// verdict names the inhibitor as the reason.
func TestActivationRebootIfNeededRebootsOnInhibitor(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.refuse = map[string]string{testToplevel: inhibitorRefused}
	s.opts.Activation = ActivationRebootIfNeeded
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if res.Reboot == nil || res.Reboot.Why != "inhibitor nvidia-driver changed" || s.node.running != testToplevel {
		t.Fatalf("reboot = %+v, running %s", res.Reboot, s.node.running)
	}
	if !strings.Contains(res.Verdict.Activation, "inhibitor nvidia-driver changed") {
		t.Fatalf("verdict activation = %q", res.Verdict.Activation)
	}
}

// activation = reboot always reboots, even with the same kernel.
func TestActivationRebootAlwaysReboots(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.opts.Activation = ActivationReboot
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if res.Reboot == nil || res.Reboot.Why != "asked to" || s.node.boots.count != 1 {
		t.Fatalf("reboot = %+v, %d reboots", res.Reboot, s.node.boots.count)
	}
}

// A unit that fails after the boot fails a strict verdict, named as after a switch.
func TestActivationFailedUnitAfterRebootFailsStrict(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: fails}, "db.service": {b: runs}})
	s.opts.Activation = ActivationReboot
	res, err := s.deploy()
	de := deployErr(t, err, PhaseVerdict)
	if !strings.Contains(de.Error(), "web.service") || res.Reboot == nil {
		t.Fatalf("the verdict after the reboot must name web.service: %v (reboot %+v)", err, res.Reboot)
	}
	if got := failedNamesOf(res.Verdict); !slices.Equal(got, []string{"web.service"}) {
		t.Fatalf("failed = %v", got)
	}
}

// activation = boot sets the boot entry only: no switch, no reboot, and the verdict
// says nothing that needs the new system running was judged.
func TestActivationBootSetsEntryOnly(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: fails}})
	s.opts.Activation = ActivationBoot
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if s.node.running != testPrevious || s.node.boots.entry != testToplevel || s.node.profile != testToplevel || s.node.boots.count != 0 {
		t.Fatalf("want the boot entry set only: running %s entry %s profile %s reboots %d", s.node.running, s.node.boots.entry, s.node.profile, s.node.boots.count)
	}
	if got := switchActions(s.node); !slices.Equal(got, []string{"boot"}) {
		t.Fatalf("actions = %v, want [boot]", got)
	}
	if !strings.Contains(res.Verdict.Activation, "nothing that needs it running was judged") || !strings.Contains(res.Report, "boot entry set only") {
		t.Fatalf("verdict must say it judged nothing: %+v\n%s", res.Verdict, res.Report)
	}
	if note := phaseNote(res, PhaseWatch); !strings.Contains(note, "activation boot") {
		t.Fatalf("watch note = %q, want skipped for activation boot", note)
	}
}

// A node that does not come back within node_wait after its reboot is reported
// unreachable after a reboot, with the last thing seen.
func TestActivationRebootNeverComesBack(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.never = true
	s.opts.Activation = ActivationReboot
	res, err := s.deploy()
	de := deployErr(t, err, PhaseSwitch)
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, ErrNotBack) || !strings.Contains(de.Err.Error(), "unreachable after a reboot: the node did not come back within node_wait") || !strings.Contains(de.Err.Error(), "last seen: "+errFakeUnreachable.Error()) {
		t.Fatalf("want unreachable after a reboot with the last thing seen: %v", err)
	}
	if res.Reboot == nil || res.Reboot.Why != "asked to" {
		t.Fatalf("reboot = %+v", res.Reboot)
	}
}

// A boot loader that boots the old system is caught: the node must run the new
// toplevel as /run/booted-system before anything is judged.
func TestActivationRebootIntoOldSystemFails(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.ignores = true
	s.opts.Activation = ActivationReboot
	_, err := s.deploy()
	de := deployErr(t, err, PhaseSwitch)
	if !strings.Contains(de.Err.Error(), "rebooted into "+testPrevious) || !strings.Contains(de.Err.Error(), "not the new toplevel") {
		t.Fatalf("error = %v", err)
	}
}

// The reboot emptied /run and the node lock with it: the run takes it again before it
// judges, and a run that took the node meanwhile stops this one.
func TestActivationRebootRetakesLock(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.opts.Activation = ActivationReboot
	if _, err := s.deploy(); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	rebootAt := -1
	for i, c := range s.node.callsOf("run") {
		if len(c.argv) > 2 && c.argv[2] == rebootScript {
			rebootAt = i
		}
		if rebootAt >= 0 && i > rebootAt && len(c.argv) > 3 && c.argv[2] == lockScript && c.argv[4] == "acquire" {
			return
		}
	}
	t.Fatal("no lock acquire after the reboot")
}

func TestRefusedByPreSwitchCheck(t *testing.T) {
	for _, c := range []struct{ out, want string }{
		{inhibitorRefused, "inhibitor nvidia-driver changed"},
		{"Pre-switch check 'switchInhibitors' failed\n", "a switch inhibitor changed"},
		{"Pre-switch check 'diskSpace' failed\n", "pre-switch check diskSpace failed"},
		{"warning: the following units failed: a.service\n", ""},
	} {
		if got := refusedByPreSwitchCheck(SwitchResult{ExitCode: 1, Stderr: c.out}); got != c.want {
			t.Errorf("%q: got %q, want %q", c.out, got, c.want)
		}
	}
}

// Issue 39, item 5: the reboot command never reached the node (the connection broke as
// it was sent). The marker the run left and read back is still there, so the node has
// not rebooted: the run waits node_wait and fails saying the reboot has not begun,
// never "rebooted" and never "the boot loader did not take the new boot entry". On the
// current main the marker and the reboot were one command, and a marker never written
// looked like one a reboot emptied.
func TestActivationRebootThatNeverReachedTheNode(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.opts.Activation = ActivationReboot
	s.node.boots.rebootLost = true
	res, err := s.deploy()
	if err == nil || !errors.Is(err, ErrNotBack) || !strings.Contains(err.Error(), "the reboot has not begun") ||
		strings.Contains(err.Error(), "did not take the new boot entry") {
		t.Fatalf("err = %v", err)
	}
	if res.Verdict != nil || s.node.boots.count != 0 {
		t.Fatalf("verdict %+v after %d reboots", res.Verdict, s.node.boots.count)
	}
}
