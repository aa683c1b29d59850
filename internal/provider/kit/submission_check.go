package kit

import (
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/fediversity/terraform-provider-fediversity/internal/submission"
)

// The submission check: every resource that acts on a node of a submission takes the
// submission's digest and file, re-reads the file at apply, and refuses to act when the
// submission changed after the plan was made. The operator then sees both digests and
// plans again; nothing on the node or in the cluster has changed.

// SubmissionCheckAttributes are the two attributes of the check; effect says what
// changing them does to the resource.
func SubmissionCheckAttributes(effect string) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"submission_digest": schema.StringAttribute{
			Optional: true,
			MarkdownDescription: "The `digest` of the `fediversity_submission` this node's configuration was made from. With `submission_file`, " +
				"the file is read again at apply and a different digest is refused with an error that shows both. " + effect,
			Validators: []validator.String{stringvalidator.AlsoRequires(path.MatchRoot("submission_file"))},
		},
		"submission_file": schema.StringAttribute{
			Optional:            true,
			MarkdownDescription: "The submission file to re-read at apply (see `submission_digest`).",
			Validators:          []validator.String{stringvalidator.AlsoRequires(path.MatchRoot("submission_digest"))},
		},
	}
}

// CheckSubmission re-reads the submission file at apply. verb is what is refused
// ("deploy", "judge", "push the image of", "roll out").
func CheckSubmission(digest, file types.String, verb, node string) (diag.Diagnostics, error) {
	var diags diag.Diagnostics
	if digest.IsNull() || file.IsNull() {
		return diags, nil
	}
	if err := submission.CheckUnchanged(file.ValueString(), digest.ValueString()); err != nil {
		diags.AddAttributeError(path.Root("submission_digest"), fmt.Sprintf("Refusing to %s %s: the submission changed", verb, node),
			fmt.Sprintf("Node %s, phase submission-check: %v.", node, err))
		return diags, err
	}
	return diags, nil
}

// KeepSubmissionOfUnchangedNode: the digest is the digest of the whole submission, so it
// changes for every node when one node's application changes. A node whose own inputs
// did not change has nothing to do, and a plan that showed it updating only for the
// digest would redeploy the whole group for a change of one node. So when the digest
// and file are the only inputs that changed, the plan keeps the recorded ones and the
// resource is left alone. Any other change keeps the new digest, which the apply checks.
//
// Call it first in ModifyPlan and defer what it returns:
//
//	defer keepSubmissionOfUnchangedNode(req, resp)()
//
// Values the provider computes (null in the configuration) that the framework marked
// unknown because of the digest's change are taken from the state for the comparison;
// a value the configuration leaves unknown never is. The resource's own ModifyPlan then
// runs on the kept plan; when it still plans a change (a drifted node, a rollout to wait
// for again), the returned function puts the new digest and file back, so the apply
// checks the submission it acts on.
func KeepSubmissionOfUnchangedNode(req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) func() {
	nothing := func() {}
	if req.State.Raw.IsNull() || resp.Plan.Raw.IsNull() || req.Config.Raw.IsNull() {
		return nothing
	}
	var plan, state, config map[string]tftypes.Value
	if resp.Plan.Raw.As(&plan) != nil || req.State.Raw.As(&state) != nil || req.Config.Raw.As(&config) != nil {
		return nothing
	}
	if plan["submission_digest"].Equal(state["submission_digest"]) && plan["submission_file"].Equal(state["submission_file"]) {
		return nothing // the digest did not change: nothing to keep
	}
	candidate := make(map[string]tftypes.Value, len(plan))
	for name, v := range plan {
		switch {
		case name == "submission_digest" || name == "submission_file":
			candidate[name] = state[name]
		case !v.IsFullyKnown() && config[name].IsNull():
			candidate[name] = state[name]
		default:
			candidate[name] = v
		}
	}
	kept := tftypes.NewValue(resp.Plan.Raw.Type(), candidate)
	if !kept.Equal(req.State.Raw) {
		return nothing
	}
	resp.Plan.Raw = kept
	return func() {
		if resp.Plan.Raw.IsNull() || resp.Plan.Raw.Equal(req.State.Raw) {
			return
		}
		var now map[string]tftypes.Value
		if resp.Plan.Raw.As(&now) != nil {
			return
		}
		now["submission_digest"], now["submission_file"] = plan["submission_digest"], plan["submission_file"]
		resp.Plan.Raw = tftypes.NewValue(resp.Plan.Raw.Type(), now)
	}
}
