package deploybody

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// The switch phases: switch, read its result, detect a switch that did not take.

// switched is what the switch phase produces.
type switched struct {
	result SwitchResult
	// started is true once the switch was sent to the node (it may have run, whatever
	// came back).
	started bool
	// armed is the node-side revert armed with the switch; settled says what became of
	// it when the switch failed.
	armed   *armedRevert
	settled revertSettled
	// login is the new login that disarms armed, dialled once the switch returned and
	// running beside the phases after it (confirmingLogin).
	login *confirmingLogin
	// reboot is set when the node was rebooted into the new system; bootOnly when the
	// activation only set the boot entry (nothing runs the new system to judge).
	reboot   *Reboot
	bootOnly bool
}

// activate makes the node run (or boot) toplevel the way Options.Activation says,
// under lock: activate it with `switch-to-configuration test`, or reboot into it
// (docs/activation.md#activation). No path here moves the boot loader's default except a
// reboot's (which must boot the new system): the boot entry is written after the
// verdict record, in the finalize-boot-entry phase.
func (e *runEnv) activate(ctx context.Context, toplevel, previous string, lock *nodeLock) (switched, string, error) {
	var out switched
	if err := e.confirmLock(ctx, lock); err != nil {
		return out, "", err
	}
	why := ""
	switch e.o.Activation {
	case ActivationBoot:
		out.bootOnly = true
		return out, "nothing activated: the boot entry is written after the verdict record (finalize boot entry), and the node runs the new system at its next boot", nil
	case ActivationReboot:
		why = "asked to"
	case ActivationRebootIfNeeded:
		var err error
		if why, err = e.rebootNeeded(ctx, toplevel); err != nil {
			return out, "", withHint(err, "nothing was switched; check the transport, then apply again")
		}
	}
	if why == "" {
		out, note, err := e.switchWaitingForLock(ctx, toplevel, previous, lock)
		if err != nil {
			return out, note, err
		}
		if reason := neverActivated(switchAction, out.result); reason != "" {
			// switch-to-configuration stopped before it changed anything, for a reason
			// its output names: say it, and no hint about boot entries (none moved).
			out.settled, err = e.settleAfterFailure(ctx, out.armed,
				fmt.Errorf("switch-to-configuration %s exited %d: %s", switchAction, out.result.ExitCode, reason),
				"the node keeps running its previous system and its boot entry is untouched; fix what the message names, then apply again")
			return out, note, err
		}
		refused := needsRebootToActivate(out.result)
		if refused == "" {
			// The switch has ended on the node: dial the confirming login now, beside
			// the phases that follow (confirmingLogin says why not earlier).
			out.login = e.dialConfirmingLogin(ctx, out.armed)
			return out, note, nil
		}
		if e.o.Activation != ActivationRebootIfNeeded {
			// Not a closure fault: the new system wants a boot. The revert armed with the
			// refused switch is settled all the same.
			out.settled, err = e.settleAfterFailure(ctx, out.armed,
				fmt.Errorf("%w: %s; switch-to-configuration did not activate it (%s), so the node keeps running its previous system and its boot entry is untouched", ErrNeedsReboot, refused, judge.FirstLine(out.result.Stderr, "no output")),
				`set activation = "reboot-if-needed" to reboot the node into the new system (or "boot" to take it at the next boot)`)
			return out, note, err
		}
		// The refused switch changed nothing; the revert armed with it is disarmed by a
		// new login before the reboot (whose boot would drop its timer anyway). A revert
		// that fired, or that no login could settle, stops the run before the reboot.
		loginNote, settled, err := e.confirmNewLogin(ctx, out.armed)
		out.settled = settled
		if err != nil {
			return out, note, err
		}
		out.armed = nil
		if loginNote != "" {
			e.log(ctx, LevelInfo, PhaseSwitch, "the refused switch's revert: "+loginNote, nil)
		}
		why = refused
	}
	out.started = true
	sr, rb, err := e.rebootInto(ctx, toplevel, why, lock)
	out.result, out.reboot = sr, &rb
	if err != nil {
		return out, "", err
	}
	return out, activationNote(e.o.Activation, &rb), nil
}

// switchAction is how the deploy activates a new system: `test` activates it without
// touching the boot loader (switch-to-configuration-ng installs the boot loader for
// `switch` and `boot` only, and with GRUB or extlinux its argument becomes the default
// entry at once). The boot entry follows the verdict record (finalizeBootEntry).
const switchAction = "test"

// needsRebootToActivate says why a switch did not activate the new system and a reboot
// would ("" when it activated): a pre-switch check refused it (activation.go), or
// switch-to-configuration exited 100 because the new system's init-interface-version
// differs from the running one's (nothing was activated: `test` installs no boot
// loader either).
func needsRebootToActivate(sr SwitchResult) string {
	if refused := refusedByPreSwitchCheck(sr); refused != "" {
		return refused
	}
	if sr.ExitCode == switchExitNeedsReboot {
		return "init-interface-version changed (switch-to-configuration exit 100)"
	}
	return ""
}

// switchWaitingForLock is switchSystem, waiting within timings.lock_wait while another
// switch-to-configuration holds its lock (exit 11: it changed nothing). The revert armed
// with a turned-away switch is disarmed over a new login before the wait, and the next
// attempt arms its own.
func (e *runEnv) switchWaitingForLock(ctx context.Context, toplevel, previous string, lock *nodeLock) (switched, string, error) {
	var since time.Time
	var holder switchLockHolder
	for attempt := 1; ; attempt++ {
		out, note, err := e.switchSystem(ctx, toplevel, previous, lock)
		if err != nil || !switchLocked(out.result) {
			if attempt > 1 && err == nil {
				waited := fmt.Sprintf("another switch-to-configuration (%s) held %s; the deploy waited %s for it to end and then switched", holder, SwitchLockFile, e.o.Clock.Now().Sub(since).Round(time.Second))
				e.warn(ctx, PhaseSwitch, waited)
				note = waited + "; " + note
			}
			return out, note, err
		}
		_, settled, err := e.confirmNewLogin(ctx, out.armed)
		out.settled = settled
		if err != nil {
			return out, note, err
		}
		out.armed = nil
		if since.IsZero() {
			since = e.o.Clock.Now()
		}
		var free bool
		var last switchLockHolder
		last, free, err = e.awaitSwitchLock(ctx, since.Add(e.o.Timings.LockWait))
		if !last.free {
			holder = last
		}
		if err != nil {
			return out, note, withHint(fmt.Errorf("switch-to-configuration %s was turned away by another switch's lock (%s), and waiting for it failed: %w", switchAction, SwitchLockFile, err),
				"nothing was changed on the node; apply again")
		}
		if !free {
			return out, note, switchLockError(switchAction, holder, e.o.Timings.LockWait)
		}
		e.log(ctx, LevelInfo, PhaseSwitch, "another switch held switch-to-configuration's lock; it ended, switching again", map[string]any{"holder": holder.String(), "attempt": attempt + 1})
		if err := e.confirmLock(ctx, lock); err != nil {
			return out, note, err
		}
	}
}

// switchSystem activates toplevel on the node (switchAction), from previous, under lock.
func (e *runEnv) switchSystem(ctx context.Context, toplevel, previous string, lock *nodeLock) (switched, string, error) {
	var out switched
	out.armed = e.armRevert(toplevel, previous, lock)
	out.started = true
	sr, err := e.t.Switch(ctx, toplevel, switchAction, e.o.Timings.SwitchTimeout)
	if err != nil {
		// The switch may go on on the node: the armed revert is settled all the same,
		// over a new login once the switch has ended (settleAfterFailure).
		out.settled, err = e.settleAfterFailure(ctx, out.armed, fmt.Errorf("switch-to-configuration %s: %w", switchAction, err),
			"the node may run either system (its boot entry is untouched): read the node's journal for switch-to-configuration, then apply again (raise timings.switch_timeout if it was cut short)")
		return out, "", err
	}
	out.result = sr
	note := fmt.Sprintf("%s: exit %d", switchAction, sr.ExitCode)
	if out.armed != nil {
		note += fmt.Sprintf("; revert armed (confirm within %s of the switch's end, on the node's clock)", e.o.Timings.ConfirmTimeout)
	}
	if sr.Reconnected {
		note += "; connection dropped and was re-established, result read after reconnecting"
	}
	return out, note, nil
}

func (e *runEnv) readSwitchResult(ctx context.Context, sr SwitchResult) (string, error) {
	switch {
	case sr.ExitCode == 0:
		return "all units started", nil
	case sr.ExitCode == switchExitUnitsFailed:
		return "some units failed (exit 4); the verdict names them", nil
	case activationFailed(sr):
		lines := activationErrorLines(sr)
		e.warn(ctx, PhaseReadSwitchResult, "switch-to-configuration: the activation script failed (exit 2): "+strings.Join(lines, "; "))
		return "the activation script failed (exit 2); the verdict says so", nil
	default:
		e.warn(ctx, PhaseReadSwitchResult, fmt.Sprintf("switch-to-configuration exited %d: %s", sr.ExitCode, switchDiagnosis(switchAction, sr)))
		return fmt.Sprintf("exit %d", sr.ExitCode), nil
	}
}

// ---- detect unconfirmed ----

// confirmation is what the detect-unconfirmed-switch phase learned.
type confirmation struct {
	// read is true once running was read after the switch.
	read    bool
	running string
	// confirmed: the node runs the new toplevel.
	confirmed bool
	// failedUnits is the failed-unit list read with running, for the restart phase
	// (one round trip less).
	failedUnits *RunResult
}

// detectUnconfirmedSwitch reads what the node runs after the switch. The new login
// that disarms the revert (login) is already out, beside this read: it is waited for
// here only when the read fails or the switch did not take (its answer comes first, as
// when it ran before the read); on the good path the run waits for it after the settle.
func (e *runEnv) detectUnconfirmedSwitch(ctx context.Context, toplevel string, sr SwitchResult, login func() error) (confirmation, string, error) {
	var c confirmation
	// One round trip: the running system, and the failed units the restart phase needs.
	answers, err := e.remoteBatch(ctx, toplevel, cmdReadRunning, cmdListFailed)
	if err != nil {
		if loginErr := login(); loginErr != nil {
			return c, "", loginErr
		}
		return c, "", withHint(fmt.Errorf("reading /run/current-system after the switch: %w", err),
			"the node may run either system; the boot entry was not finalized")
	}
	running := runningSystem(answers[0])
	c.read, c.running, c.failedUnits = true, running, &answers[1]
	if running == toplevel {
		c.confirmed = true
		return c, "node runs the new toplevel", nil
	}
	if err := login(); err != nil {
		return confirmation{}, "", err // nothing read after the switch counts
	}
	// `test` never touches the boot loader or the system profile, so there is nothing
	// to point back: the node boots what it booted before this run.
	return c, "", withHint(fmt.Errorf("the switch never activated: node runs %s, not %s (switch-to-configuration %s exited %d: %s); its boot entry is untouched",
		describeSystem(running), toplevel, switchAction, sr.ExitCode, switchDiagnosis(switchAction, sr)),
		"read switch-to-configuration's output (switch stderr) and the node's journal; the node keeps running its previous system and boots it")
}
