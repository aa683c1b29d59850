package deploybody

import (
	"context"
	"fmt"
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
// under lock: switch, set the boot entry only, or reboot (docs/design.md#activation).
func (e *runEnv) activate(ctx context.Context, toplevel, previous string, lock *nodeLock) (switched, string, error) {
	var out switched
	if err := e.confirmLock(ctx, lock); err != nil {
		return out, "", err
	}
	why := ""
	switch e.o.Activation {
	case ActivationBoot:
		out.started, out.bootOnly = true, true
		sr, _, err := e.setBootEntry(ctx, toplevel)
		out.result = sr
		if err != nil {
			return out, "", err
		}
		return out, "boot entry set; the node runs the new system at its next boot", nil
	case ActivationReboot:
		why = "asked to"
	case ActivationRebootIfNeeded:
		var err error
		if why, err = e.rebootNeeded(ctx, toplevel); err != nil {
			return out, "", withHint(err, "nothing was switched; check the transport, then apply again")
		}
	}
	if why == "" {
		out, note, err := e.switchSystem(ctx, toplevel, previous, lock)
		refused := refusedByPreSwitchCheck(out.result)
		if err != nil {
			return out, note, err
		}
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
				fmt.Errorf("%w: %s; switch-to-configuration refused the switch (%s), so the node keeps running its previous system", ErrNeedsReboot, refused, firstLine(out.result.Stderr, "no output")),
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

// switchSystem switches the node from previous to toplevel, under lock.
func (e *runEnv) switchSystem(ctx context.Context, toplevel, previous string, lock *nodeLock) (switched, string, error) {
	var out switched
	out.armed = e.armRevert(toplevel, previous, lock)
	out.started = true
	sr, err := e.t.Switch(ctx, toplevel, "switch", e.o.Timings.SwitchTimeout)
	if err != nil {
		// The switch may go on on the node: the armed revert is settled all the same,
		// over a new login once the switch has ended (settleAfterFailure).
		out.settled, err = e.settleAfterFailure(ctx, out.armed, fmt.Errorf("switch-to-configuration switch: %w", err),
			"the node may run either system: read the node's journal for switch-to-configuration, then apply again (raise timings.switch_timeout if it was cut short)")
		return out, "", err
	}
	out.result = sr
	note := fmt.Sprintf("exit %d", sr.ExitCode)
	if out.armed != nil {
		note += fmt.Sprintf("; revert armed (confirm within %s of the switch's end, on the node's clock)", e.o.Timings.ConfirmTimeout)
	}
	if sr.Reconnected {
		note += "; connection dropped and was re-established, result read after reconnecting"
	}
	return out, note, nil
}

func (e *runEnv) readSwitchResult(ctx context.Context, sr SwitchResult) (string, error) {
	switch sr.ExitCode {
	case 0:
		return "all units started", nil
	case 4:
		return "some units failed (exit 4); the verdict names them", nil
	case 100:
		e.warn(ctx, PhaseReadSwitchResult, "switch-to-configuration says the node needs a reboot to run the new system fully (exit 100)")
		return "reboot needed (exit 100)", nil
	default:
		e.warn(ctx, PhaseReadSwitchResult, fmt.Sprintf("switch-to-configuration exited %d: %s", sr.ExitCode, firstLine(sr.Stderr, "no output")))
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
	// bootReverted: the boot entry was pointed back at the system the node runs.
	bootReverted bool
	// failedUnits is the failed-unit list read with running, for the restart phase
	// (one round trip less).
	failedUnits *RunResult
}

// detectUnconfirmedSwitch reads what the node runs after the switch. The new login
// that disarms the revert (login) is already out, beside this read: it is waited for
// here only when the read fails or the switch did not take (its answer comes first, as
// when it ran before the read); on the good path the run waits for it after the settle.
func (e *runEnv) detectUnconfirmedSwitch(ctx context.Context, toplevel, previous string, login func() error) (confirmation, string, error) {
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
	revertTo := running
	if revertTo == "" {
		revertTo = previous
	}
	if revertTo == "" {
		return c, "", withHint(fmt.Errorf("the switch never activated: the node runs no NixOS system after switching to %s, and there is no previous system to point the boot entry back at", toplevel),
			"read switch-to-configuration's output and the node's journal; check the boot entry by hand before a reboot")
	}
	if err := e.t.RevertBoot(ctx, revertTo); err != nil {
		return c, "", withHint(fmt.Errorf("the switch never activated (node runs %s, not %s) and reverting the boot entry to %s failed: %w", describeSystem(running), toplevel, revertTo, err),
			"the boot entry may point at the new system: set the system profile back by hand before the node reboots")
	}
	c.bootReverted = true
	return c, "", withHint(fmt.Errorf("the switch never activated: node runs %s, not %s; the boot entry was reverted to %s", describeSystem(running), toplevel, revertTo),
		"read switch-to-configuration's output (switch stderr) and the node's journal; the node keeps running its previous system")
}
