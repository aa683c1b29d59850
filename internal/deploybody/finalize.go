package deploybody

import (
	"fmt"
	"strings"
)

// The last phases: finalize the boot entry (also when the verdict fails) and conclude.

func (r *run) finalizeBootEntry() (string, error) {
	if err := r.confirmLock(); err != nil {
		return "", err
	}
	// The record first: a run cut off between the two leaves a node whose boot entry
	// does not point at what it runs yet (an unfinished deploy, planned again), never
	// one that boots the new system with no verdict of it on record.
	r.recordVerdict()
	generation, err := r.t.FinalizeBoot(r.ctx, r.toplevel)
	if err != nil {
		err = fmt.Errorf("setting the system profile and boot entry to %s: %w", r.toplevel, err)
		if r.verdictFailed != nil {
			err = fmt.Errorf("%w (the verdict also fails the node: %s)", err, strings.Join(r.res.Verdict.Reasons, "; "))
		}
		return "", withHint(err, "the node runs the new system but may boot the previous one: apply again, or run switch-to-configuration boot on the node")
	}
	r.res.Generation = generation
	return fmt.Sprintf("generation %d", generation), nil
}

func (r *run) conclude() (string, error) {
	if r.verdictFailed != nil {
		return "failed by the verdict", r.verdictFailed
	}
	return "ok", nil
}
