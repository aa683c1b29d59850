package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	pschema "github.com/hashicorp/terraform-plugin-framework/provider/schema"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
)

// timingsModel is the `timings` block, the same on the provider (defaults for every
// resource) and on each long resource (overrides). Values are Go durations ("90s", "2m").
// Every block holds every name: a resource's block marks the names it does not use
// deprecated (they were offered once, and a configuration that sets one must not break).
type timingsModel struct {
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
}

// The resources with a `timings` block.
const (
	timingsNodeSwitch = "fediversity_node_switch"
	timingsVerdict    = "fediversity_verdict"
	timingsK8sRollout = "fediversity_k8s_rollout"
)

// timing is one tunable wait or threshold.
type timing struct {
	name string
	// def is the engine's default (the engine's own constant, so the docs cannot drift).
	def time.Duration
	doc string
	// usedBy are the resources whose runs read it.
	usedBy []string
	// model and value pick its place in the block's model and in Timings.
	model func(*timingsModel) *types.String
	value func(*Timings) *time.Duration
}

// timingTable defines every timing once: the provider's block offers all of them, each
// resource's block those it uses.
var timingTable = []timing{
	{"node_wait", deploybody.DefaultNodeWait,
		"How long to wait for the node to answer (SSH or Incus exec) before the run fails as unreachable.",
		[]string{timingsNodeSwitch, timingsVerdict},
		func(m *timingsModel) *types.String { return &m.NodeWait }, func(t *Timings) *time.Duration { return &t.NodeWait }},
	{"switch_timeout", deploybody.DefaultSwitchTimeout,
		"Time limit of `switch-to-configuration` on the node.",
		[]string{timingsNodeSwitch},
		func(m *timingsModel) *types.String { return &m.SwitchTimeout }, func(t *Timings) *time.Duration { return &t.SwitchTimeout }},
	{"settle", deploybody.DefaultSettle,
		"How long to let units settle after the switch and after restarts, before the watch.",
		[]string{timingsNodeSwitch, timingsVerdict},
		func(m *timingsModel) *types.String { return &m.Settle }, func(t *Timings) *time.Duration { return &t.Settle }},
	{"watch", deploybody.DefaultWatch,
		"How long to watch units for restart loops and cycling after settling. Samples are taken on a fixed grid (every `sample_interval` from the start of the watch), so slow samples do not stretch the watch: it lasts this long plus one sample.",
		[]string{timingsNodeSwitch, timingsVerdict},
		func(m *timingsModel) *types.String { return &m.Watch }, func(t *Timings) *time.Duration { return &t.Watch }},
	{"sample_interval", deploybody.DefaultSampleInterval,
		"Interval between unit-state samples during the watch. Each sample reads the failed units, the states of the units the verdict looks at, the job queue and the system state in one round trip.",
		[]string{timingsNodeSwitch, timingsVerdict},
		func(m *timingsModel) *types.String { return &m.SampleInterval }, func(t *Timings) *time.Duration { return &t.SampleInterval }},
	{"stale_job", deploybody.DefaultStaleJob,
		"A start job older than this in `systemctl list-jobs` is named stale.",
		[]string{timingsNodeSwitch, timingsVerdict},
		func(m *timingsModel) *types.String { return &m.StaleJob }, func(t *Timings) *time.Duration { return &t.StaleJob }},
	{"chain_wait", deploybody.DefaultChainWait,
		"How long a deploy, and the verdict-only pass, wait for the secret chain (`secret_chain`) to come up.",
		[]string{timingsNodeSwitch, timingsVerdict},
		func(m *timingsModel) *types.String { return &m.ChainWait }, func(t *Timings) *time.Duration { return &t.ChainWait }},
	{"no_progress", deploybody.DefaultNoProgress,
		"A secret chain member that shows no progress for this long stops the chain wait early, in a deploy and in the verdict-only pass.",
		[]string{timingsNodeSwitch, timingsVerdict},
		func(m *timingsModel) *types.String { return &m.NoProgress }, func(t *Timings) *time.Duration { return &t.NoProgress }},
	{"confirm_timeout", deploybody.DefaultConfirmTimeout,
		"SSH deploys: how long after the switch a new SSH login may take. Before the switch the deploy arms a revert on the node; only a login over a new connection after the switch disarms it. If none is accepted in time, the node switches itself back to the system it ran before (and its boot entry), and the apply fails saying so. See `ssh.revert_on_lockout`.",
		[]string{timingsNodeSwitch},
		func(m *timingsModel) *types.String { return &m.ConfirmTimeout }, func(t *Timings) *time.Duration { return &t.ConfirmTimeout }},
	{"lock_wait", deploybody.DefaultLockWait,
		"How long a deploy or verdict pass waits for the node's lock while another run (from this or another deployer) holds it, before it fails naming the holder. A lock whose holder stopped is taken over: once its heartbeat is a minute old, or at once when its process is proven gone on this very machine (same machine id, boot id and PID namespace; a shared host name proves nothing).",
		[]string{timingsNodeSwitch, timingsVerdict},
		func(m *timingsModel) *types.String { return &m.LockWait }, func(t *Timings) *time.Duration { return &t.LockWait }},
	{"rollout_wait", k8s.DefaultRolloutWait,
		"k8s rollout: how long to wait for the pod to become ready before rolling back.",
		[]string{timingsK8sRollout},
		func(m *timingsModel) *types.String { return &m.RolloutWait }, func(t *Timings) *time.Duration { return &t.RolloutWait }},
	{"pull_grace", k8s.DefaultPullGrace,
		"k8s rollout: how long ErrImagePull/ImagePullBackOff is tolerated before failing early.",
		[]string{timingsK8sRollout},
		func(m *timingsModel) *types.String { return &m.PullGrace }, func(t *Timings) *time.Duration { return &t.PullGrace }},
}

// description is the timing's documentation with its default.
func (t timing) description() string {
	return fmt.Sprintf("%s Default `%s`.", t.doc, durationWords(t.def))
}

func (t timing) usedByResource(resource string) bool {
	for _, r := range t.usedBy {
		if r == resource {
			return true
		}
	}
	return false
}

// durationWords writes a default as an operator would: 2m, 90s, 1h30m.
func durationWords(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func timingsProviderBlock() pschema.SingleNestedBlock {
	attrs := map[string]pschema.Attribute{}
	for _, t := range timingTable {
		attrs[t.name] = pschema.StringAttribute{Optional: true, Validators: []validator.String{timingValidator{t.name}},
			MarkdownDescription: t.description() + " Used by " + strings.Join(backticked(t.usedBy), ", ") + "."}
	}
	return pschema.SingleNestedBlock{
		MarkdownDescription: "Provider-wide defaults of the waits and thresholds. A resource's own `timings` block overrides them.",
		Attributes:          attrs,
	}
}

// timingsResourceBlock is resource's override block: the timings it uses, and, marked
// deprecated, the names it offered before it offered only those. Changing a timing
// changes no node; it takes effect on the next run.
func timingsResourceBlock(resource string) rschema.SingleNestedBlock {
	attrs := map[string]rschema.Attribute{}
	for _, t := range timingTable {
		if t.usedByResource(resource) {
			attrs[t.name] = rschema.StringAttribute{Optional: true, Validators: []validator.String{timingValidator{t.name}},
				MarkdownDescription: t.description() + " Overrides the provider's value; changing it redeploys nothing."}
			continue
		}
		msg := fmt.Sprintf("%s does not use timings.%s (it is for %s); remove it from this block.", resource, t.name, strings.Join(t.usedBy, ", "))
		attrs[t.name] = rschema.StringAttribute{Optional: true,
			MarkdownDescription: "Deprecated: not used by this resource (it is for " + strings.Join(backticked(t.usedBy), ", ") + "); setting it has no effect.",
			DeprecationMessage:  msg}
	}
	return rschema.SingleNestedBlock{
		MarkdownDescription: "Per-resource waits and thresholds (Go durations such as `30s`). Unset values come from the provider's `timings`, then from the defaults.",
		Attributes:          attrs,
	}
}

func backticked(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "`" + n + "`"
	}
	return out
}

// toTimings parses the block; a nil block yields zero (unset) timings.
func (m *timingsModel) toTimings(at path.Path) (Timings, diag.Diagnostics) {
	var t Timings
	var diags diag.Diagnostics
	if m == nil {
		return t, diags
	}
	for _, tm := range timingTable {
		v := *tm.model(m)
		if v.IsNull() || v.IsUnknown() || v.ValueString() == "" {
			continue
		}
		d, err := parseTiming(tm.name, v.ValueString())
		if err != nil {
			diags.AddAttributeError(at.AtName(tm.name), "Invalid duration", err.Error())
			continue
		}
		*tm.value(&t) = d
	}
	return t, diags
}

// Merge returns t with every unset field taken from def.
func (t Timings) Merge(def Timings) Timings {
	out := t
	for _, tm := range timingTable {
		if *tm.value(&out) == 0 {
			*tm.value(&out) = *tm.value(&def)
		}
	}
	return out
}

// parseTiming reads one timing. Zero is refused: an unset timing already means the
// default, and a zero wait would mean "do not wait", which no timing supports.
func parseTiming(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s = %q is not a Go duration. Write it like \"30s\", \"2m\" or \"1h30m\"", name, v)
	}
	if d == 0 {
		return 0, fmt.Errorf("%s = %q is zero. A timing must be positive; remove it to use the default (%s)", name, v, timingDefault(name))
	}
	return d, nil
}

func timingDefault(name string) string {
	for _, t := range timingTable {
		if t.name == name {
			return durationWords(t.def)
		}
	}
	return "the default"
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
	if _, err := parseTiming(v.name, req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid duration", err.Error())
	}
}
