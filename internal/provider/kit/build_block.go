package kit

// The `build` block of every resource that builds a system (fediversity_node_switch,
// fediversity_image): one schema, one model, and the nix-build or flake spec it becomes.

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixeval"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
)

// BuildModel is the `build` block: how to build the node's toplevel with nix-build.
type BuildModel struct {
	Flake       types.String `tfsdk:"flake"`
	Installable types.String `tfsdk:"installable"`
	File        types.String `tfsdk:"file"`
	Attribute   types.String `tfsdk:"attribute"`
	Expression  types.String `tfsdk:"expression"`
	Args        types.Map    `tfsdk:"args"`
}

// BuildBlockSchema is the `build` block's schema: the one definition of every resource
// that builds a system. what is appended to its description (e.g. that a change
// redeploys).
func BuildBlockSchema(what string) schema.SingleNestedBlock {
	return schema.SingleNestedBlock{
		MarkdownDescription: "Build the toplevel on the deployer, evaluated at plan (conflicts with `toplevel`). Exactly one of `flake` (`nix eval`), " +
			"`installable`, `file` and `expression` (`nix-build`). " + what,
		Attributes: map[string]schema.Attribute{
			"flake": schema.StringAttribute{Optional: true, MarkdownDescription: "`<flake ref>#<attribute>`, the attribute being the system's toplevel, " +
				"e.g. `.#nixosConfigurations.web01.config.system.build.toplevel` (a relative path reference is taken from the working directory). " +
				"Evaluated with `nix eval` (passing `--extra-experimental-features 'nix-command flakes'`, and `--no-write-lock-file`: the plan never writes the flake's lock file). " +
				"The node plan reaches the flake as its input `" + nixstore.NodePlanInput + "` (`--override-input` with a directory holding `" + nixstore.NodePlanInputFile + "`), " +
				"which the flake declares with `flake = false` when `node_plan` is set; the evaluation stays pure. The evaluation cache keys it on the locked `narHash` " +
				"of the flake and of each input (`nix flake metadata`), the attribute and the node plan. Conflicts with the other fields of the block."},
			"installable": schema.StringAttribute{Optional: true, MarkdownDescription: "`<file>#<attribute>`, e.g. `./nodes#web01`: shorthand for `file` and `attribute` (`nix-build`, not a flake: see `flake`)."},
			"file":        schema.StringAttribute{Optional: true, MarkdownDescription: "Nix file (or directory with `default.nix`) to build."},
			"attribute":   schema.StringAttribute{Optional: true, MarkdownDescription: "Attribute of the file or expression to build (`-A`)."},
			"expression":  schema.StringAttribute{Optional: true, MarkdownDescription: "A Nix expression to build (`nix-build -E`)."},
			"args": schema.MapAttribute{Optional: true, ElementType: types.StringType, Validators: []validator.Map{PerRunMapValidator{}},
				MarkdownDescription: "Further `--argstr name value` pairs (not with `flake`). Must not hold per-run values: paths under /tmp, /var/tmp, /run/user, /dev/shm, /dev/fd, /proc or $TMPDIR (also inside a longer value, as in `--identity=/tmp/k`), or the provider's credential locations, are refused at plan."},
		},
	}
}

// spec decodes the build block into the engine's node spec (nil for no block).
func (b *BuildModel) Spec() *nodespec.Build {
	if b == nil {
		return nil
	}
	out := &nodespec.Build{Flake: b.Flake.ValueString(), Installable: b.Installable.ValueString(), File: b.File.ValueString(),
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

// BuildSpecFor turns a build block into a build spec, writing the node plan with the
// engine's one writer (nixeval.HandNodePlan: a file, or for a flake an input
// directory, named by its content, or else a temporary one that cleanup removes); the
// build reads it instead of evaluating the plan again.
func BuildSpecFor(node string, block *BuildModel, nodePlan string) (nixstore.BuildSpec, func(), diag.Diagnostics) {
	spec := nodespec.Spec{Node: node, Build: block.Spec(), NodePlan: nodePlan}
	diags := SpecDiagnostics(spec.Validate())
	cleanup := func() {}
	if diags.HasError() {
		return nixstore.BuildSpec{}, cleanup, diags
	}
	b := spec.NixBuild("")
	if spec.NodePlan != "" {
		c, err := nixeval.HandNodePlan(&b, spec.NodePlan)
		cleanup = c
		if err != nil {
			diags.AddError("Unable to write the node plan", fmt.Sprintf("node %s, phase build: %v", node, err))
			return b, cleanup, diags
		}
	}
	return b, cleanup, diags
}

// TflogWriter sends nix-build's log lines to tflog (debug).
type TflogWriter struct {
	Ctx  context.Context
	Node string
}

func (w *TflogWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			tflog.Debug(w.Ctx, "nix-build", map[string]any{"node": w.Node, "line": line})
		}
	}
	return len(p), nil
}
