package provider

// What both node resources (fediversity_node_switch, fediversity_verdict) share: body
// options from their common arguments, private state, the timeouts type, small helpers.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

func stringOrNull(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// privateGetter is the part of the framework's private state both requests offer.
type privateGetter interface {
	GetKey(ctx context.Context, key string) ([]byte, diag.Diagnostics)
}

type privateSetter interface {
	SetKey(ctx context.Context, key string, value []byte) diag.Diagnostics
}

func privateString(ctx context.Context, p privateGetter, key string) string {
	if p == nil {
		return ""
	}
	b, diags := p.GetKey(ctx, key)
	if diags.HasError() || len(b) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(b, &s) != nil {
		return ""
	}
	return s
}

func setPrivateString(ctx context.Context, p privateSetter, key, value string) diag.Diagnostics {
	b, _ := json.Marshal(value)
	if value == "" {
		b = nil // SetKey with an empty value removes the key
	}
	return p.SetKey(ctx, key, b)
}

func summarizeDiags(d diag.Diagnostics) string {
	var parts []string
	for _, e := range d.Errors() {
		parts = append(parts, e.Summary()+": "+e.Detail())
	}
	return strings.Join(parts, " ")
}

var timeoutsAttrTypes = map[string]attr.Type{
	"create": types.StringType, "read": types.StringType, "update": types.StringType, "delete": types.StringType,
}

func commonBodyOptions(ctx context.Context, cfg *Config, node string, strict types.Bool, chain types.List, budgets types.Map, tm *timingsModel) (deploybody.Options, diag.Diagnostics) {
	var diags diag.Diagnostics
	o := deploybody.Options{Node: node, Strict: strict.IsNull() || strict.ValueBool()}
	if !chain.IsNull() && !chain.IsUnknown() {
		diags.Append(chain.ElementsAs(ctx, &o.SecretChain, false)...)
		for i, u := range o.SecretChain {
			if !deploybody.ValidUnitName(u) {
				diags.AddAttributeError(path.Root("secret_chain").AtListIndex(i), "Invalid unit name",
					fmt.Sprintf("%q is not a systemd unit name (want e.g. \"secrets-fetch.service\").", u))
			}
		}
	}
	if !budgets.IsNull() && !budgets.IsUnknown() {
		m := map[string]int64{}
		diags.Append(budgets.ElementsAs(ctx, &m, false)...)
		o.LoopBudgets = map[string]int{}
		for u, n := range m {
			if !deploybody.ValidUnitName(u) || n < 0 {
				diags.AddAttributeError(path.Root("loop_budgets").AtMapKey(u), "Invalid loop budget",
					fmt.Sprintf("loop_budgets[%q] = %d: want a systemd unit name and a budget ≥ 0.", u, n))
				continue
			}
			o.LoopBudgets[u] = int(n)
		}
	}
	own, tdiags := tm.toTimings(path.Root("timings"))
	diags.Append(tdiags...)
	var def Timings
	if cfg != nil {
		def = cfg.Timings
	}
	o.Timings = own.Merge(def).Body()
	o.Logger = deploybody.LoggerFunc(func(ctx context.Context, level deploybody.Level, phase, message string, fields map[string]any) {
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
	return o, diags
}
