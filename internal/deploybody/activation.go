package deploybody

// Activation: how the deploy makes the node run the new system (docs/design.md#activation).
// `switch` switches the running node (today's way); `boot` only sets the boot entry;
// `reboot-if-needed` reboots when a switch cannot apply the change (a new kernel,
// initrd, kernel modules or systemd, or a switch a pre-switch check refuses);
// `reboot` always reboots. A reboot is part of the deploy, under the node lock: set
// the boot entry, reboot, wait for the node over a new connection within node_wait,
// check it booted the new toplevel, then judge the booted system like a switched one.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Activation is how a deploy makes the node run its new system.
type Activation string

// The activations (Options.Activation; "" is ActivationSwitch).
const (
	ActivationSwitch         Activation = "switch"
	ActivationBoot           Activation = "boot"
	ActivationRebootIfNeeded Activation = "reboot-if-needed"
	ActivationReboot         Activation = "reboot"
)

// Activations are the accepted activations, in the order the docs list them.
var Activations = []Activation{ActivationSwitch, ActivationBoot, ActivationRebootIfNeeded, ActivationReboot}

// ValidActivation reports whether s names an activation ("" is the default, switch).
func ValidActivation(s string) bool {
	if s == "" {
		return true
	}
	for _, a := range Activations {
		if string(a) == s {
			return true
		}
	}
	return false
}

// Reboot is what the verdict says of a deploy that rebooted the node.
type Reboot struct {
	// Why: "kernel changed", "systemd changed", "inhibitor <name> changed", "asked to".
	Why string
	// BootDuration is from the reboot's command to the node's first answer after it.
	BootDuration time.Duration
	// OneShotEntry is the boot entry the node booted once (the new system's), and
	// DefaultEntry the one that stayed the default meanwhile (the previous system's);
	// both "" when the boot loader could not boot once, and NoOneShot says why
	// (boot_once.go).
	OneShotEntry, DefaultEntry, NoOneShot string
	// DefaultSystem is the system DefaultEntry boots.
	DefaultSystem string
}

// inhibitorRefusal is nixpkgs' message of a switch its pre-switch checks refuse.
var inhibitorRefusal = regexp.MustCompile(`Pre-switch check '([^']+)' failed`)

// inhibitorLine names the changed inhibitor where the output says it (the lab's
// stand-in and nixpkgs' check print "switch inhibitor <name> changed").
var inhibitorLine = regexp.MustCompile(`(?i)(?:switch )?inhibitor[s]? ['"]?([A-Za-z0-9_.@:-]+)['"]? (?:changed|differs)`)

// refusedByPreSwitchCheck says why a switch was refused by a pre-switch check ("" when
// it was not): "inhibitor <name> changed" when the output names the inhibitor, else
// "pre-switch check <check> failed".
func refusedByPreSwitchCheck(sr SwitchResult) string {
	out := sr.Stderr + "\n" + sr.Stdout
	m := inhibitorRefusal.FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	if n := inhibitorLine.FindStringSubmatch(out); n != nil {
		return "inhibitor " + n[1] + " changed"
	}
	if m[1] == "switchInhibitors" {
		return "a switch inhibitor changed"
	}
	return "pre-switch check " + m[1] + " failed"
}

// rebootNeedScript prints why the node must reboot to run $1 ("" when a switch
// will do): NixOS' own rule (switch-to-configuration compares the booted system's
// kernel, initrd and kernel modules with the new system's), and a changed systemd.
// Each is compared by what its link resolves to (readlink -e: "" when absent, so a
// system without one compares equal to another without one).
var rebootNeedScript = `b=/run/booted-system; n=$1
[ -e "$b" ] || { echo "no-booted-system"; exit 0; }
for x in ` + strings.Join(rebootParts, " ") + `; do
  if [ "$(readlink -e "$b/$x" 2>/dev/null)" != "$(readlink -e "$n/$x" 2>/dev/null)" ]; then echo "$x"; fi
done; true`

// rebootNeeded asks the node whether toplevel needs a reboot; why is "" when not.
func (e *runEnv) rebootNeeded(ctx context.Context, toplevel string) (why string, err error) {
	res, err := e.t.Run(ctx, []string{"sh", "-c", rebootNeedScript, "sh", toplevel}, RunOptions{Path: lockPath})
	if err != nil {
		return "", fmt.Errorf("comparing /run/booted-system with %s: %w", toplevel, err)
	}
	var changed []string
	for _, l := range strings.Fields(string(res.Stdout)) {
		if l == "no-booted-system" {
			return "", nil // nothing to compare with: a switch decides
		}
		changed = append(changed, l)
	}
	return changedWhy(changed), nil
}

// rebootMarker is a file in /run (emptied at every boot): while it is there, the node
// has not rebooted yet. A container shares its host's kernel boot id, so the boot id
// cannot tell.
const rebootMarker = "/run/fediversity/reboot-pending"

// rebootMarkScript leaves the marker and reads it back: the run asks for the reboot
// only once the node said the marker is there. A marker never written would look like
// one a reboot emptied, and a reboot that never happened would be judged as one.
const rebootMarkScript = `mkdir -p /run/fediversity && echo "$1" >` + rebootMarker + ` && cat ` + rebootMarker

// rebootScript asks systemd to reboot without waiting for it, while the marker is this
// run's.
const rebootScript = `[ "$(cat ` + rebootMarker + ` 2>/dev/null)" = "$1" ] && systemctl reboot --no-block`

// bootAnswerScript prints "pending" while the marker of this reboot is still there,
// "booting <state>" while systemd still starts the boot's units (the verdict judges a
// booted system, not its start jobs), then "booted <booted-system>".
const bootAnswerScript = `if [ "$(cat ` + rebootMarker + ` 2>/dev/null)" = "$1" ]; then echo pending; exit 0; fi
s=$(systemctl is-system-running 2>/dev/null)
case "$s" in initializing|starting) echo "booting $s" ;; *) echo "booted $(readlink -e /run/booted-system)" ;; esac`

// setBootEntry makes the node boot toplevel at its next boot: switch-to-configuration
// boot through the transport's switch (which takes the Incus snapshot guard's rollback
// point first), then the system profile (FinalizeBoot), so both agree.
func (e *runEnv) setBootEntry(ctx context.Context, toplevel string) (SwitchResult, int, error) {
	sr, err := e.t.Switch(ctx, toplevel, string(ActivationBoot), e.o.Timings.SwitchTimeout)
	if err != nil {
		return sr, 0, withHint(fmt.Errorf("switch-to-configuration boot: %w", err), "the node runs its previous system; read its journal, then apply again")
	}
	if sr.ExitCode != 0 {
		return sr, 0, withHint(fmt.Errorf("switch-to-configuration boot exited %d: %s", sr.ExitCode, firstLine(sr.Stderr, "no output")),
			"the node runs its previous system and its boot entry may not be set; read the output, then apply again")
	}
	gen, err := e.t.FinalizeBoot(ctx, toplevel)
	if err != nil {
		return sr, 0, withHint(fmt.Errorf("setting the system profile to %s: %w", toplevel, err), "the node runs its previous system; apply again")
	}
	return sr, gen, nil
}

// rebootInto sets the boot entry to toplevel, reboots the node and waits (node_wait)
// until it answers from its new boot, then takes the node lock again (the reboot
// emptied /run, and the lock with it) and checks that it booted toplevel.
func (e *runEnv) rebootInto(ctx context.Context, toplevel, why string, lock *nodeLock) (SwitchResult, Reboot, error) {
	rb := Reboot{Why: why}
	// The boot loader's default before this run: it stays the default for the boot.
	previous, err := e.readPreviousDefault(ctx)
	if err != nil {
		return SwitchResult{}, rb, withHint(err, "the node runs its previous system and has not rebooted: apply again")
	}
	sr, _, err := e.setBootEntry(ctx, toplevel)
	if err != nil {
		return sr, rb, err
	}
	if err := e.confirmLock(ctx, lock); err != nil {
		return sr, rb, err
	}
	if err := e.bootOnce(ctx, toplevel, previous, &rb); err != nil {
		return sr, rb, err
	}
	token := newToken()
	marked, err := e.t.Run(ctx, []string{"sh", "-c", rebootMarkScript, "sh", token}, RunOptions{Path: lockPath, Privileged: true})
	if err == nil && (marked.ExitCode != 0 || strings.TrimSpace(string(marked.Stdout)) != token) {
		err = fmt.Errorf("exit %d: %s", marked.ExitCode, firstLine(string(marked.Stderr), "no output"))
	}
	if err != nil {
		return sr, rb, withHint(fmt.Errorf("leaving the reboot marker %s before the reboot: %w (the reboot was not asked for)", rebootMarker, err),
			"the boot entry points at the new system, the node runs its previous one and did not reboot: apply again")
	}
	e.log(ctx, LevelInfo, PhaseSwitch, "rebooting the node", map[string]any{"why": why})
	start := e.o.Clock.Now()
	res, err := e.t.Run(ctx, []string{"sh", "-c", rebootScript, "sh", token}, RunOptions{Path: lockPath, Privileged: true})
	if err == nil && res.ExitCode != 0 {
		return sr, rb, withHint(fmt.Errorf("systemctl reboot exited %d: %s", res.ExitCode, firstLine(string(res.Stderr), "no output")),
			"the boot entry points at the new system, the node runs its previous one: reboot it by hand, or apply again")
	}
	// A transport error here may be the reboot cutting the connection: the wait tells.
	deadline := start.Add(e.o.Timings.NodeWait)
	lastSeen := "no answer yet"
	for attempt := 1; attempt <= maxSamples; attempt++ {
		if err := e.sleep(ctx, e.o.Timings.SampleInterval); err != nil {
			return sr, rb, err
		}
		booted, seen := e.bootAnswer(ctx, token)
		if booted != "" {
			rb.BootDuration = e.o.Clock.Now().Sub(start)
			if err := e.relock(ctx, lock); err != nil {
				if lock.lostError(e.o.Node) != nil || ctx.Err() != nil {
					return sr, rb, err
				}
				// The node answered from its new boot, then could not be reached: a boot
				// that does not stay up is waited out like one that never came.
				rb.BootDuration = 0
				lastSeen = "the node answered from its new boot, then: " + err.Error()
				if !e.o.Clock.Now().Before(deadline) {
					break
				}
				continue
			}
			if booted != toplevel {
				return sr, rb, withHint(fmt.Errorf("the node rebooted into %s, not the new toplevel %s", describeSystem(booted), toplevel),
					"the boot loader did not take the new boot entry: check the node's boot loader and system profile, then apply again")
			}
			return sr, rb, nil
		}
		lastSeen = seen
		if !e.o.Clock.Now().Before(deadline) {
			break
		}
	}
	if rb.OneShotEntry != "" {
		return sr, rb, withHint(notBack(e.o.Timings.NodeWait, lastSeen),
			"the new system was booted once (one-shot boot entry): power the node off and on, and it boots its previous system, its default entry "+rb.DefaultEntry+
				"; an Incus node's rollback point is restored. Raise timings.node_wait if it boots slowly")
	}
	return sr, rb, NotBackError(e.o.Timings.NodeWait, lastSeen)
}

// ErrNotBack is a node that did not come back from its reboot within node_wait. The
// error wraps ErrUnreachable too; a staged rollout counts the node against its budget
// and its wave names it (fleet).
var ErrNotBack = errors.New("the node did not come back")

// NotBackError is the run's error for a node that did not come back from its reboot
// within wait; lastSeen is the last thing seen of it.
func NotBackError(wait time.Duration, lastSeen string) error {
	return withHint(notBack(wait, lastSeen),
		"the node boots the new system (its boot loader has no one-shot entry): reach its console; an Incus node's rollback point is restored. Raise timings.node_wait if it boots slowly")
}

func notBack(wait time.Duration, lastSeen string) error {
	return fmt.Errorf("%w after a reboot: %w within node_wait (%s); last seen: %s", ErrUnreachable, ErrNotBack, wait, lastSeen)
}

// bootAnswer asks the node, over a connection the transport makes anew after the
// reboot (with the pinned host key), whether it has booted: booted is its
// /run/booted-system then. seen is the last thing seen while it has not.
func (e *runEnv) bootAnswer(ctx context.Context, token string) (booted, seen string) {
	if err := e.t.Reach(ctx); err != nil {
		if errors.Is(err, ErrRefused) {
			return "", "refused: " + err.Error()
		}
		return "", err.Error()
	}
	res, err := e.t.Run(ctx, []string{"sh", "-c", bootAnswerScript, "sh", token}, RunOptions{Path: lockPath})
	if err != nil {
		return "", err.Error()
	}
	f := strings.Fields(string(res.Stdout))
	if len(f) > 1 && f[0] == "booting" {
		return "", "the node is booting (systemd is " + f[1] + ")"
	}
	if len(f) > 0 && f[0] == "booted" {
		if len(f) == 1 {
			return "", "the node booted, without a /run/booted-system"
		}
		return f[1], ""
	}
	return "", "the node answers from its previous boot (the reboot has not begun)"
}

// relock takes the node lock again with this run's token after a reboot emptied /run.
// The lock was gone for the boot; a run that took the node meanwhile holds it now, and
// this run stops (lost lock) before it judges or writes anything.
func (e *runEnv) relock(ctx context.Context, lock *nodeLock) error {
	if lock == nil {
		return nil
	}
	out, err := lockOp(ctx, e.t, "acquire", lock.holder.Token, lock.holder.lines(), strconv.Itoa(int(lockStale/time.Second)), "")
	if err != nil {
		return withHint(fmt.Errorf("taking the node lock again after the reboot: %w", err), "the node rebooted into the new system; apply again to judge it")
	}
	if strings.HasPrefix(out[0], "held ") {
		lock.recordLost(parseLockHolder(out[1:], 0), true)
		return lock.lostError(e.o.Node)
	}
	lock.relocked()
	return nil
}

// activationNote is the verdict's sentence of how the node came to run the system.
func activationNote(a Activation, rb *Reboot) string {
	switch {
	case rb != nil:
		return fmt.Sprintf("rebooted (%s); boot took %s", rb.Why, rb.BootDuration.Round(100*time.Millisecond))
	case a == ActivationBoot:
		return "boot entry set only: the node runs the new system at its next boot; nothing that needs it running was judged"
	}
	return "switched"
}

// verdictActivation is the verdict's sentence of how the node came to run the system,
// with what became of its boot entry after a reboot (ok: the verdict's).
func verdictActivation(a Activation, rb *Reboot, ok bool) string {
	note := activationNote(a, rb)
	if s := oneShotNote(rb, ok); s != "" {
		note += "; " + s
	}
	return note
}

// bootOnlyVerdict is the verdict of a boot-only activation: it judged nothing that
// needs the new system running, and says so.
func bootOnlyVerdict(strict bool) *Verdict {
	return &Verdict{Strict: strict, SystemState: "not judged", OK: true, Activation: activationNote(ActivationBoot, nil)}
}
