package provider

import (
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	pschema "github.com/hashicorp/terraform-plugin-framework/provider/schema"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// timingsModel is the `timings` block, the same on the provider (defaults for every
// resource) and on each long resource (overrides). Values are Go durations ("90s", "2m").
type timingsModel struct {
	NodeWait       types.String `tfsdk:"node_wait"`
	SwitchTimeout  types.String `tfsdk:"switch_timeout"`
	Settle         types.String `tfsdk:"settle"`
	Watch          types.String `tfsdk:"watch"`
	SampleInterval types.String `tfsdk:"sample_interval"`
	StaleJob       types.String `tfsdk:"stale_job"`
	ChainWait      types.String `tfsdk:"chain_wait"`
	NoProgress     types.String `tfsdk:"no_progress"`
	RolloutWait    types.String `tfsdk:"rollout_wait"`
	PullGrace      types.String `tfsdk:"pull_grace"`
}

// timingDocs says what each timing is and its engine default.
var timingDocs = []struct{ name, doc string }{
	{"node_wait", "How long to wait for the node to answer (SSH or Incus exec) before the deploy fails as unreachable. Default `2m`."},
	{"switch_timeout", "Time limit of `switch-to-configuration` on the node. Default `10m`."},
	{"settle", "How long to let units settle after the switch and after restarts, before the watch. Default `5s`."},
	{"watch", "How long to watch units for restart loops and cycling after settling. Samples are taken on a fixed grid (every `sample_interval` from the start of the watch), so slow samples do not stretch the watch: it lasts this long plus one sample. Default `10s`."},
	{"sample_interval", "Interval between unit-state samples during the watch. Each sample reads the failed units, the states of the units the verdict looks at, the job queue and the system state in one round trip. Default `2s`."},
	{"stale_job", "A start job older than this in `systemctl list-jobs` is named stale. Default `60s`."},
	{"chain_wait", "Verdict-only pass: how long to wait for the secret chain to come up. Default `5m`."},
	{"no_progress", "Verdict-only pass: a chain member that shows no progress for this long stops the wait early. Default `60s`."},
	{"rollout_wait", "k8s rollout: how long to wait for the pod to become ready before rolling back. Default `5m`."},
	{"pull_grace", "k8s rollout: how long ErrImagePull/ImagePullBackOff is tolerated before failing early. Default `20s`."},
}

func timingsProviderBlock() pschema.SingleNestedBlock {
	attrs := map[string]pschema.Attribute{}
	for _, t := range timingDocs {
		attrs[t.name] = pschema.StringAttribute{Optional: true, MarkdownDescription: t.doc}
	}
	return pschema.SingleNestedBlock{
		MarkdownDescription: "Provider-wide defaults of the waits and thresholds. A resource's own `timings` block overrides them.",
		Attributes:          attrs,
	}
}

// timingsResourceBlock is the per-resource override block. Changing a timing changes no
// node; it takes effect on the next deploy.
func timingsResourceBlock() rschema.SingleNestedBlock {
	attrs := map[string]rschema.Attribute{}
	for _, t := range timingDocs {
		attrs[t.name] = rschema.StringAttribute{Optional: true, MarkdownDescription: t.doc + " Overrides the provider's value; changing it redeploys nothing."}
	}
	return rschema.SingleNestedBlock{
		MarkdownDescription: "Per-resource waits and thresholds (Go durations such as `30s`). Unset values come from the provider's `timings`, then from the defaults.",
		Attributes:          attrs,
	}
}

// toTimings parses the block; a nil block yields zero (unset) timings.
func (m *timingsModel) toTimings(at path.Path) (Timings, diag.Diagnostics) {
	var t Timings
	var diags diag.Diagnostics
	if m == nil {
		return t, diags
	}
	parse := func(name string, v types.String, dst *time.Duration) {
		if v.IsNull() || v.IsUnknown() || v.ValueString() == "" {
			return
		}
		d, err := time.ParseDuration(v.ValueString())
		if err != nil || d < 0 {
			diags.AddAttributeError(at.AtName(name), "Invalid duration",
				fmt.Sprintf("%s = %q is not a non-negative Go duration. Write it like \"30s\", \"2m\" or \"1h30m\".", name, v.ValueString()))
			return
		}
		*dst = d
	}
	parse("node_wait", m.NodeWait, &t.NodeWait)
	parse("switch_timeout", m.SwitchTimeout, &t.SwitchTimeout)
	parse("settle", m.Settle, &t.Settle)
	parse("watch", m.Watch, &t.Watch)
	parse("sample_interval", m.SampleInterval, &t.SampleInterval)
	parse("stale_job", m.StaleJob, &t.StaleJob)
	parse("chain_wait", m.ChainWait, &t.ChainWait)
	parse("no_progress", m.NoProgress, &t.NoProgress)
	parse("rollout_wait", m.RolloutWait, &t.RolloutWait)
	parse("pull_grace", m.PullGrace, &t.PullGrace)
	return t, diags
}

// Merge returns t with every unset field taken from def.
func (t Timings) Merge(def Timings) Timings {
	pick := func(a, b time.Duration) time.Duration {
		if a != 0 {
			return a
		}
		return b
	}
	return Timings{
		NodeWait:       pick(t.NodeWait, def.NodeWait),
		SwitchTimeout:  pick(t.SwitchTimeout, def.SwitchTimeout),
		Settle:         pick(t.Settle, def.Settle),
		Watch:          pick(t.Watch, def.Watch),
		SampleInterval: pick(t.SampleInterval, def.SampleInterval),
		StaleJob:       pick(t.StaleJob, def.StaleJob),
		ChainWait:      pick(t.ChainWait, def.ChainWait),
		NoProgress:     pick(t.NoProgress, def.NoProgress),
		RolloutWait:    pick(t.RolloutWait, def.RolloutWait),
		PullGrace:      pick(t.PullGrace, def.PullGrace),
	}
}
