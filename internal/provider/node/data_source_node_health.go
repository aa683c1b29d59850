package node

import (
	"context"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/datasource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/noderun"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// fediversity_node_health: the verdict pass of fediversity_verdict, run read-only
// (deploybody.VerdictReadOnly) at every read of the data source, so that a `check {}`
// block re-judges the node at every plan and warns when it is unhealthy
// (docs/design.md#node-health).

var (
	_ datasource.DataSource                     = &nodeHealthDataSource{}
	_ datasource.DataSourceWithConfigure        = &nodeHealthDataSource{}
	_ datasource.DataSourceWithConfigValidators = &nodeHealthDataSource{}
)

// NewNodeHealthDataSource is the constructor of data source fediversity_node_health.
func NewNodeHealthDataSource() datasource.DataSource { return &nodeHealthDataSource{} }

type nodeHealthDataSource struct {
	cfg *kit.Config
}

// defaultNodeHealthTimeout bounds one pass: a plan waits for it.
const defaultNodeHealthTimeout = 5 * time.Minute

type nodeHealthModel struct {
	Node     types.String `tfsdk:"node"`
	Toplevel types.String `tfsdk:"toplevel"`
	kit.TransportBlocks
	SecretChain types.List        `tfsdk:"secret_chain"`
	LoopBudgets types.Map         `tfsdk:"loop_budgets"`
	Timings     *kit.TimingsModel `tfsdk:"timings"`
	Timeouts    timeouts.Value    `tfsdk:"timeouts"`
	OK          types.Bool        `tfsdk:"ok"`
	Reasons     types.List        `tfsdk:"reasons"`
	Failed      types.List        `tfsdk:"failed"`
	Unreachable types.Bool        `tfsdk:"unreachable"`
	Message     types.String      `tfsdk:"message"`
	Judged      types.String      `tfsdk:"judged_toplevel"`
	Verdict     types.Object      `tfsdk:"verdict"`
}

func (d *nodeHealthDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_node_health"
}

// everyRead is what the arguments' documentation says about when the pass runs.
const everyRead = "The pass runs at every read of the data source."

func (d *nodeHealthDataSource) Schema(ctx context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Judges a running node at every plan, for `check {}` blocks: the verdict-only pass of `fediversity_verdict` " +
			"(the same phases, timings and verdict), but read-only: it never builds, copies, switches or restarts a unit, and it holds " +
			"the node's lock only while it judges (so it never judges a node in the middle of a deploy). " +
			"An unhealthy node is data, not an error: `ok` is false and `reasons`, `failed` and `message` name the units, so that " +
			"a `check` block's `assert` turns it into a warning and `plan` still succeeds.\n\n" +
			"**Cost:** one verdict pass per node at every plan, and one more at every apply (a check's data source is read in both): " +
			"a settle plus a watch (about 15 s with the default timings) plus the round trips, the nodes judged in parallel up to " +
			"`-parallelism`. It is opt-in: only nodes you give a `fediversity_node_health` are judged. Shorten `timings.settle` and " +
			"`timings.watch` to make it cheaper; a shorter watch sees fewer restart loops.\n\n" +
			"A node that answers none of the samples within `timings.node_wait` is unhealthy too (`unreachable`). A node the pass cannot " +
			"judge at all (a refused host key or credentials, a secret chain that does not come up) is an error of the data source: " +
			"inside a `check` block Terraform and OpenTofu report it as a warning, outside one it fails the plan.",
		Attributes: map[string]schema.Attribute{
			"node": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Name of the node, in messages.",
				Validators:          []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"toplevel": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The system closure whose wanted units count (usually `fediversity_node_switch.x.toplevel`). " +
					"Default: the system the node runs. It must be in the deployer's store; a node that runs another system is unhealthy, naming both.",
			},
			"secret_chain": schema.ListAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "The ordered units that bring the node's secrets up; the pass waits for them first (bounded by `timings.chain_wait`).",
			},
			"loop_budgets": schema.MapAttribute{
				Optional: true, ElementType: types.Int64Type,
				MarkdownDescription: "Per-unit loop budgets overriding `X-LoopBudget=`. A unit still looping past its budget makes the node unhealthy.",
			},
			"ok": schema.BoolAttribute{
				Computed:            true,
				MarkdownDescription: "True when the node is healthy: the pass gives no reason (a strict verdict that passes). The `condition` of a check's `assert`.",
			},
			"reasons": schema.ListAttribute{
				Computed: true, ElementType: types.StringType,
				MarkdownDescription: "Why the node is unhealthy, one reason per failed unit, closure fault, loop past its budget or unread source. Empty when `ok`.",
			},
			"failed": schema.ListAttribute{
				Computed: true, ElementType: types.StringType,
				MarkdownDescription: "The failed units the judged system defines (`verdict.failed`); null when the unit states were unread.",
			},
			"unreachable": schema.BoolAttribute{
				Computed:            true,
				MarkdownDescription: "The node answered none of the samples.",
			},
			"message": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "The verdict in one line, naming the node and the units (`Unit x.service failed on web01. Node web01: unit x.service failed (…).`); " +
					"empty when `ok`. Made for a check's `error_message`.",
			},
			"judged_toplevel": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The closure whose wanted units were judged (the given `toplevel`, or what the node ran).",
			},
			"verdict": kit.DataSourceAttribute(verdictSchemaAttribute("the read-only pass")),
		},
		Blocks: map[string]schema.Block{
			"timings":  kit.DataSourceBlock(kit.NodeTimingsBlock(kit.TimingsNodeHealth)),
			"timeouts": timeouts.Block(ctx),
		},
	}
	for name, b := range kit.DataSourceBlocks(kit.TransportBlockSchemas(everyRead)) {
		resp.Schema.Blocks[name] = b
	}
}

func (d *nodeHealthDataSource) ConfigValidators(context.Context) []datasource.ConfigValidator {
	// "Neither" is refused at the read (kit.RequireTransport). Both transports, a toplevel
	// that is not a store path and every other node setting are the node spec's
	// (specConfigValidator), in the command's words.
	return []datasource.ConfigValidator{specConfigValidator{args: nodeHealthConfigArgs}}
}

// nodeHealthArgs are the read-only pass's node arguments. Strict: any reason makes the
// node unhealthy (the verdict's failure is data here, never the data source's error).
func nodeHealthArgs(m nodeHealthModel) nodeArgs {
	return nodeArgs{node: m.Node.ValueString(), transport: m.TransportBlocks, toplevel: m.Toplevel,
		strict: types.BoolValue(true), chain: m.SecretChain, budgets: m.LoopBudgets, timings: m.Timings}
}

// nodeHealthConfigArgs is nodeHealthArgs of a configuration, for its validation.
func nodeHealthConfigArgs(ctx context.Context, config tfsdk.Config) (nodeArgs, bool) {
	var m nodeHealthModel
	if config.Get(ctx, &m).HasError() {
		return nodeArgs{}, false
	}
	return nodeHealthArgs(m), true
}

func (d *nodeHealthDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	kit.ConfigureObject(&d.cfg, req.ProviderData, "fediversity_node_health", &resp.Diagnostics)
}

func (d *nodeHealthDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m nodeHealthModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	kit.RequireTransport(ctx, req.Config, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := m.Timeouts.Read(ctx, defaultNodeHealthTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	res, diags := d.pass(ctx, &m)
	resp.Diagnostics.Append(diags...)
	if res == nil || resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(m.fill(res)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

// pass runs the read-only verdict pass. It returns the result when a verdict was
// reached, healthy or not; otherwise an error diagnostic says why none was.
func (d *nodeHealthDataSource) pass(ctx context.Context, m *nodeHealthModel) (*deploybody.Result, diag.Diagnostics) {
	node := m.Node.ValueString()
	diags := kit.OneTransport(m.TransportBlocks)
	if diags.HasError() {
		return nil, diags
	}
	_, target, opts, odiags := nodeOptions(ctx, d.cfg, nodeHealthArgs(*m))
	diags.Append(odiags...)
	if diags.HasError() {
		return nil, diags
	}
	run := nodeRun{verb: verbJudge, what: "Health check", target: target, run: noderun.Run{Node: node, Options: opts, Body: deploybody.VerdictReadOnly}}
	outcome, rdiags := run.do(ctx, d.cfg)
	diags.Append(rdiags...)
	if outcome.Result == nil || diags.HasError() {
		return nil, diags
	}
	if outcome.Result.Verdict == nil {
		diags.Append(engineFailure(verbJudge, node, runError(outcome.Result, outcome.Err)))
		return nil, diags
	}
	return outcome.Result, diags
}

// fill sets the computed attributes from a result that holds a verdict.
func (m *nodeHealthModel) fill(res *deploybody.Result) diag.Diagnostics {
	v := res.Verdict
	verdict, diags := verdictValue(res)
	m.Verdict = verdict
	m.OK = types.BoolValue(v.OK)
	m.Unreachable = types.BoolValue(v.Unreachable)
	m.Reasons = listOrNull(v.Reasons, false)
	m.Failed = types.ListNull(types.StringType)
	if f, ok := verdict.Attributes()["failed"].(types.List); ok {
		m.Failed = f
	}
	m.Message = types.StringValue(verdictMessage(m.Node.ValueString(), v))
	judged := res.Toplevel
	if judged == "" {
		judged = res.RunningSystem
	}
	m.Judged = kit.StringOrNull(judged)
	return diags
}
