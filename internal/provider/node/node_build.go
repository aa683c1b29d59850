package node

// The `build` block of fediversity_node_switch: the nix-build spec it becomes, and where
// the build's log goes.

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixeval"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// buildModel is the `build` block: how to build the node's toplevel with nix-build.
type buildModel struct {
	Installable types.String `tfsdk:"installable"`
	File        types.String `tfsdk:"file"`
	Attribute   types.String `tfsdk:"attribute"`
	Expression  types.String `tfsdk:"expression"`
	Args        types.Map    `tfsdk:"args"`
}

// spec decodes the build block into the engine's node spec (nil for no block).
func (b *buildModel) spec() *nodespec.Build {
	if b == nil {
		return nil
	}
	out := &nodespec.Build{Installable: b.Installable.ValueString(), File: b.File.ValueString(),
		Attribute: b.Attribute.ValueString(), Expression: b.Expression.ValueString()}
	if !b.Args.IsNull() && !b.Args.IsUnknown() {
		out.Args = map[string]string{}
		for k, v := range b.Args.Elements() {
			if s, ok := v.(types.String); ok {
				out.Args[k] = s.ValueString()
			}
		}
	}
	return out
}

// buildSpec turns the build block into a nix-build spec, writing the node plan with
// the engine's one writer (nixeval.WriteNodePlan: a file named by its content, or else
// a temporary file that cleanup removes); the build reads it instead of evaluating the
// plan again.
func buildSpec(plan nodeSwitchModel) (nixstore.BuildSpec, func(), diag.Diagnostics) {
	node := plan.Node.ValueString()
	spec := nodespec.Spec{Node: node, Build: plan.Build.spec(), NodePlan: plan.NodePlan.ValueString()}
	diags := kit.SpecDiagnostics(spec.Validate())
	cleanup := func() {}
	if diags.HasError() {
		return nixstore.BuildSpec{}, cleanup, diags
	}
	b := spec.NixBuild("")
	if spec.NodePlan != "" {
		file, c, err := nixeval.WriteNodePlan(spec.NodePlan)
		cleanup = c
		if err != nil {
			diags.AddError("Unable to write the node plan", fmt.Sprintf("node %s, phase build: %v", node, err))
			return b, cleanup, diags
		}
		b.PlanFile = file
	}
	return b, cleanup, diags
}

// tflogWriter sends nix-build's log lines to tflog (debug).
type tflogWriter struct {
	ctx  context.Context
	node string
}

func (w *tflogWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			tflog.Debug(w.ctx, "nix-build", map[string]any{"node": w.node, "line": line})
		}
	}
	return len(p), nil
}
