package node

// The planned reboot of fediversity_node_switch: `reboots` and a plan warning say,
// before the operator approves, that the deploy will reboot the node and why
// (docs/activation.md#activation). The rule and the words are the engine's
// (deploybody.PlannedReboot, deploybody.RebootNotice), which the command says too.

import (
	"context"
	"fmt"
	"os"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// privateBootedParts is what decides a reboot on the node, as the last Read (or a
// deploy that rebooted it) found it: deploybody.RebootFacts' line ("" when not known).
// The key keeps its first name, so that a state written before stays readable.
const privateBootedParts = "booted_parts"

// planReboot sets `reboots` on the plan: the state's value when no deploy is planned,
// else why the deploy reboots the node ("" for a switch; unknown when the plan cannot
// know), with a warning naming the node and the reason.
func (r *nodeSwitchResource) planReboot(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if resp.Diagnostics.HasError() || resp.Plan.Raw.IsNull() {
		return
	}
	var plan nodeSwitchModel
	if resp.Diagnostics.Append(resp.Plan.Get(ctx, &plan)...); resp.Diagnostics.HasError() {
		return
	}
	at := path.Root("reboots")
	if !req.State.Raw.IsNull() {
		var state nodeSwitchModel
		if resp.Diagnostics.Append(req.State.Get(ctx, &state)...); resp.Diagnostics.HasError() {
			return
		}
		unfinished := privateString(ctx, req.Private, privateUnfinished) != ""
		if !unfinished && !needsDeploy(plan, state, privateString(ctx, req.Private, privateDeployed)) {
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, at, state.Reboots)...)
			return
		}
	}
	why, known := plannedReboot(ctx, req.Private, plan)
	if !known {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, at, types.StringUnknown())...)
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, at, types.StringValue(why))...)
	if why != "" {
		resp.Diagnostics.AddAttributeWarning(at, fmt.Sprintf("Node %s will reboot", plan.Node.ValueString()),
			deploybody.RebootNotice(plan.Node.ValueString(), why)+
				". The deploy reboots it under the node lock, waits for it within timings.node_wait, and judges the booted system (activation = \""+plan.Activation.ValueString()+"\").")
	}
}

// plannedReboot is why the deploy planned reboots the node; known is false when the
// plan cannot tell (the activation, the new toplevel or the booted system unknown).
func plannedReboot(ctx context.Context, p privateGetter, plan nodeSwitchModel) (why string, known bool) {
	if plan.Activation.IsUnknown() {
		return "", false
	}
	a := deploybody.Activation(plan.Activation.ValueString())
	if a != deploybody.ActivationRebootIfNeeded {
		return deploybody.PlannedReboot(a, nil, nil), true
	}
	node, ok := deploybody.ParseRebootFacts(privateString(ctx, p, privateBootedParts))
	if !ok {
		return "", false
	}
	planned, ok := deploybody.LocalRebootFacts(plannedToplevel(plan))
	if !ok {
		return "", false
	}
	return deploybody.PlannedReboot(a, node, planned), true
}

// plannedToplevel is the toplevel the deploy planned installs, where the plan knows it:
// the configured (or kept) `toplevel`, else the output of the derivation the plan
// evaluated the `build` block to ("" when neither).
func plannedToplevel(plan nodeSwitchModel) string {
	if !plan.Toplevel.IsUnknown() && plan.Toplevel.ValueString() != "" {
		return plan.Toplevel.ValueString()
	}
	if plan.Derivation.IsUnknown() || plan.Derivation.ValueString() == "" {
		return ""
	}
	return derivationOutput(plan.Derivation.ValueString())
}

// drvOut is the first output of a derivation file (ATerm): `Derive([("out","/nix/store/…",`.
var drvOut = regexp.MustCompile(`^Derive\(\[\("out","(/nix/store/[^"]+)"`)

// derivationOutput is the out path a .drv names ("" when it cannot be read).
func derivationOutput(drv string) string {
	b, err := os.ReadFile(drv)
	if err != nil {
		return ""
	}
	if m := drvOut.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// recordBootAfterDeploy keeps privateBootedParts true after a deploy: a reboot into the
// new toplevel makes its facts the node's (booted and running); a reboot that did not
// end well leaves them unknown until the next Read asks the node.
func recordBootAfterDeploy(ctx context.Context, p privateSetter, res *deploybody.Result, runErr error) diag.Diagnostics {
	if res == nil || res.Reboot == nil {
		return nil
	}
	facts, ok := deploybody.LocalRebootFacts(res.Toplevel)
	if runErr != nil || !ok {
		return setPrivateString(ctx, p, privateBootedParts, "")
	}
	return setPrivateString(ctx, p, privateBootedParts, facts.String())
}
