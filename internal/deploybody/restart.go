package deploybody

import (
	"context"
	"fmt"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// The phases that collect the units the closure owns and restart the failed ones it wants.

// collectOwnedUnits reads which units toplevel owns and wants, on the deployer.
func (e *runEnv) collectOwnedUnits(ctx context.Context, toplevel string) (*closureUnits, string, error) {
	c, err := readClosureUnits(e.tree, toplevel)
	if err != nil {
		return nil, "", withHint(err, "the toplevel's files must be readable on the deployer (see local_root)")
	}
	for _, name := range c.rejected {
		e.warn(ctx, PhaseCollectOwnedUnits, fmt.Sprintf("closure entry %q is not a valid unit name; ignored", name))
	}
	return c, fmt.Sprintf("%d owned, %d wanted", len(c.owned), len(c.wanted)), nil
}

// ---- restart ----

// restartFailedUnits restarts the failed units the closure owns (verdict-only: wants)
// and returns them. failedAfterSwitch is the failed-unit list read just before, with
// the running system, or nil to read it now. beforeRestart runs before the restart
// (not when nothing is restarted); its error stops the phase.
func (e *runEnv) restartFailedUnits(ctx context.Context, toplevel string, closure *closureUnits, failedAfterSwitch *RunResult, beforeRestart func() error) ([]string, string, error) {
	var (
		failed []string
		reason string
		err    error
	)
	if failedAfterSwitch != nil {
		failed, reason = e.parseFailed(ctx, *failedAfterSwitch)
	} else {
		failed, reason, err = e.readFailedUnits(ctx, toplevel)
	}
	if err != nil {
		return nil, "", withHint(fmt.Errorf("reading failed units: %w", err), "")
	}
	if reason != "" {
		e.warn(ctx, PhaseRestartFailedUnits, "failed units unread ("+reason+"); restarted nothing")
		return nil, "unread: " + reason, nil
	}
	var candidates []string
	for _, u := range failed {
		if (e.verdictOnly && closure.wants(u)) || (!e.verdictOnly && closure.owns(u)) {
			candidates = append(candidates, u)
		}
	}
	if len(candidates) == 0 {
		return nil, "no failed unit to restart", nil
	}
	states, reason, err := e.showUnits(ctx, toplevel, candidates)
	if err != nil {
		return nil, "", withHint(fmt.Errorf("reading failed units: %w", err), "")
	}
	if reason != "" {
		e.warn(ctx, PhaseRestartFailedUnits, "failed units' states unread ("+reason+"); restarted nothing")
		return nil, "unread: " + reason, nil
	}
	var restart []string
	for _, u := range candidates {
		if st, ok := states[u]; ok && judge.SkippedOnCondition(st, false) {
			continue // skipped on a condition: restarting it changes nothing
		}
		restart = append(restart, u)
	}
	if len(restart) == 0 {
		return nil, "no failed unit to restart", nil
	}
	if err := beforeRestart(); err != nil {
		return nil, "", err
	}
	res, err := e.t.Run(ctx, append([]string{"systemctl", "restart", "--no-block", "--"}, restart...), RunOptions{Path: searchPath(toplevel), Privileged: true})
	if err != nil {
		return nil, "", withHint(fmt.Errorf("restarting %s: %w", strings.Join(restart, ", "), err), "")
	}
	if res.ExitCode != 0 {
		e.warn(ctx, PhaseRestartFailedUnits, fmt.Sprintf("systemctl restart %s exited %d: %s", strings.Join(restart, " "), res.ExitCode, judge.FirstLine(string(res.Stderr), "")))
	}
	return restart, "restarted " + strings.Join(restart, ", "), nil
}
