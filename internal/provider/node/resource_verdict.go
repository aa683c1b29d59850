package node

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/noderun"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

var (
	_ resource.Resource                     = &verdictResource{}
	_ resource.ResourceWithConfigure        = &verdictResource{}
	_ resource.ResourceWithImportState      = &verdictResource{}
	_ resource.ResourceWithConfigValidators = &verdictResource{}
	_ resource.ResourceWithModifyPlan       = &verdictResource{}
)

// NewVerdictResource is the constructor of fediversity_verdict.
func NewVerdictResource() resource.Resource { return &verdictResource{} }

type verdictResource struct {
	cfg *kit.Config
}

const defaultVerdictTimeout = 15 * time.Minute

type verdictModel struct {
	ID       types.String `tfsdk:"id"`
	Node     types.String `tfsdk:"node"`
	Toplevel types.String `tfsdk:"toplevel"`
	kit.TransportBlocks
	Strict           types.Bool        `tfsdk:"strict"`
	SecretChain      types.List        `tfsdk:"secret_chain"`
	LoopBudgets      types.Map         `tfsdk:"loop_budgets"`
	Triggers         types.Map         `tfsdk:"triggers"`
	SubmissionDigest types.String      `tfsdk:"submission_digest"`
	SubmissionFile   types.String      `tfsdk:"submission_file"`
	Timings          *kit.TimingsModel `tfsdk:"timings"`
	Timeouts         timeouts.Value    `tfsdk:"timeouts"`
	Judged           types.String      `tfsdk:"judged_toplevel"`
	Verdict          types.Object      `tfsdk:"verdict"`
	Checks           []checkBlockModel `tfsdk:"check"`
	Probes           []probeBlockModel `tfsdk:"probe"`
}

func (r *verdictResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_verdict"
}

const reruns = "Changing it runs the pass again."

func (r *verdictResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The verdict-only pass on a running node: it never builds, copies or switches. " +
			"It waits for the secret chain (bounded by `timings.chain_wait`, stopping early and naming the member when one fails or shows no " +
			"progress for `timings.no_progress`), restarts only failed units the closure wants, settles, watches and gives the same structured " +
			"verdict as `fediversity_node_switch`. In strict mode a failed unit, a closure fault or a unit still looping past its loop budget " +
			"fails the apply (and the next one). The pass runs on create and whenever an argument or `triggers` changes; refresh does not re-judge. " +
			"Destroy forgets the verdict and changes nothing on the node.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The node name.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"node": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Name of the node. Changing it replaces the resource.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:          []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"toplevel": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The system closure whose wanted units count (usually `fediversity_node_switch.x.toplevel`). " +
					"Default: the system the node runs. It must be in the deployer's store. " +
					"When the node runs another system, the pass says so: strict mode fails, naming both; lenient mode warns and judges the given toplevel's units on what the node runs. " + reruns,
			},
			"strict": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				MarkdownDescription: "Strict (default `true`): a failed unit, a closure fault or a loop past its budget fails the apply. `false`: a warning naming them. " + reruns,
			},
			"secret_chain": schema.ListAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "The ordered units that bring the node's secrets up; the pass waits for them first. " + reruns,
			},
			"loop_budgets": schema.MapAttribute{
				Optional: true, ElementType: types.Int64Type,
				MarkdownDescription: "Per-unit loop budgets overriding `X-LoopBudget=`. A unit still looping past its budget fails a strict pass, naming unit and budget. " + reruns,
			},
			"triggers": schema.MapAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Arbitrary values; any change runs the pass again (e.g. `{ generation = fediversity_node_switch.x.generation }`). " +
					"Must not hold per-run values: paths under /tmp, /var/tmp, /run/user, /dev/shm, /dev/fd, /proc or $TMPDIR (also inside a longer value, as in `--identity=/tmp/k`), or the provider's credential locations are refused at plan.",
				Validators: []validator.Map{kit.PerRunMapValidator{}},
			},
			"judged_toplevel": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The closure whose wanted units were judged (the given `toplevel`, or what the node ran).",
			},
			"verdict": verdictSchemaAttribute("the pass"),
		},
		Blocks: withBlocks(checkBlocks(checksChangeVerdict), map[string]schema.Block{
			"timings":  kit.NodeTimingsBlock(kit.TimingsVerdict),
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true, Read: true, Delete: true}),
		}),
	}
	for name, b := range kit.TransportBlockSchemas(reruns) {
		resp.Schema.Blocks[name] = b
	}
	for name, a := range kit.SubmissionCheckAttributes(reruns) {
		resp.Schema.Attributes[name] = a
	}
}

func (r *verdictResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	// "Neither" is refused at plan time (kit.RequireTransport): see there why. Both
	// transports, a toplevel that is not a store path and every other node setting are
	// the node spec's (specConfigValidator), in the command's words.
	return []resource.ConfigValidator{specConfigValidator{args: verdictConfigArgs}, checksConfigValidator{}}
}

// verdictArgs are the pass's node arguments: strict as configured, no system to deploy.
func verdictArgs(m verdictModel) nodeArgs {
	return nodeArgs{node: m.Node.ValueString(), transport: m.TransportBlocks, toplevel: m.Toplevel,
		strict: m.Strict, chain: m.SecretChain, budgets: m.LoopBudgets, timings: m.Timings, checks: m.Checks, probes: m.Probes}
}

// verdictConfigArgs is verdictArgs of a configuration, for its plan-time validation.
func verdictConfigArgs(ctx context.Context, config tfsdk.Config) (nodeArgs, bool) {
	var m verdictModel
	if config.Get(ctx, &m).HasError() {
		return nodeArgs{}, false
	}
	return verdictArgs(m), true
}

func (r *verdictResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	kit.ConfigureObject(&r.cfg, req.ProviderData, "fediversity_verdict", &resp.Diagnostics)
}

// ModifyPlan refuses a pass with no transport block (see kit.RequireTransport), and
// triggers that hold the provider's credential locations (the schema validator already
// refused per-run directories); it leaves a node alone whose only change is the group's
// submission digest.
func (r *verdictResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	defer kit.KeepSubmissionOfUnchangedNode(req, resp)()
	if req.Plan.Raw.IsNull() {
		return
	}
	kit.RequireTransport(ctx, req.Config, &resp.Diagnostics)
	var triggers types.Map
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("triggers"), &triggers)...)
	resp.Diagnostics.Append(kit.CheckPerRunMap(ctx, triggers, path.Root("triggers"), r.cfg)...)
}

func (r *verdictResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan verdictModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Create(ctx, defaultVerdictTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	judged, diags, err := r.pass(ctx, &plan)
	resp.Diagnostics.Append(diags...)
	if judged {
		// Also when the verdict failed: the resource is then tainted, and the next apply
		// runs the pass again (docs/design.md#failed-deploy).
		resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
	}
	tflog.Debug(ctx, "verdict-only pass stored", map[string]any{"judged": judged, "failed": err != nil})
}

func (r *verdictResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan verdictModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Update(ctx, defaultVerdictTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	judged, diags, err := r.pass(ctx, &plan)
	resp.Diagnostics.Append(diags...)
	if judged && err == nil {
		resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
	}
	// On failure the prior state stays, so the next plan runs the pass again.
}

// Read keeps the state: a verdict is the fact of one pass, and re-judging at every
// refresh would make plans slow and unstable. `triggers` re-run it.
func (r *verdictResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state verdictModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	diags, _ := r.refresh(ctx, &state, nil)
	resp.Diagnostics.Append(diags...)
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *verdictResource) Delete(ctx context.Context, req resource.DeleteRequest, _ *resource.DeleteResponse) {
	tflog.Info(ctx, "fediversity_verdict removed from state; nothing changes on the node")
}

func (r *verdictResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	addr, err := parseImportAddress(req.ID)
	if err != nil {
		resp.Diagnostics.AddError("Unable to import fediversity_verdict", err.Error())
		return
	}
	m := verdictModel{
		Node:             types.StringValue(addr.Node),
		Toplevel:         types.StringNull(),
		Strict:           types.BoolValue(true),
		SecretChain:      types.ListNull(types.StringType),
		LoopBudgets:      types.MapNull(types.Int64Type),
		Triggers:         types.MapNull(types.StringType),
		SubmissionDigest: types.StringNull(),
		SubmissionFile:   types.StringNull(),
		Timeouts:         timeouts.Value{Object: types.ObjectNull(timeoutsAttrTypes)},
		// A zero types.Object is null but of no type: the state refuses it.
		Verdict: types.ObjectNull(verdictAttrTypes),
		Judged:  types.StringNull(),
	}
	m.TransportBlocks = kit.TransportBlocksFromTarget(addr.Target)
	diags, _ := r.refresh(ctx, &m, nil)
	resp.Diagnostics.Append(diags...)
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

// refresh is the one place that fills the computed attributes (the provider's one
// refresh convention, see internal/provider/kit). With a result it records the pass;
// without one it only settles unknown values: a verdict is the fact of one pass, so
// nothing is read from the node and gone is always nil.
func (r *verdictResource) refresh(_ context.Context, m *verdictModel, res *deploybody.Result) (diags diag.Diagnostics, gone error) {
	m.ID = types.StringValue(m.Node.ValueString())
	if res != nil {
		v, d := verdictValue(res)
		diags.Append(d...)
		m.Verdict = v
		judged := res.Toplevel
		if judged == "" {
			judged = res.RunningSystem
		}
		m.Judged = kit.StringOrNull(judged)
		return diags, nil
	}
	if m.Verdict.IsUnknown() {
		m.Verdict = types.ObjectNull(verdictAttrTypes)
	}
	if m.Judged.IsUnknown() {
		m.Judged = types.StringNull()
	}
	return diags, nil
}

// pass runs the verdict-only body. judged is true when a verdict was reached (m is then
// filled); err is the run's error.
func (r *verdictResource) pass(ctx context.Context, m *verdictModel) (judged bool, diags diag.Diagnostics, err error) {
	node := m.Node.ValueString()
	if sdiags, err := kit.CheckSubmission(m.SubmissionDigest, m.SubmissionFile, verbJudge, node); err != nil {
		return false, sdiags, err
	}
	diags.Append(kit.OneTransport(m.TransportBlocks)...)
	if diags.HasError() {
		return false, diags, errors.New("invalid configuration")
	}
	_, target, opts, odiags := nodeOptions(ctx, r.cfg, verdictArgs(*m))
	diags.Append(odiags...)
	if diags.HasError() {
		return false, diags, errors.New("invalid configuration")
	}
	run := nodeRun{verb: verbJudge, what: "Verdict", target: target, run: noderun.Run{Node: node, Options: opts, Body: deploybody.VerdictOnly}}
	outcome, rdiags := run.do(ctx, r.cfg)
	diags.Append(rdiags...)
	res, err := outcome.Result, outcome.Err
	if res == nil {
		return false, diags, err
	}
	if res.Verdict != nil {
		vdiags, _ := r.refresh(ctx, m, res)
		diags.Append(vdiags...)
	}
	diags.Append(runDiagnostics(verbJudge, node, res, err)...)
	return res.Verdict != nil, diags, runError(res, err)
}
