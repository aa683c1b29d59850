package deploybody

import "fmt"

// The switch phases: switch, read its result, detect a switch that did not take.

func (r *run) switchSystem() (string, error) {
	if err := r.confirmLock(); err != nil {
		return "", err
	}
	r.armRevert()
	r.switchStarted = true
	sr, err := r.t.Switch(r.ctx, r.toplevel, "switch", r.o.Timings.SwitchTimeout)
	if err != nil {
		// The switch may go on on the node: the armed revert is settled all the same,
		// over a new login once the switch has ended (settleAfterFailure).
		return "", r.settleAfterFailure(fmt.Errorf("switch-to-configuration switch: %w", err),
			"the node may run either system: read the node's journal for switch-to-configuration, then apply again (raise timings.switch_timeout if it was cut short)")
	}
	r.switchResult = sr
	r.res.SwitchExitCode = sr.ExitCode
	r.res.SwitchStderr = sr.Stderr
	r.res.SwitchReconnects = sr.Reconnected
	note := fmt.Sprintf("exit %d", sr.ExitCode)
	if r.armed != nil {
		note += fmt.Sprintf("; revert armed (confirm within %s of the switch's end, on the node's clock)", r.o.Timings.ConfirmTimeout)
	}
	if sr.Reconnected {
		note += "; connection dropped and was re-established, result read after reconnecting"
	}
	return note, nil
}

func (r *run) readSwitchResult() (string, error) {
	sr := r.switchResult
	switch sr.ExitCode {
	case 0:
		return "all units started", nil
	case 4:
		return "some units failed (exit 4); the verdict names them", nil
	case 100:
		r.warn(PhaseReadSwitchResult, "switch-to-configuration says the node needs a reboot to run the new system fully (exit 100)")
		return "reboot needed (exit 100)", nil
	default:
		r.warn(PhaseReadSwitchResult, fmt.Sprintf("switch-to-configuration exited %d: %s", sr.ExitCode, firstLine(sr.Stderr, "no output")))
		return fmt.Sprintf("exit %d", sr.ExitCode), nil
	}
}

// ---- detect unconfirmed ----

func (r *run) detectUnconfirmedSwitch() (string, error) {
	// First a new login, while the armed revert's window runs.
	loginNote, err := r.confirmNewLogin()
	if err != nil {
		return "", err
	}
	// One round trip: the running system, and the failed units the restart phase needs.
	answers, err := r.remoteBatch(cmdReadRunning, cmdListFailed)
	if err != nil {
		return "", withHint(fmt.Errorf("reading /run/current-system after the switch: %w", err),
			"the node may run either system; the boot entry was not finalized")
	}
	running := runningSystem(answers[0])
	r.failedAfterSwitch = &answers[1]
	r.res.RunningSystem = running
	if running == r.toplevel {
		r.res.Confirmed = true
		if loginNote != "" {
			return "node runs the new toplevel; " + loginNote, nil
		}
		return "node runs the new toplevel", nil
	}
	revertTo := running
	if revertTo == "" {
		revertTo = r.res.PreviousSystem
	}
	if revertTo == "" {
		return "", withHint(fmt.Errorf("the switch never activated: the node runs no NixOS system after switching to %s, and there is no previous system to point the boot entry back at", r.toplevel),
			"read switch-to-configuration's output and the node's journal; check the boot entry by hand before a reboot")
	}
	if err := r.t.RevertBoot(r.ctx, revertTo); err != nil {
		return "", withHint(fmt.Errorf("the switch never activated (node runs %s, not %s) and reverting the boot entry to %s failed: %w", describeSystem(running), r.toplevel, revertTo, err),
			"the boot entry may point at the new system: set the system profile back by hand before the node reboots")
	}
	r.res.BootReverted = true
	return "", withHint(fmt.Errorf("the switch never activated: node runs %s, not %s; the boot entry was reverted to %s", describeSystem(running), r.toplevel, revertTo),
		"read switch-to-configuration's output (switch stderr) and the node's journal; the node keeps running its previous system")
}

func describeSystem(s string) string {
	if s == "" {
		return "no NixOS system"
	}
	return s
}
