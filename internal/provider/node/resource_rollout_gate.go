package node

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
)

var (
	_ resource.Resource               = &rolloutGateResource{}
	_ resource.ResourceWithModifyPlan = &rolloutGateResource{}
)

// NewRolloutGateResource is the constructor of fediversity_rollout_gate.
func NewRolloutGateResource() resource.Resource { return &rolloutGateResource{} }

// rolloutGateResource stands between two waves of a staged rollout in HCL
// (docs/rollouts.md#staged-rollouts): the waves behind it depend on it, so when its apply
// fails past the failure budget Terraform does not apply them. It deploys and reads
// nothing itself: the engine is fleet.WaveGate, the verdicts are the node resources'.
type rolloutGateResource struct{}

type rolloutGateModel struct {
	ID            types.String `tfsdk:"id"`
	Wave          types.Int64  `tfsdk:"wave"`
	Waves         types.Int64  `tfsdk:"waves"`
	GroupSize     types.Int64  `tfsdk:"group_size"`
	FailureBudget types.String `tfsdk:"failure_budget"`
	Verdicts      types.Map    `tfsdk:"verdicts"`
}

// gateVerdictModel is one node's entry in verdicts.
type gateVerdictModel struct {
	OK      types.Bool `tfsdk:"ok"`
	Reasons types.List `tfsdk:"reasons"`
}

var gateVerdictType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"ok":      types.BoolType,
	"reasons": types.ListType{ElemType: types.StringType},
}}

func (r *rolloutGateResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_rollout_gate"
}

const gateReplaces = "Changing it replaces the gate, which judges again."

func (r *rolloutGateResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The gate between two waves of a staged rollout. Give it the verdicts of every node deployed so far " +
			"(the waves before it) and the failure budget; make the next wave depend on it (`depends_on`). Its apply fails past the budget, " +
			"naming each failed node and why (\"the rollout halted after wave 1 of 2: 1 of the 1 nodes deployed failed (web01), past the failure budget of 0\"), " +
			"so Terraform does not apply the waves behind it: nothing is copied to or switched on their nodes. " +
			"At plan it checks its arguments, and warns when the verdicts are already known and past the budget; it decides nothing until apply, " +
			"when the verdicts are in. A gate that failed is not kept in the state, and every argument change replaces it, so the next apply " +
			"(after the cause is fixed) judges again and resumes the rollout where it halted. It stores only the arguments it passed on, " +
			"never a verdict of its own, and refresh reads nothing: the verdicts are the node resources', which refresh themselves. " +
			"A budget above 0 needs the nodes lenient (`strict = false`): a strict node failure already fails its own resource, and through " +
			"the dependency every later wave. The same arithmetic as the `fediversity` command's `--failure-budget`.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`wave-<wave>`.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"wave": schema.Int64Attribute{
				Required:            true,
				MarkdownDescription: "The wave just finished, from 1 (the canary, when there is one). " + gateReplaces,
				Validators:          []validator.Int64{int64validator.AtLeast(1)},
				PlanModifiers:       []planmodifier.Int64{int64planmodifier.RequiresReplace()},
			},
			"waves": schema.Int64Attribute{
				Optional:            true,
				MarkdownDescription: "How many waves the rollout has, for the message. Default: `wave`. " + gateReplaces,
				Validators:          []validator.Int64{int64validator.AtLeast(1)},
				PlanModifiers:       []planmodifier.Int64{int64planmodifier.RequiresReplace()},
			},
			"group_size": schema.Int64Attribute{
				Required:            true,
				MarkdownDescription: "The number of nodes in the group, the base of a percentage budget. " + gateReplaces,
				Validators:          []validator.Int64{int64validator.AtLeast(0)},
				PlanModifiers:       []planmodifier.Int64{int64planmodifier.RequiresReplace()},
			},
			"failure_budget": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "How many nodes may fail before the rollout halts: a count (`\"1\"`) or a percentage of `group_size`, rounded down (`\"20%\"`). " +
					"Null: no budget, the gate never halts. " + gateReplaces,
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"verdicts": schema.MapAttribute{
				Required:    true,
				ElementType: gateVerdictType,
				MarkdownDescription: "Per node deployed so far (every wave up to `wave`): `ok` and the `reasons` it fails, e.g. " +
					"`{ for n, s in fediversity_node_switch.wave_1 : n => { ok = s.verdict.ok, reasons = s.verdict.reasons } }`. " +
					"A node counts against the budget when `ok` is false or `reasons` is not empty: a lenient verdict that is ok with reasons " +
					"let failures pass, and counts, as in the `fediversity` command's rollout. " + gateReplaces,
				PlanModifiers: []planmodifier.Map{mapplanmodifier.RequiresReplace()},
			},
		},
	}
}

// gate is the engine's view of m; known is false while a value is unknown (at plan).
func (m *rolloutGateModel) gate(ctx context.Context) (g fleet.WaveGate, known bool, diags diag.Diagnostics) {
	g = fleet.WaveGate{Wave: int(m.Wave.ValueInt64()), Waves: int(m.Waves.ValueInt64()), GroupSize: int(m.GroupSize.ValueInt64())}
	if !m.FailureBudget.IsNull() && !m.FailureBudget.IsUnknown() {
		budget, err := fleet.ParseAmount(m.FailureBudget.ValueString())
		if err != nil {
			diags.AddAttributeError(path.Root("failure_budget"), "Invalid failure budget",
				fmt.Sprintf("failure_budget = %s. Give a count of nodes (\"1\") or a percentage of group_size (\"20%%\"), or leave it null for no budget.", err))
			return g, false, diags
		}
		g.FailureBudget = budget
	}
	known = !m.Wave.IsUnknown() && !m.Waves.IsUnknown() && !m.GroupSize.IsUnknown() && !m.FailureBudget.IsUnknown() && !m.Verdicts.IsUnknown()
	if !known || m.Verdicts.IsNull() {
		return g, false, diags
	}
	g.Verdicts = map[string]fleet.GateVerdict{}
	for node, v := range m.Verdicts.Elements() {
		obj, ok := v.(types.Object)
		if !ok || obj.IsUnknown() {
			return g, false, diags
		}
		var e gateVerdictModel
		if d := obj.As(ctx, &e, basetypes.ObjectAsOptions{}); d.HasError() {
			diags.Append(d...)
			return g, false, diags
		}
		if e.OK.IsUnknown() || e.Reasons.IsUnknown() {
			return g, false, diags
		}
		var reasons []string
		diags.Append(e.Reasons.ElementsAs(ctx, &reasons, false)...)
		g.Verdicts[node] = fleet.GateVerdict{OK: e.OK.ValueBool(), Reasons: reasons}
	}
	return g, true, diags
}

// ModifyPlan checks the arguments at plan (a bad budget or wave, naming the field), and
// warns when the verdicts are already known and past the budget: the apply will halt.
// It decides nothing: the verdicts of a wave being applied are only in at apply.
func (r *rolloutGateResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var m rolloutGateModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	g, known, diags := m.gate(ctx)
	resp.Diagnostics.Append(diags...)
	if diags.HasError() {
		return
	}
	halt, failures, err := g.Judge()
	switch {
	case err != nil:
		resp.Diagnostics.AddError("Invalid rollout gate", fmt.Sprintf("fediversity_rollout_gate (wave %d): %v.", g.Wave, err))
	case known && halt != "":
		resp.Diagnostics.AddWarning("The rollout will halt at this gate",
			fmt.Sprintf("The verdicts are already in: %s.\n%s\nFix the failing nodes (or raise failure_budget) before the apply, or it stops here.", halt, strings.Join(failures, "\n")))
	}
}

// judge is the gate's apply: past the budget it fails, naming each failed node and why.
func (r *rolloutGateResource) judge(ctx context.Context, m *rolloutGateModel) diag.Diagnostics {
	g, known, diags := m.gate(ctx)
	if diags.HasError() {
		return diags
	}
	if !known {
		diags.AddError("Unable to judge the rollout gate", fmt.Sprintf("Wave %d: a verdict is still unknown at apply. Give the gate the verdicts of the nodes it waits for (their resources' verdict attribute).", g.Wave))
		return diags
	}
	halt, failures, err := g.Judge()
	switch {
	case err != nil:
		diags.AddError("Invalid rollout gate", fmt.Sprintf("fediversity_rollout_gate (wave %d): %v.", g.Wave, err))
	case halt != "":
		diags.AddError("The rollout halted after wave "+fmt.Sprint(g.Wave),
			fmt.Sprintf("%s. The waves behind this gate are not applied: nothing is copied to or switched on their nodes.\n%s\nFix the cause (or raise failure_budget) and apply again: the rollout resumes here.",
				halt, strings.Join(failures, "\n")))
	}
	m.ID = types.StringValue(fmt.Sprintf("wave-%d", g.Wave))
	return diags
}

// refresh has nothing to read: the gate manages nothing outside Terraform, and the
// verdicts it judged are the node resources' own, refreshed by them. It is the kit's
// one refresh convention kept, so Read looks like every other resource's.
func (r *rolloutGateResource) refresh(context.Context, *rolloutGateModel) (diags diag.Diagnostics, gone error) {
	return nil, nil
}

func (r *rolloutGateResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m rolloutGateModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(r.judge(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return // not saved: the next plan creates the gate again, which judges again
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *rolloutGateResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m rolloutGateModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	diags, _ := r.refresh(ctx, &m)
	resp.Diagnostics.Append(diags...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// Update is never called with a change: every argument replaces the gate.
func (r *rolloutGateResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m rolloutGateModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// Delete forgets the gate; it changes nothing on any node.
func (r *rolloutGateResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {
}
