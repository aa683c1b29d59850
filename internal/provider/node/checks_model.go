package node

// The operator's health checks of fediversity_node_switch and fediversity_verdict:
// `check` blocks (a command on the node) and `probe` blocks (a request from the
// deployer), and the verdict's `checks` attribute that records how each one went.

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
)

type checkBlockModel struct {
	Name       types.String `tfsdk:"name"`
	Argv       types.List   `tfsdk:"argv"`
	ExpectExit types.Int64  `tfsdk:"expect_exit"`
	Interval   types.String `tfsdk:"interval"`
	Timeout    types.String `tfsdk:"timeout"`
}

type probeBlockModel struct {
	Name         types.String `tfsdk:"name"`
	URL          types.String `tfsdk:"url"`
	TCP          types.String `tfsdk:"tcp"`
	ExpectStatus types.Int64  `tfsdk:"expect_status"`
	BodyRegexp   types.String `tfsdk:"body_regexp"`
	Insecure     types.Bool   `tfsdk:"insecure"`
	Interval     types.String `tfsdk:"interval"`
	Timeout      types.String `tfsdk:"timeout"`
}

// checksChange says what changing a check does to each resource.
const (
	checksChangeNodeSwitch = "Changing checks never redeploys the node: they are used by the next deploy."
	checksChangeVerdict    = "Changing checks runs the pass again."
)

// checkBlocks are the `check` and `probe` blocks of a node resource.
func checkBlocks(change string) map[string]schema.Block {
	timing := func(what string, def time.Duration) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, Validators: []validator.String{durationValidator{}},
			MarkdownDescription: fmt.Sprintf("%s (a Go duration, default `%s`).", what, def)}
	}
	name := schema.StringAttribute{Required: true, Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
		MarkdownDescription: "Name of the check, as the verdict's `checks` and `reasons` show it. Unique among the resource's checks and probes."}
	interval := timing("Pause between two attempts", judge.DefaultCheckInterval)
	timeout := timing("How long, from the end of the settle, the attempts may go on before the check fails", judge.DefaultCheckTimeout)
	exactlyOne := func(other string) validator.String {
		return stringvalidator.ExactlyOneOf(path.MatchRelative().AtParent().AtName(other))
	}
	return map[string]schema.Block{
		"check": schema.ListNestedBlock{
			MarkdownDescription: "A health check run on the node after the settle, retried every `interval` until it exits with " +
				"`expect_exit` or `timeout` runs out. Attempts while the watch runs ride in the watch's own round trips. " +
				"A failed check fails a strict run (its name is in `verdict.reasons`) and warns in lenient mode. " + change,
			NestedObject: schema.NestedBlockObject{Attributes: map[string]schema.Attribute{
				"name": name,
				"argv": schema.ListAttribute{Required: true, ElementType: types.StringType,
					MarkdownDescription: "The command and its arguments, run without a shell (write `[\"sh\", \"-c\", \"…\"]` for one), as the deploy's user, " +
						"with the closure's `sw/bin` first on `PATH`. Each attempt is bounded by `timeout`. Never put secrets here: argv is in the plan."},
				"expect_exit": schema.Int64Attribute{Optional: true, MarkdownDescription: "The exit code that passes (default 0)."},
				"interval":    interval,
				"timeout":     timeout,
			}},
		},
		"probe": schema.ListNestedBlock{
			MarkdownDescription: "A health check from the deployer after the settle: an HTTP(S) GET (`url`) or a TCP connect (`tcp`), " +
				"retried every `interval` until it passes or `timeout` runs out. TLS is verified against the deployer's roots unless `insecure = true`. " +
				"A failed probe fails a strict run (its name is in `verdict.reasons`) and warns in lenient mode. " + change,
			NestedObject: schema.NestedBlockObject{Attributes: map[string]schema.Attribute{
				"name": name,
				"url": schema.StringAttribute{Optional: true,
					Validators:          []validator.String{exactlyOne("tcp"), stringvalidator.RegexMatches(regexp.MustCompile(`^https?://\S+$`), "must be an http:// or https:// URL")},
					MarkdownDescription: "The URL to GET. Exactly one of `url` and `tcp`."},
				"tcp": schema.StringAttribute{Optional: true, Validators: []validator.String{hostPortValidator{}},
					MarkdownDescription: "A `host:port` to connect to. Exactly one of `url` and `tcp`."},
				"expect_status": schema.Int64Attribute{Optional: true, MarkdownDescription: "The HTTP status that passes (default 200)."},
				"body_regexp": schema.StringAttribute{Optional: true, Validators: []validator.String{regexpValidator{}},
					MarkdownDescription: "A regular expression (Go syntax) the first 64 KiB of the body must match."},
				"insecure": schema.BoolAttribute{Optional: true, MarkdownDescription: "Skip TLS verification (default `false`)."},
				"interval": interval,
				"timeout":  timeout,
			}},
		},
	}
}

// withBlocks returns blocks with extra added (a resource's own blocks and the shared ones).
func withBlocks(extra, blocks map[string]schema.Block) map[string]schema.Block {
	for k, v := range extra {
		blocks[k] = v
	}
	return blocks
}

// checkSpecs decodes the blocks into the node spec's checks and probes (checked by
// nodespec.Spec.Validate).
func checkSpecs(ctx context.Context, checks []checkBlockModel, probes []probeBlockModel) ([]nodespec.Check, []nodespec.Probe, diag.Diagnostics) {
	var diags diag.Diagnostics
	var nc []nodespec.Check
	for _, c := range checks {
		n := nodespec.Check{Name: c.Name.ValueString(), ExpectExit: int(c.ExpectExit.ValueInt64()),
			Interval: c.Interval.ValueString(), Timeout: c.Timeout.ValueString()}
		diags.Append(c.Argv.ElementsAs(ctx, &n.Argv, false)...)
		nc = append(nc, n)
	}
	var np []nodespec.Probe
	for _, p := range probes {
		np = append(np, nodespec.Probe{Name: p.Name.ValueString(), URL: p.URL.ValueString(), TCP: p.TCP.ValueString(),
			ExpectStatus: int(p.ExpectStatus.ValueInt64()), Insecure: p.Insecure.ValueBool(), BodyRegexp: p.BodyRegexp.ValueString(),
			Interval: p.Interval.ValueString(), Timeout: p.Timeout.ValueString()})
	}
	return nc, np, diags
}

// checksConfigValidator checks at plan time what the field validators cannot: names
// unique across checks and probes, argv not empty.
type checksConfigValidator struct{}

var _ resource.ConfigValidator = checksConfigValidator{}

func (checksConfigValidator) Description(context.Context) string {
	return "check and probe names are unique and every check has a command"
}

func (v checksConfigValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (checksConfigValidator) ValidateResource(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	// A `dynamic` block whose for_each is not known yet (a module's node roster read
	// from a data source) is an unknown list while Terraform validates: decided later.
	var checkList, probeList types.List
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("check"), &checkList)...)
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("probe"), &probeList)...)
	if resp.Diagnostics.HasError() || checkList.IsUnknown() || probeList.IsUnknown() {
		return
	}
	var checks []checkBlockModel
	var probes []probeBlockModel
	resp.Diagnostics.Append(checkList.ElementsAs(ctx, &checks, false)...)
	resp.Diagnostics.Append(probeList.ElementsAs(ctx, &probes, false)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for _, c := range checks {
		if c.Name.IsUnknown() || c.Argv.IsUnknown() {
			return // decided at apply
		}
	}
	for _, p := range probes {
		if p.Name.IsUnknown() || p.URL.IsUnknown() || p.TCP.IsUnknown() || p.BodyRegexp.IsUnknown() {
			return
		}
	}
	// Durations and patterns have their own field validators; this checks the set.
	var nc []judge.NodeCheck
	for _, c := range checks {
		n := judge.NodeCheck{Name: c.Name.ValueString()}
		resp.Diagnostics.Append(c.Argv.ElementsAs(ctx, &n.Argv, false)...)
		nc = append(nc, n)
	}
	var np []judge.Probe
	for _, p := range probes {
		np = append(np, judge.Probe{Name: p.Name.ValueString(), URL: p.URL.ValueString(), TCP: p.TCP.ValueString()})
	}
	if err := judge.ValidateChecks(nc, np); err != nil {
		resp.Diagnostics.AddError("Invalid health checks", err.Error()+". Fix the check or probe block named.")
	}
}

// ---- the verdict's `checks` attribute ----

var checkResultAttrTypes = map[string]attr.Type{
	"name":         types.StringType,
	"kind":         types.StringType,
	"ok":           types.BoolType,
	"attempts":     types.Int64Type,
	"time_to_pass": types.StringType,
	"output":       types.StringType,
}

var checkResultListType = types.ListType{ElemType: types.ObjectType{AttrTypes: checkResultAttrTypes}}

func checksSchemaAttribute(doc string) schema.ListNestedAttribute {
	return schema.ListNestedAttribute{Computed: true, MarkdownDescription: doc,
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"name":         schema.StringAttribute{Computed: true, MarkdownDescription: "The check's or probe's name."},
			"kind":         schema.StringAttribute{Computed: true, MarkdownDescription: "`node` (a `check` block) or `probe`."},
			"ok":           schema.BoolAttribute{Computed: true, MarkdownDescription: "It passed."},
			"attempts":     schema.Int64Attribute{Computed: true, MarkdownDescription: "How many attempts were made."},
			"time_to_pass": schema.StringAttribute{Computed: true, MarkdownDescription: "From the end of the settle to the passing attempt (a Go duration); null when it never passed."},
			"output": schema.StringAttribute{Computed: true, MarkdownDescription: "The tail (at most 256 bytes) of the last attempt's output or error. " +
				"Text that looks like a credential (`password=…`, `token: …`, `Authorization: …`, a private key) is masked."},
		}}}
}

func checksValue(results []judge.CheckResult) types.List {
	elems := make([]attr.Value, 0, len(results))
	for _, c := range results {
		ttp := types.StringNull()
		if c.OK {
			ttp = types.StringValue(c.TimeToPass.Round(time.Millisecond).String())
		}
		elems = append(elems, types.ObjectValueMust(checkResultAttrTypes, map[string]attr.Value{
			"name": types.StringValue(c.Name), "kind": types.StringValue(c.Kind), "ok": types.BoolValue(c.OK),
			"attempts": types.Int64Value(int64(c.Attempts)), "time_to_pass": ttp, "output": types.StringValue(c.Output),
		}))
	}
	return types.ListValueMust(checkResultListType.ElemType, elems)
}

// ---- validators ----

type durationValidator struct{}

func (durationValidator) Description(context.Context) string { return "a positive Go duration" }
func (v durationValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (durationValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if d, err := time.ParseDuration(req.ConfigValue.ValueString()); err != nil || d <= 0 {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid duration",
			fmt.Sprintf("%q is not a positive Go duration. Write it like \"2s\", \"30s\" or \"1m\".", req.ConfigValue.ValueString()))
	}
}

type regexpValidator struct{}

func (regexpValidator) Description(context.Context) string { return "a Go regular expression" }
func (v regexpValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (regexpValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := regexp.Compile(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid regular expression", err.Error()+". Write it in Go's regexp syntax.")
	}
}

type hostPortValidator struct{}

func (hostPortValidator) Description(context.Context) string { return "host:port" }
func (v hostPortValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (hostPortValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, port, err := net.SplitHostPort(req.ConfigValue.ValueString()); err != nil || port == "" {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid address",
			fmt.Sprintf("%q is not host:port (e.g. \"127.0.0.1:8080\").", req.ConfigValue.ValueString()))
	}
}
