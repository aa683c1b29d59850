package provider

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixeval"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// Plan-time evaluation of a node's `build` block. The plan evaluates the block to its
// derivation (nix-instantiate) and records it in `derivation`; a derivation other than
// the state's plans a redeploy of that node, so an edit of the Nix source shows in the
// plan even though no attribute of the configuration changed. The apply builds exactly
// the derivation the plan recorded.
//
// Terraform and OpenTofu plan each resource again at apply, in a new provider process.
// The evaluation cache carries the plan's result across: that second plan, and the
// check at apply, are cache hits when the source is unchanged, so a node is evaluated
// once per run. When the source changed after a saved plan, that second plan evaluates
// to another derivation and the binary refuses the apply ("Provider produced
// inconsistent final plan", naming both derivations), after a warning of ours that
// says why (nixeval NotePlanned); the check at apply refuses the same way should the source
// change later still, before anything reaches the node.

// fallbackEvaluator serves a resource used without Configure (unit tests).
var fallbackEvaluator = nixeval.New()

// evaluatorFor is the configuration's evaluator (providerClients): its cache, and one
// evaluation per cache key and one build per derivation in this provider process.
func evaluatorFor(cfg *Config) *nixeval.Evaluator {
	if cfg == nil || cfg.clients == nil || cfg.clients.nix == nil {
		return fallbackEvaluator
	}
	return cfg.clients.nix
}

// logEvaluation logs an evaluation's outcome: "node evaluated" with the derivation,
// cache hit or miss and the seconds it took.
func logEvaluation(ctx context.Context, node string, ev nixeval.Evaluation, err error) {
	if ev.Ignored != "" {
		tflog.Info(ctx, "evaluation cache entry not used", map[string]any{"node": node, "why": ev.Ignored})
	}
	if err == nil || ev.Derivation != "" {
		tflog.Info(ctx, "node evaluated", map[string]any{"node": node, "derivation": ev.Derivation, "cache": ev.Cache, "shared": ev.Shared, "seconds": ev.Elapsed.Seconds()})
	}
}

// evaluationError is the diagnostic of a failed evaluation: nix's message, the node,
// and the file (nix names the line).
func evaluationError(node string, spec nixstore.BuildSpec, err error) diag.Diagnostic {
	source := "build.expression"
	switch {
	case spec.Flake != "":
		source = "flake " + spec.Flake + "#" + spec.Attr
	case spec.File != "":
		source, _ = filepath.Abs(spec.File)
	}
	return diag.NewAttributeErrorDiagnostic(path.Root("build"), fmt.Sprintf("Unable to evaluate the system of node %s", node),
		failureDetail("Node "+node, "evaluate", fmt.Errorf("source %s: %w", source, err), "Fix the Nix source and plan again; nothing was deployed."))
}

// planDerivation is ModifyPlan's part for a `build` block: it evaluates the planned
// block and sets `derivation`. A derivation other than the state's plans a redeploy of
// this node (toplevel, generation and verdict become unknown).
func (r *nodeSwitchResource) planDerivation(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	var m nodeSwitchModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	at := path.Root("derivation")
	if m.Build == nil {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, at, types.StringNull())...)
		return
	}
	if buildUnknown(m) {
		// Known at apply (e.g. a node plan from a data source read then): the
		// evaluation happens in the apply's own plan.
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, at, types.StringUnknown())...)
		return
	}
	node := m.Node.ValueString()
	drv, diags := evaluateBuild(ctx, evaluatorFor(r.cfg), node, m.Build, m.NodePlan.ValueString())
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, at, types.StringValue(drv))...)
	var prior types.String
	if !req.State.Raw.IsNull() {
		resp.Diagnostics.Append(req.State.GetAttribute(ctx, at, &prior)...)
	}
	if w := evaluatorFor(r.cfg).NotePlanned(node, prior.ValueString(), drv); w != "" {
		resp.Diagnostics.AddAttributeWarning(at, fmt.Sprintf("The Nix source of %s changed since its last plan", node), w)
	}
	if req.State.Raw.IsNull() {
		return
	}
	if prior.ValueString() != drv {
		tflog.Info(ctx, "the node's derivation changed: redeploy planned", map[string]any{"node": node, "state": prior.ValueString(), "plan": drv})
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("toplevel"), types.StringUnknown())...)
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("generation"), types.Int64Unknown())...)
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("verdict"), types.ObjectUnknown(verdictAttrTypes))...)
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("changes"), types.ObjectUnknown(changesAttrTypes))...)
	}
}

// evaluateBuild is the plan's evaluation of a build block (through the cache) to its
// derivation: what every resource with a `build` block records in `derivation`.
func evaluateBuild(ctx context.Context, e *nixeval.Evaluator, node string, block *buildModel, nodePlan string) (string, diag.Diagnostics) {
	spec, cleanup, diags := buildSpecFor(node, block, nodePlan)
	defer cleanup()
	if diags.HasError() {
		return "", diags
	}
	ctx, cancel := context.WithTimeout(ctx, defaultDeployTimeout)
	defer cancel()
	ev, err := e.Evaluate(ctx, node, spec, nodePlan)
	logEvaluation(ctx, node, ev, err)
	for _, w := range ev.Warnings {
		diags.AddWarning(fmt.Sprintf("Evaluation cache of %s", node), w)
	}
	if err != nil {
		diags.Append(evaluationError(node, spec, err))
		return "", diags
	}
	return ev.Derivation, diags
}

// buildUnknown tells whether what the evaluation reads from the configuration is not
// known yet.
func buildUnknown(m nodeSwitchModel) bool {
	return buildBlockUnknown(m.Build, m.NodePlan)
}

// buildBlockUnknown tells whether a build block, or the node plan it is handed, is not
// known yet.
func buildBlockUnknown(b *buildModel, nodePlan types.String) bool {
	if nodePlan.IsUnknown() || b.Flake.IsUnknown() || b.Installable.IsUnknown() || b.File.IsUnknown() || b.Attribute.IsUnknown() ||
		b.Expression.IsUnknown() || b.Args.IsUnknown() {
		return true
	}
	for _, v := range b.Args.Elements() {
		if v.IsUnknown() {
			return true
		}
	}
	return false
}

// plannedBuild is the apply's build of a `build` block: it evaluates the block again
// (a cache hit when the source is unchanged) and refuses when the result is not the
// derivation the plan recorded, naming both. The build function it returns realises
// that derivation, once per provider process however many nodes share it.
func plannedBuild(ctx context.Context, e *nixeval.Evaluator, node string, spec nixstore.BuildSpec, nodePlan, planned string) (func(context.Context) (string, error), diag.Diagnostics) {
	var diags diag.Diagnostics
	ev, err := e.Planned(ctx, node, spec, nodePlan, planned)
	logEvaluation(ctx, node, ev, err)
	for _, w := range ev.Warnings {
		diags.AddWarning(fmt.Sprintf("Evaluation cache of %s", node), w)
	}
	var changed *nixeval.ChangedError
	if errors.As(err, &changed) {
		diags.AddAttributeError(path.Root("derivation"), fmt.Sprintf("Refusing to deploy %s: its Nix source changed since the plan", node),
			failureDetail("Node "+node, "evaluate", fmt.Errorf("the plan evaluated the build to %s, the source now evaluates to %s", changed.Planned, changed.Now),
				"Nothing was deployed. Plan again to deploy the current source."))
		return nil, diags
	}
	if err != nil {
		diags.Append(evaluationError(node, spec, err))
		return nil, diags
	}
	drv := ev.Derivation
	return func(ctx context.Context) (string, error) {
		top, shared, err := e.Build(ctx, drv, &tflogWriter{ctx: ctx, node: node})
		tflog.Debug(ctx, "derivation built", map[string]any{"node": node, "derivation": drv, "toplevel": top, "shared": shared})
		return top, err
	}, diags
}
