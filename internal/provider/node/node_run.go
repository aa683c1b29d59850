package node

// The one runner of fediversity_node_switch and fediversity_verdict: open the node's
// transport, run a deploy body on it, and report the run as diagnostics in one
// convention (runDiagnostics, engineFailure).

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
	incustransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/incus"
)

// nodeRun is one run of a deploy body against one node.
type nodeRun struct {
	node string
	// verb is what the run does to the node ("deploy", "judge"): a failure's summary is
	// "Unable to <verb> <node>".
	verb string
	// what names the run in warnings and logs ("Deploy", "Verdict").
	what   string
	target kit.TransportTarget
	opts   deploybody.Options
	body   func(context.Context, deploybody.Transport, deploybody.Options) (*deploybody.Result, error)
	// prepare, if set, completes opts on the node's connection before the body runs
	// (the last good system's toplevel); its error ends the run, the node untouched.
	prepare func(context.Context, deploybody.Transport, *deploybody.Options) error
	// snapshotKeep > 0 guards the run with an Incus snapshot taken before the switch and
	// restored when the switch leaves the node unreachable (keeping that many).
	snapshotKeep int
	// interruptedRestore is what the guard does first with a restore an earlier run
	// left unfinished (nodespec.InterruptedRestoreFinish or ...Abort).
	interruptedRestore string
}

// nodeRunOutcome is what a run came to.
type nodeRunOutcome struct {
	// res is the body's result; nil when the body never ran (the node was not reached).
	res *deploybody.Result
	// err is the run's error; the diagnostics already say it.
	err error
	// restored says the snapshot guard rolled the node back: the run's result is void.
	restored bool
}

// run opens the transport, runs the body and reports what the transport, the guard and
// the body's warnings say. The verdict and the body's error are reported by
// runDiagnostics, after the caller has recorded the result.
func (r nodeRun) run(ctx context.Context, cfg *kit.Config) (out nodeRunOutcome, diags diag.Diagnostics) {
	t, err := kit.OpenTransport(ctx, r.node, r.target, cfg)
	if err != nil {
		diags.AddError(fmt.Sprintf("Unable to reach %s", r.node),
			kit.FailureDetail("Node "+r.node, "connect", err, "Check the transport block and the provider's credentials, then apply again."))
		return nodeRunOutcome{err: err}, diags
	}
	defer func() { _ = t.Close() }()
	if r.prepare != nil {
		if err := r.prepare(ctx, t, &r.opts); err != nil {
			diags.Append(engineFailure(r.verb, r.node, err))
			return nodeRunOutcome{err: err}, diags
		}
	}

	var guard *incustransport.SnapshotGuard
	if r.snapshotKeep > 0 {
		guard, err = incustransport.NewSnapshotGuard(t, r.snapshotKeep)
		if err != nil {
			diags.AddAttributeError(path.Root("snapshot"), "Snapshots need the Incus transport", err.Error())
			return nodeRunOutcome{err: err}, diags
		}
		guard.SetInterruptedRestore(r.interruptedRestore)
		t = guard
	}

	// The body restores the guard's snapshot itself, under the node lock
	// (deploybody.Restorer); here it is only reported.
	res, runErr := r.body(ctx, t, r.opts)
	if guard != nil {
		diags.Append(hostPathDiagnostic(r.node, guard)...)
		if restored, rerr := guard.Restored(); restored {
			judged := ""
			if rerr == nil {
				judged = guard.JudgeRestored(ctx, r.opts)
			}
			diags.Append(snapshotRestoreDiagnostic(r.node, guard, rerr, judged)...)
			return nodeRunOutcome{res: res, err: errors.Join(runErr, errRestored), restored: true}, diags
		}
		if guard.KeptEarlierPoint() {
			diags.AddWarning(fmt.Sprintf("%s of %s kept its earlier rollback point", r.what, r.node),
				fmt.Sprintf("Node %s ran a system its boot entry does not point at (an earlier deploy did not finish), so its state was not known good: "+
					"snapshot %s, taken before that deploy, was kept as the rollback point instead of being replaced.", r.node, guard.Taken()))
		}
	}
	if len(res.Warnings) > 0 {
		// One diagnostic for all: Terraform and OpenTofu fold warnings of one summary
		// into the first ("and N more similar warnings"), which would hide the rest
		// (a lock takeover, an earlier run's revert).
		diags.AddWarning(fmt.Sprintf("%s of %s", r.what, r.node), strings.Join(res.Warnings, "\n\n"))
	}
	tflog.Info(ctx, strings.ToLower(r.what)+" finished", map[string]any{"node": r.node, "phases": phaseTimingsLog(res), "ok": runErr == nil})
	return nodeRunOutcome{res: res, err: runErr}, diags
}

// errRestored marks the error of a run whose node was restored to its rollback point:
// the node then runs and boots what the snapshot held, so the run left nothing
// unfinished behind it (Read judges what the node runs from there).
var errRestored = errors.New("restored")

// lenientHint is what a failed verdict's detail offers the operator.
const lenientHint = "To accept these units for now, set strict = false (they stay named in the verdict)."

// runError is the error of a run the body finished: its own, or, for a run that reached
// no verdict and gave no error (a pass that stopped short), that fact.
func runError(res *deploybody.Result, runErr error) error {
	if runErr == nil && res.Verdict == nil {
		return errors.New("the run stopped before a verdict")
	}
	return runErr
}

// runDiagnostics reports a run the body finished: a verdict that fails the run, or
// names units, in the verdict's own words; any other failure (runError) as
// engineFailure.
func runDiagnostics(verb, node string, res *deploybody.Result, runErr error) diag.Diagnostics {
	var diags diag.Diagnostics
	runErr = runError(res, runErr)
	if runErr == nil {
		return verdictDiagnostic(node, res, nil, "")
	}
	var de *deploybody.DeployError
	if res.Verdict != nil && !res.Verdict.OK && errors.As(runErr, &de) && de.Phase == deploybody.PhaseVerdict {
		return verdictDiagnostic(node, res, runErr, lenientHint)
	}
	diags.Append(engineFailure(verb, node, runErr))
	return diags
}

// The verbs of the node resources' failure summaries.
const (
	verbDeploy = "deploy"
	verbJudge  = "judge"
)

// engineFailure is how the node resources report a failed engine run: summary "Unable
// to <verb> <node>"; detail: the node, the phase, the cause and what the operator can do.
func engineFailure(verb, node string, err error) diag.Diagnostic {
	summary := fmt.Sprintf("Unable to %s %s", verb, node)
	phase, cause, hint := "run", err, ""
	var de *deploybody.DeployError
	if errors.As(err, &de) {
		phase, cause, hint = de.Phase, de.Err, de.Hint
	}
	if hint == "" {
		hint = "fix the cause and apply again"
	}
	return diag.NewErrorDiagnostic(summary, kit.FailureDetail("Node "+node, phase, cause, upperFirst(hint)+"."))
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
