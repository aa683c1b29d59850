package provider

// The node resources decode their arguments into the engine's node spec
// (internal/nodespec), which the `fediversity` command's roster decodes into too, and
// report its one validation's problems as diagnostics.

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
)

// nodeArgs are a node resource's arguments that make its node spec.
type nodeArgs struct {
	node     string
	ssh      *sshBlockModel
	incus    *incusBlockModel
	snapshot *snapshotModel
	strict   types.Bool
	chain    types.List
	budgets  types.Map
	timings  *timingsModel
	checks   []checkBlockModel
	probes   []probeBlockModel
}

// spec decodes the arguments (the framework's values) into the node spec.
func (a nodeArgs) spec(ctx context.Context) (nodespec.Spec, diag.Diagnostics) {
	var diags diag.Diagnostics
	s := nodespec.Spec{Node: a.node, SSH: a.ssh.spec(), Incus: a.incus.spec(), Snapshot: a.snapshot.spec(), Strict: a.strict.ValueBoolPointer()}
	if !a.chain.IsNull() && !a.chain.IsUnknown() {
		diags.Append(a.chain.ElementsAs(ctx, &s.SecretChain, false)...)
	}
	if !a.budgets.IsNull() && !a.budgets.IsUnknown() {
		diags.Append(a.budgets.ElementsAs(ctx, &s.LoopBudgets, false)...)
	}
	if a.timings != nil {
		s.Timings = map[string]string{}
		for _, name := range nodespec.NodeTimingNames() {
			if v := *modelField(a.timings, name); !v.IsNull() && !v.IsUnknown() && v.ValueString() != "" {
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
// resource's arguments: the target (when a transport block is given) and the body's
// options, with the provider's timings as defaults and its logger.
func nodeOptions(ctx context.Context, cfg *Config, a nodeArgs) (transportTarget, deploybody.Options, diag.Diagnostics) {
	spec, diags := a.spec(ctx)
	diags.Append(specDiagnostics(spec.Validate())...)
	var target transportTarget
	if a.ssh != nil || a.incus != nil {
		t, tdiags := providerTarget(spec, cfg)
		diags.Append(tdiags...)
		target = t
	}
	var def Timings
	if cfg != nil {
		def = cfg.Timings
	}
	o := spec.Options(def)
	o.Logger = tflogLogger(a.node)
	return target, o, diags
}

// specDiagnostics reports the spec's problems, each at its attribute.
func specDiagnostics(problems []nodespec.Problem) diag.Diagnostics {
	var diags diag.Diagnostics
	for _, p := range problems {
		detail := p.String() + "."
		if p.Node != "" {
			detail = fmt.Sprintf("Node %s: %s", p.Node, detail)
		}
		field := p.Field
		if p.At != "" {
			field = p.At
		}
		if at, ok := problemPath(field); ok {
			diags.AddAttributeError(at, p.Summary, detail)
		} else {
			diags.AddError(p.Summary, detail)
		}
	}
	return diags
}

// problemPath is the attribute path of a problem's field ("ssh.jump.host_key",
// "secret_chain[1]", `loop_budgets["a.service"]`); the checks, which span two block
// lists, have none.
func problemPath(field string) (path.Path, bool) {
	if field == "checks" {
		return path.Empty(), false
	}
	name, key, keyed := strings.Cut(field, "[")
	parts := strings.Split(name, ".")
	at := path.Root(parts[0])
	for _, p := range parts[1:] {
		at = at.AtName(p)
	}
	if keyed {
		key = strings.TrimSuffix(key, "]")
		if i, err := strconv.Atoi(key); err == nil {
			return at.AtListIndex(i), true
		}
		if k, err := strconv.Unquote(key); err == nil {
			return at.AtMapKey(k), true
		}
	}
	return at, true
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
