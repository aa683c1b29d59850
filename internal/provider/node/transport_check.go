package node

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// requireTransport refuses, at plan time, a node resource with neither an ssh nor an
// incus block. It is a plan check, not a config validator, on purpose: Terraform
// validates a configuration with its variables unknown, and a `dynamic` single block
// whose for_each is not known yet then reads as absent. A group module that picks the
// transport from a variable would be refused for a block it does give. (Two blocks at
// once are refused by atMostOneTransport.)
func requireTransport(ctx context.Context, config tfsdk.Config, diags *diag.Diagnostics) {
	var node types.String
	var sshBlock, incusBlock types.Object
	diags.Append(config.GetAttribute(ctx, path.Root("node"), &node)...)
	diags.Append(config.GetAttribute(ctx, path.Root("ssh"), &sshBlock)...)
	diags.Append(config.GetAttribute(ctx, path.Root("incus"), &incusBlock)...)
	if diags.HasError() || !sshBlock.IsNull() || !incusBlock.IsNull() {
		return
	}
	name := node.ValueString()
	if node.IsUnknown() {
		name = "this node"
	}
	diags.AddError(fmt.Sprintf("No transport for %s", name),
		"Give exactly one of an ssh block or an incus block, so the provider knows how to reach the node. "+
			"If the block comes from a `dynamic` block, its for_each must be known at plan time.")
}

// blocksApart refuses two single blocks given together. Unlike the framework's
// Conflicting validator it ignores blocks that are not known yet: a `dynamic` block
// whose for_each is unknown while Terraform validates (a group module's roster read
// from a data source) may turn out absent.
type blocksApart struct {
	first, second string
	// why says what to do; it follows "Give at most one of the <first> and <second> blocks".
	why string
}

// atMostOneTransport refuses an ssh and an incus block given together.
var atMostOneTransport = blocksApart{"ssh", "incus", "Give exactly one of an ssh block or an incus block: a node is reached one way. Remove one of them."}

func (v blocksApart) Description(context.Context) string {
	return fmt.Sprintf("at most one of the %s and %s blocks", v.first, v.second)
}

func (v blocksApart) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v blocksApart) ValidateResource(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	v.validate(ctx, req.Config, &resp.Diagnostics)
}

// ValidateDataSource is the same check for a data source that reaches a node.
func (v blocksApart) ValidateDataSource(ctx context.Context, req datasource.ValidateConfigRequest, resp *datasource.ValidateConfigResponse) {
	v.validate(ctx, req.Config, &resp.Diagnostics)
}

func (v blocksApart) validate(ctx context.Context, config tfsdk.Config, diags *diag.Diagnostics) {
	var first, second types.Object
	diags.Append(config.GetAttribute(ctx, path.Root(v.first), &first)...)
	diags.Append(config.GetAttribute(ctx, path.Root(v.second), &second)...)
	if blockGiven(first) && blockGiven(second) {
		diags.AddAttributeError(path.Root(v.second), "Invalid Attribute Combination", v.why)
	}
}

// blockGiven tells whether a single block is surely in the configuration. A `dynamic`
// block with an unknown for_each is expanded while validating as one block whose
// attributes are all unknown or unset: it may yet be absent. An empty block written out
// (`snapshot {}`) is given.
func blockGiven(o types.Object) bool {
	if o.IsNull() || o.IsUnknown() {
		return false
	}
	known, unknown := false, false
	for _, a := range o.Attributes() {
		switch {
		case a.IsUnknown():
			unknown = true
		case !a.IsNull():
			known = true
		}
	}
	return known || !unknown
}
