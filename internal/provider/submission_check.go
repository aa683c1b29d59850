package provider

import (
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/submission"
)

// The submission check: every resource that acts on a node of a submission takes the
// submission's digest and file, re-reads the file at apply, and refuses to act when the
// submission changed after the plan was made. The operator then sees both digests and
// plans again; nothing on the node or in the cluster has changed.

// submissionCheckAttributes are the two attributes of the check; effect says what
// changing them does to the resource.
func submissionCheckAttributes(effect string) map[string]schema.Attribute {
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

// checkSubmission re-reads the submission file at apply. verb is what is refused
// ("deploy", "judge", "push the image of", "roll out").
func checkSubmission(digest, file types.String, verb, node string) (diag.Diagnostics, error) {
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
