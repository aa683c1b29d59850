package node

// The one runner of fediversity_node_switch, fediversity_verdict and
// fediversity_node_health: the engine's node run (internal/noderun, the command's too),
// reported as diagnostics in one convention (runDiagnostics, engineFailure).

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/noderun"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// nodeRun is one run of a deploy body against one node: the engine's run
// (noderun.Run) and the words the provider reports it in.
type nodeRun struct {
	// verb is what the run does to the node ("deploy", "judge"): a failure's summary is
	// "Unable to <verb> <node>".
	verb string
	// what names the run in warnings and logs ("Deploy", "Verdict").
	what   string
	target kit.TransportTarget
	// run is the engine's run; its Open is the provider's (kit.OpenTransport).
	run noderun.Run
}

// do runs the node through the engine (noderun.Run.Do) and reports what the transport, the
// guard and the body's warnings say. The verdict and the body's error are reported by
// runDiagnostics, after the caller has recorded the result.
func (r nodeRun) do(ctx context.Context, cfg *kit.Config) (out noderun.Outcome, diags diag.Diagnostics) {
	node := r.run.Node
	r.run.Open = func() (deploybody.Transport, error) { return kit.OpenTransport(ctx, node, r.target, cfg) }
	r.run.CloseAfter = true
	r.run.ConnectHint = "check the transport block and the provider's credentials, then apply again"
	out = r.run.Do(ctx)
	switch {
	case !out.Connected:
		var de *deploybody.DeployError
		cause := out.Err
		if errors.As(out.Err, &de) {
			cause = de.Err
		}
		diags.AddError(fmt.Sprintf("Unable to reach %s", node),
			kit.FailureDetail("Node "+node, noderun.PhaseConnect, cause, "Check the transport block and the provider's credentials, then apply again."))
		return out, diags
	case out.Result == nil:
		// Prepare refused (the last good system changed since the plan), or the node's
		// rollback point could not guard the run: the node is untouched.
		diags.Append(engineFailure(r.verb, node, out.Err))
		return out, diags
	}
	for _, w := range out.RunWarnings {
		diags.AddWarning(fmt.Sprintf("%s of %s: %s", r.what, node, w.Fact), fmt.Sprintf("Node %s: %s", node, w.Detail))
	}
	if out.Restored {
		diags.Append(snapshotRestoreDiagnostic(node, out.Guard, out.RestoreErr, out.Judged)...)
		out.Err = errors.Join(out.Err, errRestored)
		return out, diags
	}
	if out.Result != nil && len(out.Result.Warnings) > 0 {
		// One diagnostic for all: Terraform and OpenTofu fold warnings of one summary
		// into the first ("and N more similar warnings"), which would hide the rest
		// (a lock takeover, an earlier run's revert).
		diags.AddWarning(fmt.Sprintf("%s of %s", r.what, node), strings.Join(out.Result.Warnings, "\n\n"))
	}
	tflog.Info(ctx, strings.ToLower(r.what)+" finished", map[string]any{"node": node, "phases": phaseTimingsLog(out.Result), "ok": out.Err == nil})
	return out, diags
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
