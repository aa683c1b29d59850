package deploybody

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
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
	if res.Reboot == nil || res.Reboot.Why != "kernel, initrd, kernel-modules changed" || res.Reboot.BootDuration <= 0 {
		t.Fatalf("result's reboot = %+v, want why the kernel changed and a boot duration", res.Reboot)
	}
	if !res.Verdict.OK || !strings.Contains(res.Verdict.Activation, "rebooted (kernel, initrd, kernel-modules changed); boot took") || !strings.Contains(res.Report, "rebooted (kernel, initrd, kernel-modules changed)") {
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
	if got := switchActions(s.node); !slices.Equal(got, []string{"test"}) {
		t.Fatalf("actions = %v, want [test]: activated without touching the boot loader", got)
	}
	if res.Verdict.Activation != "switched" {
		t.Fatalf("activation = %q, want switched", res.Verdict.Activation)
	}
}

// inhibitorRefused is what switch-to-configuration prints when its switch-inhibitors
// check refuses (nixos/modules/system/activation/switchable-system.nix, word for word;
// the check's lines on stdout, the summary on stderr).
const inhibitorRefused = `Checking switch inhibitors...
There are changes to critical components of the system:

nvidia-driver : 570.1 -> 575.2

Switching into this system is not recommended.
You probably want to run 'nixos-rebuild boot' and reboot your system instead.

If you really want to switch into this configuration directly, then
you can set NIXOS_NO_CHECK=1 to ignore pre-switch checks.

WARNING: doing so might cause the switch to fail or your system to become unstable.

Pre-switch check 'switchInhibitors' failed
`

// activation = switch: a switch the inhibitors refuse fails as "needs a reboot",
// naming the inhibitor, not as a closure fault; the node keeps its system.
func TestActivationSwitchRefusedByInhibitorNamesIt(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.refuse = map[string]string{testToplevel: inhibitorRefused}
	res, err := s.deploy()
	de := deployErr(t, err, PhaseSwitch)
	if !errors.Is(err, ErrNeedsReboot) || !strings.Contains(de.Err.Error(), "needs a reboot: switch inhibitors changed: nvidia-driver : 570.1 -> 575.2") || !strings.Contains(de.Hint, "reboot-if-needed") {
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
	if res.Reboot == nil || res.Reboot.Why != "switch inhibitors changed: nvidia-driver : 570.1 -> 575.2" || s.node.running != testToplevel {
		t.Fatalf("reboot = %+v, running %s", res.Reboot, s.node.running)
	}
	if !strings.Contains(res.Verdict.Activation, "rebooted (switch inhibitors changed: nvidia-driver : 570.1 -> 575.2)") {
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
	if got := switchActions(s.node); len(got) != 0 || len(s.node.callsOf("finalize")) != 1 {
		t.Fatalf("actions = %v, finalize %d: want no switch, the boot entry written once (after the verdict record)", got, len(s.node.callsOf("finalize")))
	}
	if !s.node.recorded || s.node.entryAtRecord != "" {
		t.Fatalf("the boot entry was %q when the verdict was recorded (recorded %v): want it untouched until then", s.node.entryAtRecord, s.node.recorded)
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
		if rebootAt >= 0 && i > rebootAt && len(c.argv) > 3 && c.argv[2] == records.LockScript && c.argv[4] == "acquire" {
			return
		}
	}
	t.Fatal("no lock acquire after the reboot")
}

// The refusal is read from switch-to-configuration's own text, wherever its lines went
// (the check's on stdout, the summary on stderr): each changed component, old -> new.
func TestRefusedByPreSwitchCheck(t *testing.T) {
	twoChanges := strings.Replace(inhibitorRefused, "nvidia-driver : 570.1 -> 575.2\n",
		"dbus-implementation : dbus -> broker\nkernel-params : quiet,loglevel=4 -> quiet -> splash\n", 1)
	for _, c := range []struct {
		name           string
		stdout, stderr string
		code           int
		want           string
	}{
		{"real text, one change", inhibitorRefused, "Pre-switch checks failed\n", 1, "switch inhibitors changed: nvidia-driver : 570.1 -> 575.2"},
		{"real text on stderr only", "", inhibitorRefused + "Pre-switch checks failed\n", 1, "switch inhibitors changed: nvidia-driver : 570.1 -> 575.2"},
		{"two changes, a value with an arrow", twoChanges, "", 1,
			"switch inhibitors changed: dbus-implementation : dbus -> broker; kernel-params : quiet,loglevel=4 -> quiet -> splash"},
		{"the first version's lower case", "checking switch inhibitors...\nthere are changes to critical components of the system:\n\nfoo : 1 -> 2\n\nswitching into this system is not recommended\n", "", 1,
			"switch inhibitors changed: foo : 1 -> 2"},
		{"the check named, no list", "Pre-switch check 'switchInhibitors' failed\n", "", 1, "switch inhibitors changed"},
		{"another check", "Pre-switch check 'diskSpace' failed\n", "Pre-switch checks failed\n", 1, "pre-switch check diskSpace failed"},
		{"only the summary", "", "Pre-switch checks failed\n", 1, "pre-switch checks failed"},
		{"failed units", "", "warning: the following units failed: a.service\n", 4, ""},
		{"boot loader", "", "Failed to install bootloader\n", 1, ""},
		{"a switch that passed says nothing", inhibitorRefused, "", 0, ""},
	} {
		if got := refusedByPreSwitchCheck(SwitchResult{ExitCode: c.code, Stdout: c.stdout, Stderr: c.stderr}); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

// NixOS' rule with reboot-triggers: a change of kernel-params alone (the same kernel)
// reboots under reboot-if-needed, and the verdict names the trigger, old -> new; a
// change that touches no trigger (a new systemd) switches, and the verdict says the
// switch re-executed systemd.
func TestActivationRebootIfNeededByRebootTriggers(t *testing.T) {
	triggers := func(params string) map[string]string {
		return map[string]string{"kernel": "/nix/store/k-linux-6.12", "firmware": "/nix/store/fw", "kernel-params": params}
	}
	for _, tc := range []struct {
		name       string
		newParams  string
		reexec     bool
		wantReboot string
		wantNote   string
	}{
		{"kernel-params only", "quiet,console=ttyS0", false, "reboot-triggers changed: kernel-params : quiet -> quiet,console=ttyS0",
			"rebooted (reboot-triggers changed: kernel-params : quiet -> quiet,console=ttyS0); boot took"},
		{"systemd only", "quiet", true, "", "switched; " + reexecutedNote},
		{"nothing a switch cannot do", "quiet", false, "", "switched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
			s.node.boots.triggers = map[string]map[string]string{testPrevious: triggers("quiet"), testToplevel: triggers(tc.newParams)}
			s.node.boots.reexec = map[string]bool{testToplevel: tc.reexec}
			s.opts.Activation = ActivationRebootIfNeeded
			res, err := s.deploy()
			if err != nil {
				t.Fatalf("deploy: %v", err)
			}
			why := ""
			if res.Reboot != nil {
				why = res.Reboot.Why
			}
			if why != tc.wantReboot || (tc.wantReboot == "") != (s.node.boots.count == 0) {
				t.Fatalf("reboot why %q (%d reboots), want %q", why, s.node.boots.count, tc.wantReboot)
			}
			exact := tc.wantReboot == "" // a switch's sentence is whole; a reboot's goes on with its time
			if (exact && res.Verdict.Activation != tc.wantNote) || !strings.HasPrefix(res.Verdict.Activation, tc.wantNote) || s.node.running != testToplevel {
				t.Fatalf("verdict activation %q, want %q…; running %s", res.Verdict.Activation, tc.wantNote, s.node.running)
			}
			if tc.reexec && !strings.Contains(res.Report, reexecutedNote) {
				t.Fatalf("the report must say systemd was re-executed:\n%s", res.Report)
			}
		})
	}
}

// A node whose booted system has no reboot-triggers (built before NixOS wrote them) is
// compared by its kernel, initrd and kernel-modules: the new system's triggers alone do
// not decide.
func TestActivationRebootIfNeededBootedWithoutTriggers(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.triggers = map[string]map[string]string{testToplevel: {"kernel-params": "quiet"}}
	s.node.boots.kernel = map[string]string{testToplevel: newKernel}
	s.opts.Activation = ActivationRebootIfNeeded
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if res.Reboot == nil || res.Reboot.Why != "kernel, initrd, kernel-modules changed" {
		t.Fatalf("reboot = %+v, want one for the kernel links", res.Reboot)
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
