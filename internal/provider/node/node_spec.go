package node

// The node resources decode their arguments into the engine's node spec
// (internal/nodespec), which the `fediversity` command's roster decodes into too, and
// report its one validation's problems as diagnostics.

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// nodeArgs are a node resource's arguments that make its node spec.
type nodeArgs struct {
	node     string
	ssh      *kit.SSHBlockModel
	incus    *kit.IncusBlockModel
	snapshot *snapshotModel
	strict   types.Bool
	// activation is fediversity_node_switch's (null elsewhere: switch).
	activation types.String
	chain      types.List
	budgets    types.Map
	timings    *kit.TimingsModel
	checks     []checkBlockModel
	probes     []probeBlockModel
	// toplevel and build are fediversity_node_switch's system to deploy (null and nil
	// elsewhere, and when it deploys the node's last good system, which is not built).
	toplevel types.String
	build    *kit.BuildModel
}

// Spec decodes the arguments (the framework's values) into the node spec.
func (a nodeArgs) spec(ctx context.Context) (nodespec.Spec, diag.Diagnostics) {
	var diags diag.Diagnostics
	s := nodespec.Spec{Node: a.node, SSH: a.ssh.Spec(), Incus: a.incus.Spec(), Snapshot: a.snapshot.spec(), Strict: a.strict.ValueBoolPointer(), Activation: a.activation.ValueString(),
		Toplevel: a.toplevel.ValueString(), Build: a.build.Spec()}
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
	if a.ssh != nil || a.incus != nil {
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
