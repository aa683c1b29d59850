package node

// The node resources decode their arguments into the engine's node spec
// (internal/nodespec), which the `fediversity` command's roster decodes into too, and
// report its one validation's problems as diagnostics.

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// nodeArgs are a node resource's arguments that make its node spec.
type nodeArgs struct {
	node      string
	transport kit.TransportBlocks
	snapshot  *snapshotModel
	strict    types.Bool
	// activation is fediversity_node_switch's (null elsewhere: switch).
	activation types.String
	chain      types.List
	budgets    types.Map
	timings    *kit.TimingsModel
	checks     []checkBlockModel
	probes     []probeBlockModel
	// toplevel is the system to deploy (fediversity_node_switch) or whose wanted units
	// are judged (the verdict and the health check; null: what the node runs). build is
	// fediversity_node_switch's (nil elsewhere, and when it deploys the node's last good
	// system, which is not built).
	toplevel types.String
	build    *kit.BuildModel
}

// Spec decodes the arguments (the framework's values) into the node spec.
func (a nodeArgs) spec(ctx context.Context) (nodespec.Spec, diag.Diagnostics) {
	var diags diag.Diagnostics
	s := nodespec.Spec{Node: a.node, Snapshot: a.snapshot.spec(), Strict: a.strict.ValueBoolPointer(), Activation: a.activation.ValueString(),
		Toplevel: a.toplevel.ValueString(), Build: a.build.Spec()}
	a.transport.Spec(&s)
	if !a.chain.IsNull() && !a.chain.IsUnknown() {
		diags.Append(a.chain.ElementsAs(ctx, &s.SecretChain, false)...)
	}
	if !a.budgets.IsNull() && !a.budgets.IsUnknown() {
		diags.Append(a.budgets.ElementsAs(ctx, &s.LoopBudgets, false)...)
	}
	if a.timings != nil {
		s.Timings = map[string]string{}
		for _, name := range nodespec.NodeTimingNames() {
			if v := *kit.ModelField(a.timings, name); !v.IsNull() && !v.IsUnknown() && v.ValueString() != "" {
				s.Timings[name] = v.ValueString()
			}
		}
	}
	var cdiags diag.Diagnostics
	s.Checks, s.Probes, cdiags = checkSpecs(ctx, a.checks, a.probes)
	diags.Append(cdiags...)
	return s, diags
}

// nodeOptions decodes, validates (once, nodespec.Spec.Validate) and resolves a node
// resource's arguments: the whole spec, the target (when a transport block is given)
// and the body's options, with the provider's timings as defaults and its logger.
func nodeOptions(ctx context.Context, cfg *kit.Config, a nodeArgs) (nodespec.Spec, kit.TransportTarget, deploybody.Options, diag.Diagnostics) {
	spec, diags := a.spec(ctx)
	diags.Append(kit.SpecDiagnostics(spec.Validate())...)
	var target kit.TransportTarget
	if a.transport.Given() > 0 {
		t, tdiags := kit.ProviderTarget(spec, cfg)
		diags.Append(tdiags...)
		target = t
	}
	var def kit.Timings
	if cfg != nil {
		def = cfg.Timings
	}
	o := spec.Options(def)
	o.Logger = tflogLogger(a.node)
	return spec, target, o, diags
}

// tflogLogger sends the body's progress of node to tflog.
func tflogLogger(node string) deploybody.Logger {
	return deploybody.LoggerFunc(func(ctx context.Context, level deploybody.Level, phase, message string, fields map[string]any) {
		f := map[string]any{"node": node, "phase": phase}
		for k, v := range fields {
			f[k] = v
		}
		switch level {
		case deploybody.LevelWarn:
			tflog.Warn(ctx, message, f)
		case deploybody.LevelDebug:
			tflog.Debug(ctx, message, f)
		default:
			tflog.Info(ctx, message, f)
		}
	})
}

// specConfigValidator reports a node object's settings at plan time in the words the
// command's roster gets for the same settings: the configuration decoded into one whole
// node spec and validated once (nodespec.Spec.Validate), its problems of values known
// now (kit.KnownSpecDiagnostics); the apply (or the data source's read) validates the
// whole spec again. The checks' problems are checksConfigValidator's at plan time.
// fediversity_node_switch, fediversity_verdict and fediversity_node_health each give
// their own decoding of the configuration into the node's arguments.
type specConfigValidator struct {
	// args decodes the configuration into the node's arguments; false when it cannot be
	// read whole yet (a block or list not known), which the apply validates.
	args func(context.Context, tfsdk.Config) (nodeArgs, bool)
}

var (
	_ resource.ConfigValidator   = specConfigValidator{}
	_ datasource.ConfigValidator = specConfigValidator{}
)

func (specConfigValidator) Description(context.Context) string {
	return "the node's settings make a valid node spec"
}

func (v specConfigValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v specConfigValidator) ValidateResource(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	v.validate(ctx, req.Config, &resp.Diagnostics)
}

func (v specConfigValidator) ValidateDataSource(ctx context.Context, req datasource.ValidateConfigRequest, resp *datasource.ValidateConfigResponse) {
	v.validate(ctx, req.Config, &resp.Diagnostics)
}

func (v specConfigValidator) validate(ctx context.Context, config tfsdk.Config, diags *diag.Diagnostics) {
	a, ok := v.args(ctx, config)
	if !ok {
		return
	}
	// A block that may yet be absent (a `dynamic` block whose for_each is not known)
	// is left out: only what is surely given is judged now.
	a.transport.KeepSurelyGiven(ctx, config)
	for block, drop := range map[string]func(){
		"snapshot": func() { a.snapshot = nil }, "build": func() { a.build = nil },
	} {
		var o types.Object
		if config.GetAttribute(ctx, path.Root(block), &o).HasError() || !kit.BlockGiven(o) {
			drop()
		}
	}
	spec, sdiags := a.spec(ctx)
	if sdiags.HasError() {
		return
	}
	var problems []nodespec.Problem
	for _, p := range spec.Validate() {
		if p.Field != "checks" {
			problems = append(problems, p)
		}
	}
	diags.Append(kit.KnownSpecDiagnostics(ctx, config, problems)...)
}
