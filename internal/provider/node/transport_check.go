package node

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// requireTransport refuses, at plan time, a node resource with neither an ssh nor an
// incus block. It is a plan check, not a config validator, on purpose: Terraform
// validates a configuration with its variables unknown, and a `dynamic` single block
// whose for_each is not known yet then reads as absent. A group module that picks the
// transport from a variable would be refused for a block it does give. (Two blocks at
// once are the node spec's "Conflicting transports", specConfigValidator's.)
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
