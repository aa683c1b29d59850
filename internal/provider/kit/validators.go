package kit

// Plan-time checks of single attributes: what can be told wrong before anything runs
// is refused in the plan, naming the attribute.

import (
	"context"
	"fmt"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
)

var (
	DNSLabelRE  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	TagRE       = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	DigestRefRE = regexp.MustCompile(`^[^@\s]+@sha256:[0-9a-f]{64}$`)
)

// dnsLabel is what Kubernetes accepts as a namespace or Deployment name, and what a
// registry accepts as a path component.
var DNSLabelValidators = []validator.String{
	stringvalidator.LengthBetween(1, 63),
	stringvalidator.RegexMatches(DNSLabelRE, "must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit"),
}

// AbsPathRE accepts absolute paths on a node without spaces or quotes.
var AbsPathRE = regexp.MustCompile(`^/[A-Za-z0-9_./-]*$`)

// HostKeyValidator accepts a public key in authorized_keys form. The node objects'
// ssh blocks go without it: their keys are the node spec's to judge (one error, naming
// the node); a block that is no node's settings (the spire node) keeps it.
type HostKeyValidator struct{}

func (HostKeyValidator) Description(context.Context) string {
	return "a public host key in authorized_keys form (ssh-ed25519 AAAA…)"
}
func (v HostKeyValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }
func (HostKeyValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() || req.ConfigValue.ValueString() == "" {
		return
	}
	if err := nodespec.CheckHostKey(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Not an SSH host key", fmt.Sprintf("%s: %v.", req.Path, err))
	}
}
