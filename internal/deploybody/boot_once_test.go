package deploybody

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The one-shot boot entry against the fake node's boot loader (fakereboot_test.go: a
// boot loader that boots an entry once, a node that never comes back and its next
// power cycle cannot be had on demand from a lab container; the lab tests boot real
// containers through a stand-in boot loader).

// powerCycle starts a node that did not come back: it boots what its boot loader
// says now, as a machine switched off and on does.
func powerCycle(n *fakeNode) {
	n.mu.Lock()
	n.boots.never = false
	n.boots.until = n.clock.now
	n.chooseBoot()
	n.mu.Unlock()
	_ = n.Reach(context.Background())
}

// A reboot with an ok verdict: the new system is booted once (one-shot) while the
// previous one stays the default; the ok verdict then makes the new system the
// default (the pin is released), and says so.
func TestRebootBootsOnceThenMakesTheDefaultOnAnOKVerdict(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.oneShot = true
	s.opts.Activation = ActivationReboot
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if s.node.boots.booted != testToplevel || s.node.boots.once != "" {
		t.Fatalf("booted %s (one-shot left %q), want the new system booted once", s.node.boots.booted, s.node.boots.once)
	}
	if res.Reboot.OneShotEntry != fakeEntry(testToplevel) || res.Reboot.DefaultEntry != fakeEntry(testPrevious) {
		t.Fatalf("reboot = %+v, want the new entry once and the previous one the default", res.Reboot)
	}
	if s.node.boots.pinned != "" || s.node.profile != testToplevel {
		t.Fatalf("after an ok verdict the pin must be released (pinned %q) and the profile the new system (%s)", s.node.boots.pinned, s.node.profile)
	}
	if want := "booted once from a one-shot boot entry; the new system is the default entry now that the verdict is ok"; !strings.Contains(res.Verdict.Activation, want) {
		t.Fatalf("verdict activation = %q, want it to say %q", res.Verdict.Activation, want)
	}
	// A later reboot boots the new system: it is the default.
	powerCycle(s.node)
	if s.node.boots.booted != testToplevel {
		t.Fatalf("the next boot runs %s, want the new system", s.node.boots.booted)
	}
}

// A reboot whose verdict fails: the boot entry goes back to the previous system (its
// profile too, and nothing stays pinned), the verdict and a warning say so, and the node
// boots its previous system at its next boot.
func TestRebootWithAFailedVerdictPointsTheBootEntryBack(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: fails}})
	s.node.boots.oneShot = true
	s.opts.Activation = ActivationReboot
	res, err := s.deploy()
	wantDeployErr(t, err, PhaseVerdict)
	if s.node.boots.pinned != "" || s.node.boots.entry != testPrevious || s.node.profile != testPrevious {
		t.Fatalf("after a failed verdict: pinned %q, entry %s, profile %s; want no pin and the previous system %s", s.node.boots.pinned, s.node.boots.entry, s.node.profile, testPrevious)
	}
	if !strings.Contains(res.Verdict.Activation, "the previous system stays the default entry ("+fakeEntry(testPrevious)+")") {
		t.Fatalf("verdict activation = %q", res.Verdict.Activation)
	}
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "then boots its previous system "+testPrevious) {
		t.Fatalf("warnings = %q, want one saying the node boots its previous system next", res.Warnings)
	}
	if n := len(s.node.callsOf("revert")); n != 1 {
		t.Fatalf("revert calls = %d, want 1", n)
	}
	powerCycle(s.node)
	if s.node.boots.booted != testPrevious {
		t.Fatalf("the next boot runs %s, want the previous system %s", s.node.boots.booted, testPrevious)
	}
}

// A one-shot boot that never came back leaves its pin: the next reboot deploy keeps
// that pinned entry (what the node really boots) as the default, not the profile's
// system (the one that never came back).
func TestRebootAfterANodeThatNeverCameBackKeepsThePinnedDefault(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.oneShot = true
	s.node.boots.never = true
	s.opts.Activation = ActivationReboot
	if _, err := s.deploy(); !errors.Is(err, ErrNotBack) {
		t.Fatalf("want not back: %v", err)
	}
	powerCycle(s.node)
	if s.node.profile != testToplevel || s.node.running != testPrevious {
		t.Fatalf("profile %s running %s: want the profile on the system that never came back and the node on its previous one", s.node.profile, s.node.running)
	}
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("second reboot: %v", err)
	}
	if res.Reboot.DefaultSystem != testPrevious {
		t.Fatalf("default kept for the boot = %s, want the pinned previous system %s", res.Reboot.DefaultSystem, testPrevious)
	}
}

// A node that never comes back from its one-shot boot: the error says so and how to
// get the previous system back; its next power cycle boots the previous system.
func TestRebootNeverBackBootsThePreviousSystemAtTheNextPowerCycle(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.oneShot = true
	s.node.boots.never = true
	s.opts.Activation = ActivationReboot
	_, err := s.deploy()
	if !errors.Is(err, ErrNotBack) || !strings.Contains(err.Error(), "booted once (one-shot boot entry): power the node off and on, and it boots its previous system") {
		t.Fatalf("error = %v", err)
	}
	powerCycle(s.node)
	if s.node.boots.booted != testPrevious || s.node.running != testPrevious {
		t.Fatalf("after a power cycle the node boots %s, want its previous system %s", s.node.boots.booted, testPrevious)
	}
}

// A boot loader without one-shot entries: the reboot goes on with the new system as
// the default, and the verdict says so and why.
func TestRebootWithoutOneShotSaysSo(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.opts.Activation = ActivationReboot
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	want := "no one-shot boot entry (systemd-boot is not installed): the new system was made the default entry before the reboot"
	if !strings.Contains(res.Verdict.Activation, want) || res.Reboot.NoOneShot != "systemd-boot is not installed" {
		t.Fatalf("verdict activation = %q, reboot %+v; want %q", res.Verdict.Activation, res.Reboot, want)
	}
}

// A reboot into the system that is the default already (activation boot set it): no
// one-shot, nothing to fall back to, and the verdict says so.
func TestRebootIntoTheDefaultSystemNeedsNoOneShot(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.oneShot = true
	s.opts.Activation = ActivationBoot
	if _, err := s.deploy(); err != nil {
		t.Fatalf("boot: %v", err)
	}
	s.opts.Activation = ActivationReboot
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("reboot: %v", err)
	}
	if res.Reboot.OneShotEntry != "" || !strings.Contains(res.Verdict.Activation, "the new system was already the default boot entry") {
		t.Fatalf("reboot %+v, verdict activation %q", res.Reboot, res.Verdict.Activation)
	}
}

// A new system that answers once from its boot, then powers the node off (the lab's
// boot-bricks does this): the run does not stop on the lost connection as if the node
// were fine, it waits node_wait and reports the node not back, with what it saw.
func TestRebootIntoABootThatDoesNotStayUpIsNotBack(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.oneShot = true
	s.node.boots.diesOnceUp = true
	s.opts.Activation = ActivationReboot
	_, err := s.deploy()
	if !errors.Is(err, ErrNotBack) || !strings.Contains(err.Error(), "last seen: ") {
		t.Fatalf("want not back with the last thing seen: %v", err)
	}
}
