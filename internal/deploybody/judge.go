package deploybody

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// The phases that classify the watch, give the verdict and render the report.

// classify judges the watch's samples (and the checks' results) into the verdict.
func (e *runEnv) classify(ctx context.Context, in judgeIn, checks *judge.CheckRun) (*judge.Verdict, string, error) {
	v := e.classifySamples(ctx, in)
	if !v.Unreachable {
		// The last watch sample read the system state at the end of the window; ask
		// again only when that sample went unanswered.
		var state, unread string
		if n := len(in.samples); n > 0 && in.samples[n-1].Answered {
			state, unread = in.samples[n-1].SystemState, in.samples[n-1].SystemStateUnread
		} else if res, err := e.remote(ctx, in.toplevel, cmdSystemState...); err != nil {
			unread = err.Error()
		} else {
			state, unread = systemState(res)
		}
		if unread != "" {
			v.SystemState = "unread"
			v.Unread = append(v.Unread, "system state: "+unread)
		} else {
			v.SystemState = state
			v.ShuttingDown = v.ShuttingDown || state == judge.SystemStopping
		}
	}
	v.Checks = checks.Results()
	return v, fmt.Sprintf("%d failed, %d set aside, %d looping, %d cycling, %d never spawned", len(v.Failed), len(v.SetAside), len(v.RestartLoops), len(v.Cycling), len(v.NeverSpawnedClosure)+len(v.NeverSpawnedHost)), nil
}

// verdict decides the verdict v: it fills in its reasons and whether it is OK, and
// returns the failure it gives the run (returned only in conclude), nil when none.
func (e *runEnv) verdict(ctx context.Context, v *judge.Verdict, rb *Reboot) (note string, failed error) {
	reasons, fails := judge.Decide(v)
	v.Reasons = reasons
	v.OK = !fails
	if fails {
		return "fails: " + strings.Join(reasons, "; "), &DeployError{
			Node:  e.o.Node,
			Phase: PhaseVerdict,
			Err:   errors.New("the verdict fails the node: " + strings.Join(reasons, "; ")),
			Hint:  e.verdictHint(v, rb),
		}
	}
	for _, reason := range reasons {
		e.warn(ctx, PhaseVerdict, "lenient mode: "+reason)
	}
	if len(reasons) > 0 {
		return "ok (lenient) with warnings", nil
	}
	return "ok", nil
}

func (e *runEnv) verdictHint(v *judge.Verdict, rb *Reboot) string {
	if v.Unreachable {
		return "check that the node is running and reachable; the verdict could not be taken"
	}
	if v.ShuttingDown {
		return "find what asked the node to power off or reboot: a unit or the activation of the new system (the switch's output above, `journalctl -b -1` on the node once it is back), or someone else; " +
			BootEntryAfterFailedVerdict(rb)
	}
	hint := "read `journalctl -u <unit>` on the node, fix the configuration and apply again; strict = false keeps the names but only warns"
	if failed := judge.FailedChecks(v); len(failed) > 0 && len(v.Failed) == 0 && len(v.NeverSpawnedClosure) == 0 {
		hint = "the units are up but the check named above failed: run it by hand (on the node, or the probe from the deployer) to see why, " +
			"fix the service and apply again; strict = false keeps the result but only warns"
	}
	if len(v.ActivationFailed) > 0 && len(v.Failed) == 0 && len(v.NeverSpawnedClosure) == 0 {
		hint = "the activation script's lines above say what failed (users, /etc, secrets, a snippet of system.activationScripts): fix the configuration or the secret it needs and apply again; strict = false keeps the reason but only warns"
	}
	if !e.verdictOnly {
		hint = BootEntryAfterFailedVerdict(rb) + "; " + hint
	}
	return hint
}

// report renders the verdict v and the changes for the operator, and logs it.
func (e *runEnv) report(ctx context.Context, v *judge.Verdict, changes *Changes) (report, note string) {
	report = judge.RenderReport(e.o.Node, v) + judge.RenderChecks(v.Checks) + renderChanges(changes)
	fields := map[string]any{
		"system_state":          v.SystemState,
		"failed":                judge.FailedNames(v.Failed),
		"set_aside":             v.SetAside,
		"restart_loops":         judge.LoopNames(v.RestartLoops),
		"cycling":               v.Cycling,
		"never_spawned_closure": judge.SpawnNames(v.NeverSpawnedClosure),
		"never_spawned_host":    judge.SpawnNames(v.NeverSpawnedHost),
		"skipped_on_condition":  v.SkippedOnCondition,
		"unread":                v.Unread,
		"unreachable":           v.Unreachable,
		"failed_checks":         judge.FailedChecks(v),
	}
	e.log(ctx, LevelInfo, PhaseReport, report, fields)
	if v.OK {
		return report, "verdict ok"
	}
	return report, "verdict fails"
}
