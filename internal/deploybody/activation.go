package deploybody

// Activation: how the deploy makes the node run the new system (docs/activation.md#activation).
// `switch` switches the running node (today's way); `boot` only sets the boot entry;
// `reboot-if-needed` reboots when a switch cannot apply the change (NixOS' rule,
// reboot_rule.go, or a switch a pre-switch check refuses);
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

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
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
	// Why: "kernel, initrd changed", "reboot-triggers changed: kernel-params : a -> b",
	// "switch inhibitors changed: dbus : dbus -> broker", "asked to" (reboot_rule.go).
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

// ErrNeedsReboot is a switch switch-to-configuration refused because the new system
// needs a boot (a pre-switch check, a changed switch inhibitor): not a closure fault,
// and the node changed nothing, so nothing of the run is left unfinished.
var ErrNeedsReboot = errors.New("needs a reboot")

// preSwitchCheckFailed is switch-to-configuration's line for a pre-switch check that
// refused the switch (nixos/modules/system/activation/pre-switch-check.nix), and
// preSwitchChecksFailed its own line after it (switch-to-configuration-ng's main.rs).
var (
	preSwitchCheckFailed  = regexp.MustCompile(`Pre-switch check '([^']+)' failed`)
	preSwitchChecksFailed = "Pre-switch checks failed"
)

// inhibitorRefusalHeader is the switch-inhibitors check's line before its list of
// changes, one `<name> : <old> -> <new>` line each
// (nixos/modules/system/activation/switchable-system.nix; its first version wrote it
// in lower case).
var inhibitorRefusalHeader = regexp.MustCompile(`(?i)there are changes to critical components of the system:`)

// componentChangeLine is one line of that list.
var componentChangeLine = regexp.MustCompile(`^(\S.*?) : (.*?) -> (.*)$`)

// refusedByPreSwitchCheck says why a switch was refused by a pre-switch check ("" when
// it was not): for the switch inhibitors, each changed component, old -> new, in the
// rule's words (inhibitorsWhy); else the check that failed.
func refusedByPreSwitchCheck(sr SwitchResult) string {
	if sr.ExitCode == 0 {
		return ""
	}
	out := sr.Stdout + "\n" + sr.Stderr
	if changes := refusedComponents(out); len(changes) > 0 {
		return inhibitorsWhy(changes)
	}
	m := preSwitchCheckFailed.FindStringSubmatch(out)
	switch {
	case m != nil && m[1] == "switchInhibitors":
		return "switch inhibitors changed"
	case m != nil:
		return "pre-switch check " + m[1] + " failed"
	case strings.Contains(out, preSwitchChecksFailed):
		return "pre-switch checks failed"
	}
	return ""
}

// refusedComponents reads the changes the switch-inhibitors check listed in out: the
// lines after its header, blank lines before them skipped, up to the first line that
// is not a change.
func refusedComponents(out string) []ComponentChange {
	at := inhibitorRefusalHeader.FindStringIndex(out)
	if at == nil {
		return nil
	}
	var changes []ComponentChange
	for _, line := range strings.Split(out[at[1]:], "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			if len(changes) > 0 {
				break
			}
			continue
		}
		m := componentChangeLine.FindStringSubmatch(line)
		if m == nil {
			break
		}
		changes = append(changes, ComponentChange{Name: m[1], Old: m[2], New: m[3]})
	}
	return changes
}

// rebootNeedScript prints the node's RebootFacts, then those of the new toplevel $1
// (with its own switch-inhibitors), a line each: the rule is applied by the deployer
// (rebootWhy), the same as the plan's.
var rebootNeedScript = rebootFactsFunctions + `
if [ -e /run/booted-system ]; then facts /run/booted-system /run/current-system; else echo none; fi
facts "$1" "$1"`

// rebootNeeded asks the node whether toplevel needs a reboot; why is "" when not.
func (e *runEnv) rebootNeeded(ctx context.Context, toplevel string) (why string, err error) {
	res, err := e.t.Run(ctx, []string{"sh", "-c", rebootNeedScript, "sh", toplevel}, RunOptions{Path: records.ToolPath})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exited %d: %s", res.ExitCode, judge.FirstLine(string(res.Stderr), "no output"))
	}
	if err != nil {
		return "", fmt.Errorf("comparing /run/booted-system with %s: %w", toplevel, err)
	}
	lines := strings.SplitN(string(res.Stdout), "\n", 3)
	if len(lines) < 2 {
		return "", fmt.Errorf("comparing /run/booted-system with %s: the node's answer was not understood: %q", toplevel, res.Stdout)
	}
	node, okNode := ParseRebootFacts(lines[0])
	planned, okPlanned := ParseRebootFacts(lines[1])
	if !okNode || !okPlanned {
		return "", fmt.Errorf("comparing /run/booted-system with %s: the node's answer was not understood: %q", toplevel, res.Stdout)
	}
	return rebootWhy(node, planned), nil
}

// systemdReexecuted is switch-to-configuration's line when the new system's systemd
// (or its system.conf) differs from PID 1's: it re-executes PID 1 instead of asking
// for a reboot (switch-to-configuration-ng's main.rs).
const systemdReexecuted = "restarting systemd..."

// reexecutedNote is what the verdict adds to "switched" after such a switch.
const reexecutedNote = "systemd re-executed by the switch (a new systemd needs no reboot)"

// switchedActivation is the verdict's sentence of how the node came to run the judged
// system (activationNote), with the re-execution of systemd when a switch did it.
func switchedActivation(a Activation, rb *Reboot, sr SwitchResult) string {
	note := activationNote(a, rb)
	if rb == nil && a != ActivationBoot && strings.Contains(sr.Stderr+"\n"+sr.Stdout, systemdReexecuted) {
		note += "; " + reexecutedNote
	}
	return note
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
		return sr, 0, withHint(fmt.Errorf("switch-to-configuration boot exited %d: %s", sr.ExitCode, judge.FirstLine(sr.Stderr, "no output")),
			"the node runs its previous system and its boot entry may not be set; read the output, then apply again")
	}
	gen, err := e.finalizeBoot(ctx, toplevel)
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
	marked, err := e.t.Run(ctx, []string{"sh", "-c", rebootMarkScript, "sh", token}, RunOptions{Path: records.ToolPath, Privileged: true})
	if err == nil && (marked.ExitCode != 0 || strings.TrimSpace(string(marked.Stdout)) != token) {
		err = fmt.Errorf("exit %d: %s", marked.ExitCode, judge.FirstLine(string(marked.Stderr), "no output"))
	}
	if err != nil {
		return sr, rb, withHint(fmt.Errorf("leaving the reboot marker %s before the reboot: %w (the reboot was not asked for)", rebootMarker, err),
			"the boot entry points at the new system, the node runs its previous one and did not reboot: apply again")
	}
	e.log(ctx, LevelInfo, PhaseSwitch, "rebooting the node", map[string]any{"why": why})
	start := e.o.Clock.Now()
	res, err := e.t.Run(ctx, []string{"sh", "-c", rebootScript, "sh", token}, RunOptions{Path: records.ToolPath, Privileged: true})
	if err == nil && res.ExitCode != 0 {
		return sr, rb, withHint(fmt.Errorf("systemctl reboot exited %d: %s", res.ExitCode, judge.FirstLine(string(res.Stderr), "no output")),
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
	res, err := e.t.Run(ctx, []string{"sh", "-c", bootAnswerScript, "sh", token}, RunOptions{Path: records.ToolPath})
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
	out, err := lockOp(ctx, e.t, "acquire", lock.holder.Token, lock.holder.Lines(), strconv.Itoa(int(lockStale/time.Second)), "")
	if err != nil {
		return withHint(fmt.Errorf("taking the node lock again after the reboot: %w", err), "the node rebooted into the new system; apply again to judge it")
	}
	if strings.HasPrefix(out[0], "held ") {
		lock.recordLost(records.ParseLockHolder(out[1:], 0), true)
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
	return judge.ActivationSwitched
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
func bootOnlyVerdict(strict bool) *judge.Verdict {
	return &judge.Verdict{Strict: strict, SystemState: "not judged", OK: true, Activation: activationNote(ActivationBoot, nil)}
}
