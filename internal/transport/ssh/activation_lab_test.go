package ssh

// Lab tests of the deploy body's activations (internal/deploybody/activation.go; here,
// beside the SSH transport they run over, because the body's package may not import a
// transport) on real Incus containers with real
// systemd, sshd and Nix, through the SSH transport: `systemctl reboot` inside a lab
// container restarts its init, /run is emptied, and the stand-in systems' boot entry
// is booted by the stand-in stage 2 (lab/closures/switch-to-configuration.sh). Each
// test takes a throwaway node (labtest.NewInstance): a reboot must not disturb the
// shared ones.

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// rebootLabNode is a throwaway lab node and an SSH transport to it (pinned host key).
func rebootLabNode(t *testing.T, name string) (labtest.Node, deploybody.Transport) {
	t.Helper()
	n := labtest.NewInstance(t, name)
	tr, err := New(n.Name, Config{Host: n.SSHHost, Port: n.SSHPort, HostKey: n.HostKey, PrivateKeyFile: labtest.KeyFile()}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return n, tr
}

// labDeploy deploys the stand-in attr with activation a.
func labDeploy(t *testing.T, tr deploybody.Transport, attr string, a deploybody.Activation) (*deploybody.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := deploybody.Deploy(ctx, tr, deploybody.Options{
		Toplevel: labtest.BuildClosure(t, attr), Strict: true, Activation: a, SelfRevert: false,
		Timings: deploybody.Timings{NodeWait: 90 * time.Second, Settle: time.Second, Watch: 3 * time.Second, SampleInterval: time.Second},
	})
	t.Logf("deploy %s (activation %s): %s, err %v", attr, a, time.Since(start).Round(time.Millisecond), err)
	return res, err
}

func nodeLink(t *testing.T, n labtest.Node, link string) string {
	t.Helper()
	return strings.TrimSpace(labtest.Incus(t, "exec", n.Instance, "--", "readlink", "-f", link))
}

// reboot-if-needed: the node boots kernel-a (a lab node first boots its base system,
// whose kernel is not kernel-a's); a toplevel with the same kernel switches; one with a
// new kernel reboots the node into it and judges the booted system. boot only sets the
// entry. A
// unit that fails only once its system is booted fails the strict verdict after the
// reboot, named.
func TestLabActivationRebootIfNeededKernel(t *testing.T) {
	n, tr := rebootLabNode(t, "reboot-kernel")
	if _, err := labDeploy(t, tr, "kernel-a", deploybody.ActivationReboot); err != nil {
		t.Fatalf("first deploy: %v", err)
	}
	// The same kernel: a switch, no reboot.
	res, err := labDeploy(t, tr, "kernel-a-v2", deploybody.ActivationRebootIfNeeded)
	if err != nil || res.Reboot != nil || res.Verdict.Activation != "switched" {
		t.Fatalf("same kernel: want a switch and no reboot: %v %+v", err, res.Reboot)
	}
	// A new kernel: a reboot into it, judged after the boot.
	kernelB := labtest.BuildClosure(t, "kernel-b")
	res, err = labDeploy(t, tr, "kernel-b", deploybody.ActivationRebootIfNeeded)
	if err != nil {
		t.Fatalf("new kernel: %v\n%s", err, res.Report)
	}
	why := labtest.KernelTriggerWhy(t, labtest.BuildClosure(t, "kernel-a"), kernelB)
	if res.Reboot == nil || res.Reboot.Why != why || res.Reboot.BootDuration <= 0 {
		t.Fatalf("reboot = %+v, want why the kernel changed and a boot duration", res.Reboot)
	}
	if got := nodeLink(t, n, "/run/booted-system"); got != kernelB {
		t.Fatalf("/run/booted-system = %s, want %s", got, kernelB)
	}
	if !res.Verdict.OK || res.Verdict.Answered == 0 || !strings.Contains(res.Report, "rebooted ("+why+"); boot took") {
		t.Fatalf("verdict after the reboot:\n%s", res.Report)
	}
	t.Logf("boot took %s; the run's phases: %v", res.Reboot.BootDuration, res.Phases)

	// boot: the entry only.
	failsAtBoot := labtest.BuildClosure(t, "boot-fails")
	res, err = labDeploy(t, tr, "boot-fails", deploybody.ActivationBoot)
	if err != nil || !strings.Contains(res.Verdict.Activation, "boot entry set only") {
		t.Fatalf("boot: %v %+v", err, res.Verdict)
	}
	if got := nodeLink(t, n, "/run/current-system"); got != kernelB {
		t.Fatalf("boot must not switch: the node runs %s, want %s", got, kernelB)
	}
	if got := nodeLink(t, n, "/nix/var/nix/profiles/system"); got != failsAtBoot {
		t.Fatalf("boot entry = %s, want %s", got, failsAtBoot)
	}
	// reboot: the unit that fails once booted fails the strict verdict, named.
	res, err = labDeploy(t, tr, "boot-fails", deploybody.ActivationReboot)
	if err == nil || !strings.Contains(err.Error(), "fedi-boot-only.service") || res.Reboot == nil || res.Reboot.Why != "asked to" {
		t.Fatalf("a unit failing after the boot must fail the strict verdict, named: %v (reboot %+v)", err, res.Reboot)
	}
	if got := nodeLink(t, n, "/run/booted-system"); got != failsAtBoot {
		t.Fatalf("/run/booted-system = %s, want %s", got, failsAtBoot)
	}
}

// A switch the switch-inhibitors check refuses (JSON files, nixpkgs' comparison and
// words): activation switch fails naming the change, old -> new, and leaves the node on
// its system; reboot-if-needed reboots into it, for the same reason.
func TestLabActivationInhibitor(t *testing.T) {
	n, tr := rebootLabNode(t, "reboot-inhibitor")
	a := labtest.BuildClosure(t, "inhibitor-a")
	if _, err := labDeploy(t, tr, "inhibitor-a", deploybody.ActivationReboot); err != nil {
		t.Fatalf("first deploy: %v", err)
	}
	_, err := labDeploy(t, tr, "inhibitor-b", deploybody.ActivationSwitch)
	if err == nil || !strings.Contains(err.Error(), "needs a reboot: switch inhibitors changed: fedi-driver : 570 -> 575") || !strings.Contains(err.Error(), "reboot-if-needed") {
		t.Fatalf("want a failure naming the inhibitor: %v", err)
	}
	if got := nodeLink(t, n, "/run/current-system"); got != a {
		t.Fatalf("the refused switch must leave the node on %s, it runs %s", a, got)
	}
	b := labtest.BuildClosure(t, "inhibitor-b")
	res, err := labDeploy(t, tr, "inhibitor-b", deploybody.ActivationRebootIfNeeded)
	if err != nil {
		t.Fatalf("reboot-if-needed: %v", err)
	}
	if res.Reboot == nil || res.Reboot.Why != "reboot-triggers changed: fedi-driver : 570 -> 575" || !res.Verdict.OK {
		t.Fatalf("reboot = %+v, verdict:\n%s", res.Reboot, res.Report)
	}
	if got := nodeLink(t, n, "/run/booted-system"); got != b {
		t.Fatalf("/run/booted-system = %s, want %s", got, b)
	}
}

// labDeployWaiting is labDeploy with a node_wait of its own (a node that never comes
// back is waited for that long).
func labDeployWaiting(t *testing.T, tr deploybody.Transport, attr string, a deploybody.Activation, nodeWait time.Duration) (*deploybody.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return deploybody.Deploy(ctx, tr, deploybody.Options{
		Toplevel: labtest.BuildClosure(t, attr), Strict: true, Activation: a, SelfRevert: false,
		Timings: deploybody.Timings{NodeWait: nodeWait, Settle: time.Second, Watch: 3 * time.Second, SampleInterval: time.Second},
	})
}

// powerOn starts (or restarts) the node as a machine switched on again, and waits until
// its boot has run (bounded: 120 tries a second apart).
func powerOn(t *testing.T, n labtest.Node, verb string) {
	t.Helper()
	labtest.Incus(t, verb, n.Instance)
	for i := 0; i < 120; i++ {
		out, _ := labtest.IncusErr("exec", n.Instance, "--", "systemctl", "is-system-running")
		if s := strings.TrimSpace(out); s == "running" || s == "degraded" {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("%s %s: the node did not finish booting in 120 s", verb, n.Instance)
}

// efiVars is what the stand-in boot loader holds: LoaderEntryOneShot, LoaderEntryDefault
// and the deploy's pin (records.BootPinFile), "-" for each that is absent.
func efiVars(t *testing.T, n labtest.Node) string {
	t.Helper()
	return strings.TrimSpace(labtest.Incus(t, "exec", n.Instance, "--", "sh", "-c",
		"for f in /var/lib/fediversity-standin-efi/LoaderEntryOneShot /var/lib/fediversity-standin-efi/LoaderEntryDefault "+records.BootPinFile+
			"; do cat $f 2>/dev/null || echo -; done | tr '\\n' ' '"))
}

// entryOf is the stand-in boot loader's entry of a toplevel.
// entryOf is the ID of the node's systemd-boot entry that boots toplevel: its file
// name, less a boot-counting counter (the stand-in names entries by generation, as
// systemd-boot-builder.py does).
func entryOf(t *testing.T, n labtest.Node, toplevel string) string {
	t.Helper()
	f := strings.TrimSpace(labtest.Incus(t, "exec", n.Instance, "--", "/bin/sh", "-c",
		"grep -l 'init="+toplevel+"/init' /boot/loader/entries/*.conf | head -n 1"))
	if f == "" {
		t.Fatalf("no boot entry on %s boots %s", n.Instance, toplevel)
	}
	return regexp.MustCompile(`\+[0-9]+(-[0-9]+)?\.conf$`).ReplaceAllString(strings.TrimPrefix(f, "/boot/loader/entries/"), ".conf")
}

// The one-shot boot entry over SSH, on the lab's stand-in boot loader (the closure's
// bootctl and the stand-in stage 2; a container has no boot loader to show it):
//   - an ok reboot boots the new system once, then makes it the default: a later
//     reboot boots it again, and nothing stays pinned;
//   - a system whose boot never comes up (boot-bricks powers the node off) fails the
//     run as not back, and the node's next power-on boots the previous system;
//   - a reboot whose verdict fails (boot-fails) points the boot entry back at the
//     previous default (the pinned one: the node never booted the bricked system), and
//     nothing stays pinned: the next reboot boots it.
func TestLabActivationRebootOneShotBootEntry(t *testing.T) {
	n, tr := rebootLabNode(t, "reboot-oneshot")
	kernelA := labtest.BuildClosure(t, "kernel-a")
	kernelB := labtest.BuildClosure(t, "kernel-b")
	if _, err := labDeploy(t, tr, "kernel-a", deploybody.ActivationSwitch); err != nil {
		t.Fatalf("first deploy: %v", err)
	}
	res, err := labDeploy(t, tr, "kernel-b", deploybody.ActivationReboot)
	if err != nil {
		t.Fatalf("reboot into kernel-b: %v", err)
	}
	if res.Reboot.OneShotEntry != entryOf(t, n, kernelB) || res.Reboot.DefaultEntry != entryOf(t, n, kernelA) ||
		!strings.Contains(res.Verdict.Activation, "booted once from a one-shot boot entry; the new system is the default entry now that the verdict is ok") {
		t.Fatalf("reboot %+v, verdict activation %q", res.Reboot, res.Verdict.Activation)
	}
	if got := efiVars(t, n); got != "- - -" {
		t.Fatalf("after an ok verdict nothing stays set or pinned; the boot loader holds %q", got)
	}
	powerOn(t, n, "restart")
	if got := nodeLink(t, n, "/run/booted-system"); got != kernelB {
		t.Fatalf("a later reboot boots %s, want the new default %s", got, kernelB)
	}

	// A boot that never comes up: not back within node_wait; the next power-on boots
	// the previous system.
	start := time.Now()
	_, err = labDeployWaiting(t, tr, "boot-bricks", deploybody.ActivationReboot, 30*time.Second)
	if !errors.Is(err, deploybody.ErrNotBack) || !strings.Contains(err.Error(), "power the node off and on, and it boots its previous system") {
		t.Fatalf("boot-bricks: want not back, with the one-shot hint: %v", err)
	}
	t.Logf("boot-bricks: not back after %s", time.Since(start).Round(time.Second))
	if state := strings.TrimSpace(labtest.Incus(t, "list", "^"+n.Instance+"$", "--format", "csv", "-c", "s")); state != "STOPPED" {
		t.Fatalf("the bricked node is %s, want STOPPED (it powered itself off)", state)
	}
	powerOn(t, n, "start")
	if got := nodeLink(t, n, "/run/booted-system"); got != kernelB {
		t.Fatalf("after the failed one-shot boot the node boots %s, want its previous system %s", got, kernelB)
	}
	if got := efiVars(t, n); got != "- "+entryOf(t, n, kernelB)+" "+entryOf(t, n, kernelB) {
		t.Fatalf("boot loader after the failed one-shot: %q, want no one-shot and the previous system pinned", got)
	}

	// A verdict that fails after the boot: the previous system stays the default.
	failsAtBoot := labtest.BuildClosure(t, "boot-fails")
	res, err = labDeploy(t, tr, "boot-fails", deploybody.ActivationReboot)
	if err == nil || !strings.Contains(err.Error(), "fedi-boot-only.service") {
		t.Fatalf("boot-fails: want the strict verdict to fail naming fedi-boot-only.service: %v", err)
	}
	if got := nodeLink(t, n, "/run/booted-system"); got != failsAtBoot {
		t.Fatalf("boot-fails was not booted: %s", got)
	}
	if !strings.Contains(res.Verdict.Activation, "the previous system stays the default entry ("+entryOf(t, n, kernelB)+")") {
		t.Fatalf("verdict activation = %q", res.Verdict.Activation)
	}
	if got := efiVars(t, n); got != "- - -" {
		t.Fatalf("after a failed verdict nothing stays pinned; the boot loader holds %q", got)
	}
	if got := nodeLink(t, n, "/nix/var/nix/profiles/system"); got != kernelB {
		t.Fatalf("after a failed verdict the system profile is %s, want the previous system %s", got, kernelB)
	}
	powerOn(t, n, "restart")
	if got := nodeLink(t, n, "/run/booted-system"); got != kernelB {
		t.Fatalf("after a failed verdict the next reboot boots %s, want the previous system %s", got, kernelB)
	}
}
