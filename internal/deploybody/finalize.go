package deploybody

import (
	"context"
	"fmt"
	"strings"
)

// The last phases: finalize the boot entry (also when the verdict fails) and conclude.

// finalizeBootEntry writes the node's verdict record of the run (res, as far as the
// verdict) and, for a clean verdict, its last good system, then points the boot entry
// at toplevel, under lock. verdictFailed is the
// verdict's failure, named beside a failure to write the boot entry. It returns the
// system profile's generation.
func (e *runEnv) finalizeBootEntry(ctx context.Context, res Result, toplevel string, lock *nodeLock, verdictFailed error) (int, string, error) {
	revertOneShot := res.Reboot != nil && res.Reboot.OneShotEntry != "" && verdictFailed != nil
	if !revertOneShot {
		// The lock's check, the records and the boot entry in one round trip, where the
		// transport can: the node writes the records first and moves the boot entry only
		// under this run's lock.
		generation, handled, lockErr, bootErr := e.recordAndFinalizeBoot(ctx, res, toplevel, lock)
		if handled {
			if lockErr != nil {
				return 0, "", lockErr
			}
			return e.finalizedBoot(toplevel, generation, bootErr, res, verdictFailed)
		}
	}
	if err := e.confirmAndRecord(ctx, res, toplevel, lock); err != nil {
		return 0, "", err
	}
	if rb := res.Reboot; revertOneShot {
		// Booted once, judged failed: the boot entry goes back to the previous default
		// (the profile too, and the pin is released), as the verdict says. The node
		// runs the new system until its next boot; the next plan sees the node running
		// what it does not boot.
		if err := e.t.RevertBoot(ctx, rb.DefaultSystem, e.o.Timings.SwitchTimeout); err != nil {
			return 0, "", withHint(fmt.Errorf("pointing the boot entry back at the previous system %s: %w (the verdict fails the node: %s)", rb.DefaultSystem, err, strings.Join(res.Verdict.Reasons, "; ")),
				"the previous system stays the boot loader's pinned default (set before the one-shot boot), so the node boots it at its next power cycle; apply again once the node answers")
		}
		e.warn(ctx, PhaseFinalizeBootEntry, fmt.Sprintf("the verdict failed after the reboot: the node runs %s until its next boot, then boots its previous system %s (the boot entry points back at it)", toplevel, rb.DefaultSystem))
		return 0, "boot entry back at the previous system " + rb.DefaultSystem, nil
	}
	generation, err := e.finalizeBoot(ctx, toplevel)
	return e.finalizedBoot(toplevel, generation, err, res, verdictFailed)
}

// finalizedBoot is the phase's outcome once the boot entry was written (generation) or
// failed (err).
func (e *runEnv) finalizedBoot(toplevel string, generation int, err error, res Result, verdictFailed error) (int, string, error) {
	if err != nil {
		err = fmt.Errorf("setting the system profile and boot entry to %s: %w", toplevel, err)
		if verdictFailed != nil {
			err = fmt.Errorf("%w (the verdict also fails the node: %s)", err, strings.Join(res.Verdict.Reasons, "; "))
		}
		return 0, "", withHint(err, "the node runs the new system but may boot the previous one: apply again, or run switch-to-configuration boot on the node")
	}
	return generation, fmt.Sprintf("generation %d", generation), nil
}

// conclude returns the verdict's failure, if any: only now, after the boot entry.
func conclude(verdictFailed error) (string, error) {
	if verdictFailed != nil {
		return "failed by the verdict", verdictFailed
	}
	return "ok", nil
}
