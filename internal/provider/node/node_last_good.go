package node

// fediversity_node_switch's `deploy` input: deploy the configured system, or the node's
// last good system (records.LastGoodFile), the provider's face of `fediversity
// rollback --to last-good`. Both read and record the last good system through the same
// engine functions (deploybody.ReadLastGood, deploybody.RecordLastGood), so they agree
// on what it is.
//
// The plan plans `toplevel` as the system the node's record names, so the plan shows
// which nodes change and to what; the apply reads it again, over the deploy's own
// connection, and refuses when it changed since the plan. The plan takes the record the
// refresh read (private state), not the node's again: Terraform plans again at apply
// and fails an apply whose plan changed with "inconsistent final plan", a message that
// blames the provider, where a record changed between plan and apply must fail with the
// apply's own refusal. A node not in the state yet, or whose record the refresh could
// not read (an SSH user other than root: the record is root's), is asked by the plan.

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// The values of `deploy`, shared with fediversity_k8s_rollout.
const (
	deployConfigured = kit.DeployConfigured
	deployLastGood   = kit.DeployLastGood
)

func deploySchemaAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		Optional: true,
		MarkdownDescription: "Which system to deploy. `configured` (the default, also when unset): the one `toplevel` or `build` gives. " +
			"`last-good`: the node's last good system instead, as `fediversity rollback --to last-good` does: the toplevel whose verdict was last clean " +
			"(ok with no reason, so a lenient pass over a failed unit does not count), which every deploy with such a verdict records on the node " +
			"(`" + records.LastGoodFile + "`) and pins against garbage collection (`" + records.LastGoodRoot + "`). " +
			"The plan takes the node's record as the refresh before it read it and shows `toplevel` changing to that system; a node with no record fails the plan, naming it; " +
			"the apply reads the record again and refuses, leaving the node untouched, when it changed since the plan. " +
			"`toplevel` must then be unset (a module passes `null`), since the plan sets it; a `build` block may stay and is not built. " +
			"The deploy is judged as any other (`strict` applies), and its clean verdict records the system again. " +
			"Set it back to `configured` to deploy the configured system again. See docs/rollouts.md#last-good-system.",
		Validators: kit.DeployValidators,
	}
}

// deploysLastGood tells whether the model deploys the node's last good system.
func deploysLastGood(v types.String) bool { return v.ValueString() == deployLastGood }

// planLastGood is ModifyPlan with `deploy = "last-good"`: the planned toplevel is the
// node's last good system, read from the node now. It reports whether it planned (the
// rest of ModifyPlan, which plans the configured system, is then skipped).
func (r *nodeSwitchResource) planLastGood(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) bool {
	var deploy types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("deploy"), &deploy)...)
	if deploy.IsUnknown() {
		// Known at apply: the apply's own plan reads the record.
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("toplevel"), types.StringUnknown())...)
		markRedeploy(ctx, resp)
		return true
	}
	if !deploysLastGood(deploy) {
		return false
	}
	var node, cfgTop types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("node"), &node)...)
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("toplevel"), &cfgTop)...)
	if resp.Diagnostics.HasError() {
		return true
	}
	name := node.ValueString()
	if !cfgTop.IsNull() {
		resp.Diagnostics.AddAttributeError(path.Root("toplevel"), fmt.Sprintf("`toplevel` is set for %s, which deploys its last good system", name),
			fmt.Sprintf("With deploy = %q the plan sets `toplevel` of node %s to its last good system, so the configuration must leave it unset: "+
				"remove `toplevel` (a module passes null) while deploy is %q, or set deploy = %q to deploy the configured toplevel.", deployLastGood, name, deployLastGood, deployConfigured))
		return true
	}
	// Nothing is built: the derivation of a `build` block is not this deploy's.
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("derivation"), types.StringNull())...)
	var plan nodeSwitchModel
	if resp.Diagnostics.Append(resp.Plan.Get(ctx, &plan)...); resp.Diagnostics.HasError() {
		return true
	}
	if node.IsUnknown() || !kit.TransportBlocksKnown(ctx, resp.Plan) {
		// The node cannot be asked yet (its name or address comes from a resource not
		// created yet): the apply reads its record.
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("toplevel"), types.StringUnknown())...)
		markRedeploy(ctx, resp)
		return true
	}
	target, tdiags := kit.ResolveTarget(plan.TransportBlocks, r.cfg)
	if resp.Diagnostics.Append(tdiags...); resp.Diagnostics.HasError() {
		return true
	}
	top, err := r.lastGoodAtPlan(ctx, req, target, name)
	if err != nil {
		resp.Diagnostics.Append(lastGoodDiagnostic(name, err))
		return true
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("toplevel"), types.StringValue(top))...)
	if req.State.Raw.IsNull() {
		markRedeploy(ctx, resp)
		return true
	}
	var stateTop types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("toplevel"), &stateTop)...)
	deployed := privateString(ctx, req.Private, privateDeployed)
	if stateTop.ValueString() != top || deployed != top || privateString(ctx, req.Private, privateUnfinished) != "" {
		markRedeploy(ctx, resp)
	}
	return true
}

// markRedeploy plans what a deploy changes as known only after it.
func markRedeploy(ctx context.Context, resp *resource.ModifyPlanResponse) {
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("generation"), types.Int64Unknown())...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("verdict"), types.ObjectUnknown(verdictAttrTypes))...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("changes"), types.ObjectUnknown(changesAttrTypes))...)
}

// privateLastGood is the node's last good system as the last Read found it ("none":
// it has none; no key: not read, or a deploy ran since).
const privateLastGood = "last_good_toplevel"

// recordLastGoodRead keeps what Read found of the node's last good system in private
// state (nil: not read, which removes what an earlier Read found).
func recordLastGoodRead(ctx context.Context, p privateSetter, lastGood *string) diag.Diagnostics {
	switch {
	case lastGood == nil:
		return setPrivateString(ctx, p, privateLastGood, "")
	case *lastGood == "":
		return setPrivateString(ctx, p, privateLastGood, "none")
	default:
		return setPrivateString(ctx, p, privateLastGood, *lastGood)
	}
}

// lastGoodAtPlan is the node's last good system as the plan sees it: the one the
// refresh before the plan read, or, when it has none to give, the node's record read now.
func (r *nodeSwitchResource) lastGoodAtPlan(ctx context.Context, req resource.ModifyPlanRequest, target kit.TransportTarget, node string) (string, error) {
	if !req.State.Raw.IsNull() {
		switch read := privateString(ctx, req.Private, privateLastGood); read {
		case "":
		case "none":
			return "", &deploybody.DeployError{Node: node, Phase: deploybody.PhaseReadLastGood, Err: records.ErrNoLastGood, Hint: records.NoLastGoodHint}
		default:
			return read, nil
		}
	}
	return readLastGood(ctx, node, target, r.cfg)
}

// readLastGood asks the node for its last good system, over a connection of its own.
func readLastGood(ctx context.Context, node string, target kit.TransportTarget, cfg *kit.Config) (string, error) {
	t, err := kit.OpenTransport(ctx, node, target, cfg)
	if err != nil {
		return "", &deploybody.DeployError{Node: node, Phase: deploybody.PhaseReadLastGood, Err: err,
			Hint: "check the transport block and the provider's credentials"}
	}
	defer func() { _ = t.Close() }()
	return deploybody.LastGoodToplevel(ctx, t, node)
}

// lastGoodDiagnostic reports a node whose last good system cannot be deployed, on the
// attribute that asked for it.
func lastGoodDiagnostic(node string, err error) diag.Diagnostic {
	summary := fmt.Sprintf("Cannot read the last good system of %s", node)
	if errors.Is(err, records.ErrNoLastGood) {
		summary = fmt.Sprintf("Node %s has no last good system: it never had a clean verdict", node)
	}
	var de *deploybody.DeployError
	cause, hint := err, ""
	if errors.As(err, &de) {
		cause, hint = de.Err, de.Hint
	}
	return diag.NewAttributeErrorDiagnostic(path.Root("deploy"), summary,
		kit.FailureDetail("Node "+node, deploybody.PhaseReadLastGood, cause,
			fmt.Sprintf("deploy = %q needs one. %s, or set deploy = %q.", deployLastGood, upperFirst(hint), deployConfigured)))
}

// lastGoodTarget is the apply's step before the deploy with `deploy = "last-good"`: it
// reads the node's record over the deploy's connection and deploys that system. A
// record that changed since the plan (a deploy in between recorded another) is refused:
// the apply would deploy another system than the plan showed.
func lastGoodTarget(planned types.String) func(context.Context, deploybody.Transport, *deploybody.Options) (*deploybody.Result, error) {
	return func(ctx context.Context, t deploybody.Transport, opts *deploybody.Options) (*deploybody.Result, error) {
		top, err := deploybody.LastGoodToplevel(ctx, t, opts.Node)
		if err != nil {
			return nil, err
		}
		if !planned.IsUnknown() && !planned.IsNull() && planned.ValueString() != top {
			return nil, &deploybody.DeployError{Node: opts.Node, Phase: deploybody.PhaseReadLastGood,
				Err:  fmt.Errorf("the node's last good system is %s now, but the plan showed %s: a deploy since the plan recorded another", top, planned.ValueString()),
				Hint: "plan again to see what the roll back deploys; the node was left untouched"}
		}
		opts.Toplevel, opts.Build = top, nil
		return nil, nil
	}
}
