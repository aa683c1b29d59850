package deploybody

import (
	"fmt"
	"strings"
)

// The phases that collect the units the closure owns and restart the failed ones it wants.

func (r *run) collectOwnedUnits() (string, error) {
	c, err := readClosureUnits(r.tree, r.toplevel)
	if err != nil {
		return "", withHint(err, "the toplevel's files must be readable on the deployer (see local_root)")
	}
	r.closure = c
	for _, name := range c.rejected {
		r.warn(PhaseCollectOwnedUnits, fmt.Sprintf("closure entry %q is not a valid unit name; ignored", name))
	}
	return fmt.Sprintf("%d owned, %d wanted", len(c.owned), len(c.wanted)), nil
}

// ---- restart ----

func (r *run) restartFailedUnits() (string, error) {
	var (
		failed []string
		reason string
		err    error
	)
	if r.failedAfterSwitch != nil { // read with the running system, just before
		failed, reason = r.parseFailed(*r.failedAfterSwitch)
		r.failedAfterSwitch = nil
	} else {
		failed, reason, err = r.readFailedUnits()
	}
	if err != nil {
		return "", withHint(fmt.Errorf("reading failed units: %w", err), "")
	}
	if reason != "" {
		r.warn(PhaseRestartFailedUnits, "failed units unread ("+reason+"); restarted nothing")
		return "unread: " + reason, nil
	}
	var candidates []string
	for _, u := range failed {
		if (r.verdictOnly && r.closure.wants(u)) || (!r.verdictOnly && r.closure.owns(u)) {
			candidates = append(candidates, u)
		}
	}
	if len(candidates) == 0 {
		return "no failed unit to restart", nil
	}
	states, reason, err := r.showUnits(candidates)
	if err != nil {
		return "", withHint(fmt.Errorf("reading failed units: %w", err), "")
	}
	if reason != "" {
		r.warn(PhaseRestartFailedUnits, "failed units' states unread ("+reason+"); restarted nothing")
		return "unread: " + reason, nil
	}
	var restart []string
	for _, u := range candidates {
		if st, ok := states[u]; ok && skippedOnCondition(st, false) {
			continue // skipped on a condition: restarting it changes nothing
		}
		restart = append(restart, u)
	}
	if len(restart) == 0 {
		return "no failed unit to restart", nil
	}
	res, err := r.t.Run(r.ctx, append([]string{"systemctl", "restart", "--no-block", "--"}, restart...), RunOptions{Path: r.searchPath(), Privileged: true})
	if err != nil {
		return "", withHint(fmt.Errorf("restarting %s: %w", strings.Join(restart, ", "), err), "")
	}
	if res.ExitCode != 0 {
		r.warn(PhaseRestartFailedUnits, fmt.Sprintf("systemctl restart %s exited %d: %s", strings.Join(restart, " "), res.ExitCode, firstLine(string(res.Stderr), "")))
	}
	r.restarted = restart
	return "restarted " + strings.Join(restart, ", "), nil
}
