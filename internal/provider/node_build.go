package provider

// The `build` block of fediversity_node_switch: the nix-build spec it becomes, and where
// the build's log goes.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixeval"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// buildModel is the `build` block: how to build the node's toplevel with nix-build.
type buildModel struct {
	Installable types.String `tfsdk:"installable"`
	File        types.String `tfsdk:"file"`
	Attribute   types.String `tfsdk:"attribute"`
	Expression  types.String `tfsdk:"expression"`
	Args        types.Map    `tfsdk:"args"`
}

// buildSpec turns the build block into a nix-build spec, writing the node plan to a
// file named by its content (nixeval.NodePlanFile), or else a temporary file that cleanup
// removes; the build reads it instead of evaluating the plan again.
func buildSpec(plan nodeSwitchModel) (nixstore.BuildSpec, func(), diag.Diagnostics) {
	var diags diag.Diagnostics
	b := plan.Build
	spec := nixstore.BuildSpec{
		File: b.File.ValueString(), Attr: b.Attribute.ValueString(), Expr: b.Expression.ValueString(),
	}
	if inst := b.Installable.ValueString(); inst != "" {
		file, attrName, _ := strings.Cut(inst, "#")
		if spec.File != "" || spec.Expr != "" {
			diags.AddAttributeError(path.Root("build").AtName("installable"), "Conflicting build inputs",
				"build.installable already names the file (and attribute); remove build.file / build.expression.")
		}
		spec.File = file
		if attrName != "" {
			if spec.Attr != "" {
				diags.AddAttributeError(path.Root("build").AtName("attribute"), "Conflicting build inputs",
					"build.installable already names the attribute after '#'; remove build.attribute.")
			}
			spec.Attr = attrName
		}
	}
	if (spec.File == "") == (spec.Expr == "") {
		diags.AddAttributeError(path.Root("build"), "Incomplete build block",
			"Give exactly one of build.installable, build.file and build.expression.")
	}
	if !b.Args.IsNull() && !b.Args.IsUnknown() {
		spec.ArgStr = map[string]string{}
		for k, v := range b.Args.Elements() {
			if s, ok := v.(types.String); ok {
				spec.ArgStr[k] = s.ValueString()
			}
		}
	}
	cleanup := func() {}
	if diags.HasError() {
		return spec, cleanup, diags
	}
	if !plan.NodePlan.IsNull() && plan.NodePlan.ValueString() != "" {
		if !json.Valid([]byte(plan.NodePlan.ValueString())) {
			diags.AddAttributeError(path.Root("node_plan"), "Invalid node plan",
				fmt.Sprintf("node_plan of %s is not JSON; pass data.fediversity_submission.<name>.node_plans[\"<node>\"].", plan.Node.ValueString()))
			return spec, cleanup, diags
		}
		if file, err := nixeval.NodePlanFile(plan.NodePlan.ValueString()); err == nil {
			spec.PlanFile = file // the same path every run: see nixeval.NodePlanFile
			return spec, cleanup, diags
		}
		dir, err := os.MkdirTemp("", "fediversity-plan-")
		if err != nil {
			diags.AddError("Unable to write the node plan", fmt.Sprintf("node %s, phase build: %v", plan.Node.ValueString(), err))
			return spec, cleanup, diags
		}
		cleanup = func() { _ = os.RemoveAll(dir) }
		file := filepath.Join(dir, "node-plan.json")
		if err := os.WriteFile(file, []byte(plan.NodePlan.ValueString()), 0o600); err != nil {
			diags.AddError("Unable to write the node plan", fmt.Sprintf("node %s, phase build: %v", plan.Node.ValueString(), err))
			return spec, cleanup, diags
		}
		spec.PlanFile = file
	}
	return spec, cleanup, diags
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
