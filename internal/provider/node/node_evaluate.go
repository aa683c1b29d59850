package node

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
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
	drv, diags := kit.EvaluateBuild(ctx, kit.EvaluatorFor(r.cfg), node, m.Build, m.NodePlan.ValueString())
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, at, types.StringValue(drv))...)
	var prior types.String
	if !req.State.Raw.IsNull() {
		resp.Diagnostics.Append(req.State.GetAttribute(ctx, at, &prior)...)
	}
	if w := kit.EvaluatorFor(r.cfg).NotePlanned(node, prior.ValueString(), drv); w != "" {
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

// buildUnknown tells whether what the evaluation reads from the configuration is not
// known yet.
func buildUnknown(m nodeSwitchModel) bool {
	return kit.BuildBlockUnknown(m.Build, m.NodePlan)
}
