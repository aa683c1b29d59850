package kit

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	pschema "github.com/hashicorp/terraform-plugin-framework/provider/schema"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// TimingsModel is the `timings` block, the same on the provider (defaults for every
// resource) and on each long resource (overrides). Values are Go durations ("90s", "2m").
// Every block holds every name: a resource's block marks the names it does not use
// deprecated (they were offered once, and a configuration that sets one must not break).
type TimingsModel struct {
	NodeWait       types.String `tfsdk:"node_wait"`
	SwitchTimeout  types.String `tfsdk:"switch_timeout"`
	Settle         types.String `tfsdk:"settle"`
	Watch          types.String `tfsdk:"watch"`
	SampleInterval types.String `tfsdk:"sample_interval"`
	StaleJob       types.String `tfsdk:"stale_job"`
	ChainWait      types.String `tfsdk:"chain_wait"`
	NoProgress     types.String `tfsdk:"no_progress"`
	ConfirmTimeout types.String `tfsdk:"confirm_timeout"`
	LockWait       types.String `tfsdk:"lock_wait"`
	RolloutWait    types.String `tfsdk:"rollout_wait"`
	PullGrace      types.String `tfsdk:"pull_grace"`
	DegradedGrace  types.String `tfsdk:"degraded_grace"`
	RollbackWait   types.String `tfsdk:"rollback_wait"`
}

// The resources with a `timings` block.
const (
	TimingsNodeSwitch = deploybody.ObjectNodeSwitch
	TimingsVerdict    = deploybody.ObjectVerdict
	TimingsNodeHealth = deploybody.ObjectNodeHealth
	TimingsK8sRollout = deploybody.ObjectK8sRollout
)

// TimingTable is the engine's table (deploybody.TimingTable): the blocks, their docs and
// the defaults are made from it.
var TimingTable = deploybody.TimingTable

// ModelField is the block model's field of the timing named name: the model is only
// the framework's decoding target, so its fields are found by their tfsdk names
// rather than listed a second time (TestTimingsModelMatchesTable keeps both in step).
func ModelField(m *TimingsModel, name string) *types.String {
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		if v.Type().Field(i).Tag.Get("tfsdk") == name {
			return v.Field(i).Addr().Interface().(*types.String)
		}
	}
	return nil
}

func TimingsProviderBlock() pschema.SingleNestedBlock {
	attrs := map[string]pschema.Attribute{}
	for _, t := range TimingTable {
		attrs[t.Name] = pschema.StringAttribute{Optional: true, Validators: []validator.String{timingValidator{t.Name}},
			MarkdownDescription: t.Description() + " Used by " + strings.Join(backticked(t.UsedBy), ", ") + "."}
	}
	return pschema.SingleNestedBlock{
		MarkdownDescription: "Provider-wide defaults of the waits and thresholds. A resource's own `timings` block overrides them.",
		Attributes:          attrs,
	}
}

// TimingsResourceBlock is resource's override block: the timings it uses, and, marked
// deprecated, the names it offered before it offered only those. Changing a timing
// changes no node; it takes effect on the next run.
func TimingsResourceBlock(resource string) rschema.SingleNestedBlock {
	attrs := map[string]rschema.Attribute{}
	for _, t := range TimingTable {
		if t.UsedByObject(resource) {
			attrs[t.Name] = rschema.StringAttribute{Optional: true, Validators: []validator.String{timingValidator{t.Name}},
				MarkdownDescription: t.Description() + " Overrides the provider's value; changing it redeploys nothing."}
			continue
		}
		msg := fmt.Sprintf("%s does not use timings.%s (it is for %s); remove it from this block.", resource, t.Name, strings.Join(t.UsedBy, ", "))
		attrs[t.Name] = rschema.StringAttribute{Optional: true,
			MarkdownDescription: "Deprecated: not used by this resource (it is for " + strings.Join(backticked(t.UsedBy), ", ") + "); setting it has no effect.",
			DeprecationMessage:  msg}
	}
	return rschema.SingleNestedBlock{
		MarkdownDescription: "Per-resource waits and thresholds (Go durations such as `30s`). Unset values come from the provider's `timings`, then from the defaults.",
		Attributes:          attrs,
	}
}

// NodeTimingsBlock is TimingsResourceBlock for an object that reaches a node: its
// timings are the node spec's, judged with the rest of it (nodespec.Spec.Validate, in
// the words the command prints for a roster's), so they carry no validator of their own
// that would say the same thing a second time.
func NodeTimingsBlock(resource string) rschema.SingleNestedBlock {
	b := TimingsResourceBlock(resource)
	for name, a := range b.Attributes {
		if s, ok := a.(rschema.StringAttribute); ok {
			s.Validators = nil
			b.Attributes[name] = s
		}
	}
	return b
}

func backticked(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "`" + n + "`"
	}
	return out
}

// ToTimings parses the block; a nil block yields zero (unset) timings.
func (m *TimingsModel) ToTimings(at path.Path) (Timings, diag.Diagnostics) {
	var t Timings
	var diags diag.Diagnostics
	if m == nil {
		return t, diags
	}
	for _, tm := range TimingTable {
		v := *ModelField(m, tm.Name)
		if v.IsNull() || v.IsUnknown() || v.ValueString() == "" {
			continue
		}
		d, err := deploybody.ParseTiming(tm.Name, v.ValueString())
		if err != nil {
			diags.AddAttributeError(at.AtName(tm.Name), "Invalid duration", err.Error())
			continue
		}
		*tm.In(&t) = d
	}
	return t, diags
}

// timingValidator checks a timing at plan time (a value known only at apply is
// checked then, by toTimings).
type timingValidator struct{ name string }

func (v timingValidator) Description(context.Context) string {
	return "a positive Go duration such as 30s, 2m or 1h30m"
}
func (v timingValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }
func (v timingValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := deploybody.ParseTiming(v.name, req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid duration", err.Error())
	}
}
