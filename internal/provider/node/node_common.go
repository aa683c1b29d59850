package node

// What both node resources (fediversity_node_switch, fediversity_verdict) share: body
// options from their common arguments, private state, the timeouts type, small helpers.

import (
	"context"
	"encoding/json"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

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

var timeoutsAttrTypes = map[string]attr.Type{
	"create": types.StringType, "read": types.StringType, "update": types.StringType, "delete": types.StringType,
}

// commonBodyOptions are the body options of the node resources' common arguments
// (no transport, no checks): see nodeOptions.
func commonBodyOptions(ctx context.Context, cfg *kit.Config, node string, strict types.Bool, chain types.List, budgets types.Map, tm *kit.TimingsModel) (deploybody.Options, diag.Diagnostics) {
	_, _, o, diags := nodeOptions(ctx, cfg, nodeArgs{node: node, strict: strict, chain: chain, budgets: budgets, timings: tm})
	return o, diags
}
