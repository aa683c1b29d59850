package provider

import (
	"fmt"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/submission"
)

var (
	dnsLabelRE  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	tagRE       = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	digestRefRE = regexp.MustCompile(`^[^@\s]+@sha256:[0-9a-f]{64}$`)
)

// defaultRuntimeClass is the method's RuntimeClass when none is configured.
const defaultRuntimeClass = "fediversity"

// k8sClient is the provider configuration's Kubernetes client (made once, on first use,
// from the per-run kubeconfig), with a diagnostic naming what needed it.
func k8sClient(cfg *Config, node string) (*k8s.Client, diag.Diagnostics) {
	var diags diag.Diagnostics
	if cfg == nil {
		diags.AddError("Provider not configured", "The fediversity provider was not configured. This is a bug in the provider.")
		return nil, diags
	}
	c, err := cfg.k8sClient()
	if err != nil {
		what := "the target namespace"
		if node != "" {
			what = "node " + node
		}
		diags.AddError("Unable to reach the cluster", "For "+what+": "+err.Error())
		return nil, diags
	}
	return c, diags
}

// submissionAttributes are submission_digest and submission_file of a resource that
// takes a node plan: with both set, the apply re-reads the file and refuses a submission
// other than the one the plan was made from, as fediversity_node_switch does.
func submissionAttributes(what string) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"submission_digest": schema.StringAttribute{
			Optional: true,
			MarkdownDescription: "The `digest` of the `fediversity_submission` this node plan was made from. With `submission_file`, " +
				"the file is read again at apply and a different digest is refused, before " + what + ", with an error that shows both.",
			Validators: []validator.String{stringvalidator.AlsoRequires(path.MatchRoot("submission_file"))},
		},
		"submission_file": schema.StringAttribute{
			Optional:            true,
			MarkdownDescription: "The submission file to re-read at apply (see `submission_digest`).",
			Validators:          []validator.String{stringvalidator.AlsoRequires(path.MatchRoot("submission_digest"))},
		},
	}
}

// checkSubmission refuses the apply when the submission file no longer has the digest
// the plan was made from.
func checkSubmission(file, digest types.String, node, doing string) diag.Diagnostics {
	var diags diag.Diagnostics
	if file.IsNull() || digest.IsNull() || file.IsUnknown() || digest.IsUnknown() {
		return diags
	}
	if err := submission.CheckUnchanged(file.ValueString(), digest.ValueString()); err != nil {
		diags.AddAttributeError(path.Root("submission_digest"), fmt.Sprintf("Refusing to %s %s: the submission changed", doing, node),
			fmt.Sprintf("Node %s, phase submission-check: %v. Nothing was pushed or applied.", node, err))
	}
	return diags
}
