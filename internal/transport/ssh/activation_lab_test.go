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
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
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

// reboot-if-needed: a toplevel with the same kernel switches; one with a new kernel
// reboots the node into it and judges the booted system. boot only sets the entry. A
// unit that fails only once its system is booted fails the strict verdict after the
// reboot, named.
func TestLabActivationRebootIfNeededKernel(t *testing.T) {
	n, tr := rebootLabNode(t, "reboot-kernel")
	if _, err := labDeploy(t, tr, "kernel-a", deploybody.ActivationSwitch); err != nil {
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
	if res.Reboot == nil || res.Reboot.Why != "kernel, initrd, kernel-modules changed" || res.Reboot.BootDuration <= 0 {
		t.Fatalf("reboot = %+v, want why the kernel changed and a boot duration", res.Reboot)
	}
	if got := nodeLink(t, n, "/run/booted-system"); got != kernelB {
		t.Fatalf("/run/booted-system = %s, want %s", got, kernelB)
	}
	if !res.Verdict.OK || res.Verdict.Answered == 0 || !strings.Contains(res.Report, "rebooted (kernel, initrd, kernel-modules changed); boot took") {
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

// A switch the stand-in's inhibitor check refuses: activation switch fails naming the
// inhibitor and leaves the node on its system; reboot-if-needed reboots into it.
func TestLabActivationInhibitor(t *testing.T) {
	n, tr := rebootLabNode(t, "reboot-inhibitor")
	a := labtest.BuildClosure(t, "inhibitor-a")
	if _, err := labDeploy(t, tr, "inhibitor-a", deploybody.ActivationSwitch); err != nil {
		t.Fatalf("first deploy: %v", err)
	}
	_, err := labDeploy(t, tr, "inhibitor-b", deploybody.ActivationSwitch)
	if err == nil || !strings.Contains(err.Error(), "needs a reboot: inhibitor fedi-driver changed") || !strings.Contains(err.Error(), "reboot-if-needed") {
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
	if res.Reboot == nil || res.Reboot.Why != "inhibitor fedi-driver changed" || !res.Verdict.OK {
		t.Fatalf("reboot = %+v, verdict:\n%s", res.Reboot, res.Report)
	}
	if got := nodeLink(t, n, "/run/booted-system"); got != b {
		t.Fatalf("/run/booted-system = %s, want %s", got, b)
	}
}
