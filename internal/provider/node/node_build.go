package node

// The `build` block of fediversity_node_switch: the spec it becomes (the block itself
// is the kit's, shared with fediversity_image).

import (
	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// buildSpec turns the node switch's build block into a build spec (kit.BuildSpecFor).
func buildSpec(plan nodeSwitchModel) (nixstore.BuildSpec, func(), diag.Diagnostics) {
	return kit.BuildSpecFor(plan.Node.ValueString(), plan.Build, plan.NodePlan.ValueString())
}
