package kit

// The one form of a failure in this provider's diagnostics, kept in this file so every
// family writes it the same way: the summary is "Unable to <verb> <object>" or a precise
// fact ("Unit nginx.service failed on web01"); the detail says which node or object, in
// which phase, the cause, and what the operator can do.

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
)

// FailureDetail writes a failure's detail: "<Subject>, phase <phase>: <cause>. <what to do>".
// subject names the node or object ("Node web01", "Namespace tenants").
func FailureDetail(subject, phase string, cause error, whatToDo string) string {
	return fmt.Sprintf("%s, phase %s: %v. %s", subject, phase, cause, whatToDo)
}

// StringOrNull is s as a string attribute, null when empty.
func StringOrNull(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// SummarizeDiags is the errors of d on one line ("summary: detail" each), for a test or
// a nested diagnostic.
func SummarizeDiags(d diag.Diagnostics) string {
	var parts []string
	for _, e := range d.Errors() {
		parts = append(parts, e.Summary()+": "+e.Detail())
	}
	return strings.Join(parts, " ")
}

// SpecDiagnostics reports the spec's problems, each at its attribute.
func SpecDiagnostics(problems []nodespec.Problem) diag.Diagnostics {
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

// KnownSpecDiagnostics is SpecDiagnostics at plan time: the problems whose attribute
// the configuration holds known. A value not known yet (an address from a resource
// not created yet, a `dynamic` block whose for_each is unknown) is judged at apply,
// where the whole spec is validated again.
func KnownSpecDiagnostics(ctx context.Context, config tfsdk.Config, problems []nodespec.Problem) diag.Diagnostics {
	var known []nodespec.Problem
	for _, p := range problems {
		field := p.Field
		if p.At != "" {
			field = p.At
		}
		if at, ok := problemPath(field); ok {
			var v attr.Value
			if config.GetAttribute(ctx, at, &v).HasError() || v == nil {
				continue
			}
			if tv, err := v.ToTerraformValue(ctx); err != nil || !tv.IsFullyKnown() {
				continue
			}
		}
		known = append(known, p)
	}
	return SpecDiagnostics(known)
}
