package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/noderun"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

var (
	_ resource.Resource                     = &nodeSwitchResource{}
	_ resource.ResourceWithConfigure        = &nodeSwitchResource{}
	_ resource.ResourceWithImportState      = &nodeSwitchResource{}
	_ resource.ResourceWithModifyPlan       = &nodeSwitchResource{}
	_ resource.ResourceWithConfigValidators = &nodeSwitchResource{}
)

// NewNodeSwitchResource is the constructor of fediversity_node_switch.
func NewNodeSwitchResource() resource.Resource { return &nodeSwitchResource{} }

type nodeSwitchResource struct {
	cfg *kit.Config
}

// Default operation limits of the `timeouts` block.
const (
	defaultDeployTimeout = 30 * time.Minute
	defaultReadTimeout   = 2 * time.Minute
)

// Private state keys. Values are JSON strings.
const (
	// privateDeployed is the toplevel the last successful deploy switched the node to.
	// Read compares the node's running system with it to show drift.
	privateDeployed = "deployed_toplevel"
	// privateFailed is the toplevel of the last deploy that failed on update
	// (docs/design.md#failed-deploy):
	// the node runs it, but the state must not claim it, so the next plan still
	// deploys and fails again until the node converges.
	privateFailed = "failed_toplevel"
	// privateUnfinished is the toplevel of a deploy that was cut off after its switch
	// started (killed CLI or plugin, timeouts.update, a lost connection): the node may
	// run it, but no verdict was taken and the boot entry may not point at it. The
	// next plan deploys it again; privateUnfinishedWhy says what was interrupted.
	privateUnfinished    = "unfinished_toplevel"
	privateUnfinishedWhy = "unfinished_why"
)

type nodeSwitchModel struct {
	ID               types.String    `tfsdk:"id"`
	Node             types.String    `tfsdk:"node"`
	NodePlan         types.String    `tfsdk:"node_plan"`
	Toplevel         types.String    `tfsdk:"toplevel"`
	Deploy           types.String    `tfsdk:"deploy"`
	Build            *kit.BuildModel `tfsdk:"build"`
	SubmissionDigest types.String    `tfsdk:"submission_digest"`
	SubmissionFile   types.String    `tfsdk:"submission_file"`
	kit.TransportBlocks
	Snapshot    *snapshotModel    `tfsdk:"snapshot"`
	Strict      types.Bool        `tfsdk:"strict"`
	Activation  types.String      `tfsdk:"activation"`
	SecretChain types.List        `tfsdk:"secret_chain"`
	LoopBudgets types.Map         `tfsdk:"loop_budgets"`
	Timings     *kit.TimingsModel `tfsdk:"timings"`
	Timeouts    timeouts.Value    `tfsdk:"timeouts"`
	Generation  types.Int64       `tfsdk:"generation"`
	Verdict     types.Object      `tfsdk:"verdict"`
	Derivation  types.String      `tfsdk:"derivation"`
	Changes     types.Object      `tfsdk:"changes"`
	Reboots     types.String      `tfsdk:"reboots"`
	Checks      []checkBlockModel `tfsdk:"check"`
	Probes      []probeBlockModel `tfsdk:"probe"`
	// bootedParts is what Read found decides a reboot on the node (RebootFactsScript's
	// line; nil: not read), recorded in private state for the next plan (planReboot).
	bootedParts *string
	// lastGood is the node's last good system as Read found it ("" none, nil: not
	// read), recorded in private state for the next plan (planLastGood).
	lastGood *string
}

func (r *nodeSwitchResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_node_switch"
}

const redeploys = "Changing it redeploys the node (an unchanged closure copies nothing)."

func (r *nodeSwitchResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Deploys one NixOS node through the shared deploy body: build (or take a prebuilt toplevel), copy only the " +
			"store paths the node lacks, switch detached from the session, watch the units and give a structured verdict. " +
			"A failed unit fails this apply and the next one (strict mode); `strict = false` turns it into a warning. " +
			"Read asks the node what it runs, so an out-of-band switch shows as a planned change of `toplevel`. " +
			"Destroying the resource leaves the node running what it runs.\n\n" +
			"Import with `ssh://[user@]host[:port]/node[?known_hosts_file=…]` or `incus://remote/project/instance`.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The node name.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"node": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Name of the node (as in the submission's node plans). Changing it replaces the resource.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:          []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"node_plan": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The node plan as JSON, usually `data.fediversity_submission.x.node_plans[\"<node>\"]`. " +
					"It is written to a file named by its content (in `$XDG_CACHE_HOME/fediversity/plans`), whose absolute path is handed to the build as `--argstr planFile <path>`, so the build reads the plan and never evaluates it again; the same plan gives the same path every run. " + redeploys,
			},
			"toplevel": schema.StringAttribute{
				Optional: true,
				Computed: true,
				MarkdownDescription: "A prebuilt system toplevel (`/nix/store/…`) to deploy; conflicts with `build`. " +
					"After apply: the toplevel the node runs. When the node runs another system (an out-of-band switch), " +
					"the next plan shows this attribute changing back. " + redeploys,
			},
			"deploy": deploySchemaAttribute(),
			"strict": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(true),
				MarkdownDescription: "Strict mode (default `true`): a failed unit, or a unit the closure never spawned, fails the apply, and the next one. " +
					"`false` (lenient): the apply succeeds with a warning that names every such unit; the verdict keeps them all. " + redeploys,
			},
			"activation": schema.StringAttribute{
				Optional: true,
				Computed: true,
				Default:  stringdefault.StaticString(string(deploybody.ActivationSwitch)),
				MarkdownDescription: "How the node comes to run its new system. `switch` (the default): switch the running node. " +
					"`boot`: set the boot entry only; the node runs the new system at its next boot, and the verdict says that nothing needing it running was judged. " +
					"`reboot-if-needed`: reboot when a switch cannot apply the change (the new system's kernel, initrd or kernel modules differ from `/run/booted-system`'s, " +
					"its systemd differs, or a pre-switch check such as the switch inhibitors refuses the switch), else switch. `reboot`: always reboot. " +
					"A reboot runs under the node lock: boot entry, reboot, the node back within `timings.node_wait` over a new connection (the pinned host key), " +
					"`/run/booted-system` checked to be the new toplevel, then the full verdict on the booted system; `verdict.activation` says why it rebooted and how long the boot took. " +
					"Where the boot loader has one-shot entries (systemd's `bootctl`), the new system is booted once and the previous one stays the default until the verdict is ok; " +
					"a failed verdict points the boot entry back at the previous system, and a node that never comes back boots it at its next power cycle. `verdict.activation` says which. " +
					"With `switch`, a switch the inhibitors refuse fails as \"needs a reboot\", naming the inhibitor. Changing only this does not redeploy.",
			},
			"secret_chain": schema.ListAttribute{
				Optional:    true,
				ElementType: types.StringType,
				MarkdownDescription: "Units that bring the node's secrets up, in order. The deploy waits for them (bounded by `timings.chain_wait`) " +
					"before it snapshots unit states. " + redeploys,
			},
			"loop_budgets": schema.MapAttribute{
				Optional:    true,
				ElementType: types.Int64Type,
				MarkdownDescription: "Per-unit loop budgets (restarts a unit may take before its loop counts), overriding `X-LoopBudget=` in the unit file. " +
					"A budget delays the loop verdict, it never removes it. " + redeploys,
			},
			"generation": schema.Int64Attribute{
				Computed:            true,
				MarkdownDescription: "The system profile generation the deploy created or reused.",
			},
			"verdict": verdictSchemaAttribute("the last deploy"),
			"derivation": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "With a `build` block: the derivation (`.drv`) the plan evaluated the block to, through the evaluation cache. " +
					"When the Nix source changes (the same file and arguments, new content) the plan shows this attribute changing and redeploys the node; " +
					"an edit nix does not see (a comment) changes nothing. The apply builds exactly this derivation, and refuses when the source " +
					"changed since the plan, naming both derivations.",
			},
			"changes": changesSchemaAttribute(),
			"reboots": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "Why the planned deploy will reboot the node, as the plan can know it before approval, and a plan warning says it too: " +
					"`asked to` (`activation = \"reboot\"`); with `reboot-if-needed`, NixOS' own rule: the new toplevel's `reboot-triggers` (kernel, firmware, " +
					"kernel-params and the switch inhibitors) against the booted system's, each changed key as `<name> : <old> -> <new>` " +
					"(`reboot-triggers changed: kernel-params : quiet -> quiet,console=ttyS0`); for a system without that file, its `kernel`, `initrd` and " +
					"`kernel-modules` (`kernel, initrd, kernel-modules changed`); else a change of the `switch-inhibitors` the running system has " +
					"(`switch inhibitors changed: dbus-implementation : dbus -> broker`). The new toplevel is read in the deployer's store, the node as the " +
					"last refresh read it. A changed systemd needs no reboot (the switch re-executes it). `\"\"` when the deploy switches. " +
					"Unknown when the plan cannot know (the new toplevel is not built yet, or the node was not read). " +
					"A switch that another pre-switch check refuses reboots too, which only the switch can tell: `verdict.rebooted` and `verdict.activation` say what happened.",
			},
		},
		Blocks: withBlocks(checkBlocks(checksChangeNodeSwitch), map[string]schema.Block{
			"build":    kit.BuildBlockSchema(redeploys),
			"snapshot": snapshotBlockSchema(),
			"timings":  kit.NodeTimingsBlock(kit.TimingsNodeSwitch),
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true, Read: true, Delete: true}),
		}),
	}
	for name, b := range kit.TransportBlockSchemas(redeploys) {
		resp.Schema.Blocks[name] = b
	}
	for name, a := range kit.SubmissionCheckAttributes(redeploys) {
		resp.Schema.Attributes[name] = a
	}
}

func (r *nodeSwitchResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{
		// "Neither" is refused at plan time (kit.RequireTransport): see there why. Both
		// transports, a snapshot over SSH, toplevel with build and a toplevel that is
		// not a store path are the node spec's (specConfigValidator).
		specConfigValidator{args: switchConfigArgs},
		checksConfigValidator{},
	}
}

func (r *nodeSwitchResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	kit.ConfigureObject(&r.cfg, req.ProviderData, "fediversity_node_switch", &resp.Diagnostics)
}

// ModifyPlan plans a redeploy when Read found the node running another system than the
// one this resource deployed (build mode: `toplevel` is not in the configuration, so
// the framework alone would keep the drifted value).
//
// With a `build` block it also evaluates the block (planDerivation), so a changed Nix
// source plans a redeploy.
func (r *nodeSwitchResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	defer kit.KeepSubmissionOfUnchangedNode(req, resp)()
	if req.Plan.Raw.IsNull() {
		return
	}
	if kit.RequireTransport(ctx, req.Config, &resp.Diagnostics); resp.Diagnostics.HasError() {
		return
	}
	// Last, on the plan as the rest of ModifyPlan leaves it (and before the kept
	// submission digest is put back): whether the planned deploy reboots the node.
	defer r.planReboot(ctx, req, resp)
	if r.planLastGood(ctx, req, resp) {
		return // the node's last good system, not the configured one
	}
	var args types.Map
	if d := req.Plan.GetAttribute(ctx, path.Root("build").AtName("args"), &args); !d.HasError() {
		if resp.Diagnostics.Append(kit.CheckPerRunMap(ctx, args, path.Root("build").AtName("args"), r.cfg)...); resp.Diagnostics.HasError() {
			return
		}
	}
	if r.planDerivation(ctx, req, resp); resp.Diagnostics.HasError() || req.State.Raw.IsNull() {
		return
	}
	var cfgTop types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("toplevel"), &cfgTop)...)
	var stateTop types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("toplevel"), &stateTop)...)
	if resp.Diagnostics.HasError() {
		return
	}
	node := ""
	_ = req.State.GetAttribute(ctx, path.Root("node"), &node)
	redeploy := false
	if unfinished := privateString(ctx, req.Private, privateUnfinished); unfinished != "" {
		// An unfinished deploy is never taken for done: plan it again, also when the
		// configuration names the toplevel the node now runs.
		resp.Diagnostics.AddWarning(fmt.Sprintf("The last deploy to %s did not finish", node),
			fmt.Sprintf("%s\nNo verdict was taken for %s and its boot entry may not be set, so this plan deploys it again (the copy sends nothing the node has).",
				privateString(ctx, req.Private, privateUnfinishedWhy), unfinished))
		redeploy = true
	}
	deployed := privateString(ctx, req.Private, privateDeployed)
	if cfgTop.IsNull() && deployed != "" && stateTop.ValueString() != deployed {
		redeploy = true
	}
	if !redeploy {
		return
	}
	if cfgTop.IsNull() {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("toplevel"), types.StringUnknown())...)
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("generation"), types.Int64Unknown())...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("verdict"), types.ObjectUnknown(verdictAttrTypes))...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("changes"), types.ObjectUnknown(changesAttrTypes))...)
}

func (r *nodeSwitchResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan nodeSwitchModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Create(ctx, defaultDeployTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	out, res, diags, runErr := r.deploy(ctx, plan)
	resp.Diagnostics.Append(diags...)
	if out == nil {
		return // nothing reached the node: no state (the resource is not created)
	}
	// A failed deploy fails the next apply too (docs/design.md#failed-deploy): the
	// state is written even when the verdict fails the run. The framework
	// then records the resource as tainted, so the next apply replaces it (deploys
	// again) instead of claiming success.
	resp.Diagnostics.Append(resp.State.Set(ctx, out)...)
	if runErr == nil && res != nil {
		resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateDeployed, res.Toplevel)...)
	}
	resp.Diagnostics.Append(recordBootAfterDeploy(ctx, resp.Private, res, runErr)...)
	resp.Diagnostics.Append(recordLastGoodRead(ctx, resp.Private, nil)...)
}

func (r *nodeSwitchResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state nodeSwitchModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Update(ctx, defaultDeployTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	deployed := privateString(ctx, req.Private, privateDeployed)
	unfinished := privateString(ctx, req.Private, privateUnfinished)
	if unfinished == "" && !needsDeploy(plan, state, deployed) {
		// Only settings that change no node (timings, timeouts, snapshot keep) changed.
		plan.ID = state.ID
		plan.Toplevel = state.Toplevel
		plan.Generation = state.Generation
		plan.Verdict = state.Verdict
		plan.Changes = state.Changes
		plan.Reboots = state.Reboots
		resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
		return
	}

	out, res, diags, runErr := r.deploy(ctx, plan)
	resp.Diagnostics.Append(diags...)
	resp.Diagnostics.Append(recordBootAfterDeploy(ctx, resp.Private, res, runErr)...)
	// A deploy may have recorded another last good system: the next refresh reads it.
	resp.Diagnostics.Append(recordLastGoodRead(ctx, resp.Private, nil)...)
	if runErr != nil || out == nil {
		// The same on update (docs/design.md#failed-deploy): the prior state stays (the framework starts from it), so
		// the next plan deploys again. Remember what the node now runs so Read does not
		// mistake it for an out-of-band change that matches the configuration.
		if errors.Is(runErr, errRestored) {
			// The node is back on its rollback point: what it ran after the switch and
			// the cut-off switch are gone with the restore. Read says what it runs now.
			resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateFailed, "")...)
			resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateUnfinished, "")...)
			resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateUnfinishedWhy, "")...)
			return
		}
		if res != nil && res.RunningSystem != "" && res.RunningSystem != state.Toplevel.ValueString() {
			resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateFailed, res.RunningSystem)...)
		}
		if res != nil && switchStarted(res) && res.Verdict == nil && !errors.Is(runErr, deploybody.ErrNeedsReboot) {
			// Cut off after the switch started and before a verdict: the state keeps
			// the prior system and records this one as not finished. (A switch
			// switch-to-configuration refused changed nothing: nothing is unfinished.)
			why := fmt.Sprintf("The apply that deployed %s stopped in phase %s after the switch started: %v.", res.Toplevel, lastPhase(res), runErr)
			resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateUnfinished, res.Toplevel)...)
			resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateUnfinishedWhy, why)...)
		}
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, out)...)
	resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateDeployed, res.Toplevel)...)
	resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateFailed, "")...)
	resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateUnfinished, "")...)
	resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateUnfinishedWhy, "")...)
}

// switchStarted tells whether a run got as far as starting the switch.
func switchStarted(res *deploybody.Result) bool {
	for _, p := range res.Phases {
		if p.Name == deploybody.PhaseSwitch && p.Note != "" && !strings.HasPrefix(p.Note, "skipped") {
			return true
		}
	}
	return false
}

func lastPhase(res *deploybody.Result) string {
	if len(res.Phases) == 0 {
		return "(none)"
	}
	return res.Phases[len(res.Phases)-1].Name
}

// needsDeploy tells whether an update changes what the node should run (or must be
// retried), as opposed to settings that change no node (timings, timeouts, checks).
func needsDeploy(plan, state nodeSwitchModel, deployed string) bool {
	if plan.Toplevel.IsUnknown() && plan.Build == nil {
		return true
	}
	if !plan.Toplevel.IsUnknown() && !plan.Toplevel.Equal(state.Toplevel) {
		return true
	}
	if deployed != "" && state.Toplevel.ValueString() != deployed {
		return true // drift: the node runs something else
	}
	if state.Verdict.IsNull() {
		return true // imported, or never judged
	}
	if !plan.Strict.Equal(state.Strict) || !plan.SecretChain.Equal(state.SecretChain) || !plan.LoopBudgets.Equal(state.LoopBudgets) ||
		!sameBlock(&plan.TransportBlocks, &state.TransportBlocks) {
		return true
	}
	if deploysLastGood(plan.Deploy) {
		// What the configured system is made of does not change the last good one.
		return false
	}
	if !plan.NodePlan.Equal(state.NodePlan) || !plan.Derivation.Equal(state.Derivation) || !plan.SubmissionDigest.Equal(state.SubmissionDigest) ||
		!plan.SubmissionFile.Equal(state.SubmissionFile) || !sameBlock(plan.Build, state.Build) {
		return true
	}
	return false
}

func (r *nodeSwitchResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state nodeSwitchModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := state.Timeouts.Read(ctx, defaultReadTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	failed := privateString(ctx, req.Private, privateFailed)
	imported := privateString(ctx, req.Private, privateDeployed) == "" && state.Verdict.IsNull()
	var interrupted *interruptedDeploy
	rdiags, _ := r.refresh(ctx, &state, failed, nil, &interrupted)
	resp.Diagnostics.Append(rdiags...)
	switch {
	case interrupted != nil && interrupted.failed:
		resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateFailed, interrupted.toplevel)...)
	case interrupted != nil:
		resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateUnfinished, interrupted.toplevel)...)
		resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateUnfinishedWhy, interrupted.why)...)
	}
	if state.bootedParts != nil {
		resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateBootedParts, *state.bootedParts)...)
	}
	resp.Diagnostics.Append(recordLastGoodRead(ctx, resp.Private, state.lastGood)...)
	if imported && !state.Toplevel.IsNull() {
		// An imported node: what it runs now is what this resource "deployed".
		resp.Diagnostics.Append(setPrivateString(ctx, resp.Private, privateDeployed, state.Toplevel.ValueString())...)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// refresh is the one place that fills a model with what the node runs (the provider's
// one refresh convention, see internal/provider/kit). A node never goes away from this
// resource's view (an unreachable one keeps its state), so gone is always nil.
//
// After a deploy (res set) it records the result: the toplevel the node runs, the
// generation and the verdict. Without a result (Read) it asks the node which system it
// runs and records it in Toplevel, so a system switched out of band shows as a planned
// change. The toplevel of a deploy that failed on update (failedToplevel) is not
// recorded: the state must keep saying the node is not where the configuration wants it
// (docs/design.md#failed-deploy). An unreachable node keeps its state and gives a warning, naming the node.
func (r *nodeSwitchResource) refresh(ctx context.Context, m *nodeSwitchModel, failedToplevel string, res *deploybody.Result, interrupted **interruptedDeploy) (diags diag.Diagnostics, gone error) {
	fillSettingDefaults(m)
	if res != nil {
		return recordDeployResult(m, res), nil
	}
	settleUnreadAttributes(m)
	q := driftQuestion(m, failedToplevel)
	ns, read, diags := r.readRunningSystem(ctx, m, q, interrupted)
	if !read {
		return diags, nil
	}
	recordBootFacts(m, ns)
	diags.Append(judgeRunningSystem(ctx, m, ns, q, interrupted)...)
	return diags, nil
}

// driftQuestion is what the state knows of the node before Read reads it: the system
// it names ("" for an import, which takes the node as it finds it), the system of a
// deploy that failed on update, and how the state's system was activated.
func driftQuestion(m *nodeSwitchModel, failedToplevel string) deploybody.DriftQuestion {
	known := m.Toplevel.ValueString()
	return deploybody.DriftQuestion{Node: m.Node.ValueString(), Known: known, Failed: failedToplevel,
		Activation: deploybody.Activation(m.Activation.ValueString()), Adopting: m.Toplevel.IsNull() || known == ""}
}

// fillSettingDefaults gives the resource's id, and the settings a state from before
// them lacks, their values.
func fillSettingDefaults(m *nodeSwitchModel) {
	m.ID = types.StringValue(m.Node.ValueString())
	if m.Strict.IsNull() || m.Strict.IsUnknown() {
		m.Strict = types.BoolValue(true)
	}
	if m.Activation.IsNull() || m.Activation.IsUnknown() {
		m.Activation = types.StringValue(string(deploybody.ActivationSwitch))
	}
}

// recordDeployResult records what a deploy found: the toplevel the node runs (the one
// it confirmed running over the one asked for), the generation, the verdict, the
// changes and, when the plan could not know, why it rebooted.
func recordDeployResult(m *nodeSwitchModel, res *deploybody.Result) (diags diag.Diagnostics) {
	if res.Toplevel != "" {
		m.Toplevel = types.StringValue(res.Toplevel)
	}
	if res.RunningSystem != "" && res.Confirmed {
		m.Toplevel = types.StringValue(res.RunningSystem)
	}
	if m.Toplevel.IsUnknown() {
		m.Toplevel = types.StringNull()
	}
	m.Generation = types.Int64Null()
	if res.Generation > 0 {
		m.Generation = types.Int64Value(int64(res.Generation))
	}
	v, vdiags := verdictValue(res)
	diags.Append(vdiags...)
	m.Verdict = v
	m.Changes = changesValue(res.Changes)
	if m.Reboots.IsUnknown() {
		// The plan could not know: the deploy says.
		m.Reboots = types.StringValue("")
		if res.Reboot != nil {
			m.Reboots = types.StringValue(res.Reboot.Why)
		}
	}
	return diags
}

// settleUnreadAttributes gives Read's computed attributes a known value: a read
// without a deploy learns none of them from the node.
func settleUnreadAttributes(m *nodeSwitchModel) {
	if m.Reboots.IsNull() || m.Reboots.IsUnknown() {
		m.Reboots = types.StringValue("") // an imported node, or a state from before `reboots`
	}
	if m.Verdict.IsUnknown() {
		m.Verdict = types.ObjectNull(verdictAttrTypes)
	}
	if m.Changes.IsUnknown() || m.Changes.IsNull() {
		m.Changes = types.ObjectNull(changesAttrTypes)
	}
	if m.Generation.IsUnknown() {
		m.Generation = types.Int64Null()
	}
}

// readRunningSystem asks the node which system it runs and boots. read is false when
// the state must be kept as it is: the transport blocks in state are incomplete, the
// node did not answer (a restore cut off in the middle is then an unfinished deploy),
// or it runs what an unfinished restore has not put back yet.
func (r *nodeSwitchResource) readRunningSystem(ctx context.Context, m *nodeSwitchModel, q deploybody.DriftQuestion, interrupted **interruptedDeploy) (ns nodeSystem, read bool, diags diag.Diagnostics) {
	node := m.Node.ValueString()
	target, tdiags := kit.ResolveTarget(m.TransportBlocks, r.cfg)
	if tdiags.HasError() {
		diags.AddWarning(fmt.Sprintf("Cannot read node %s", node),
			"The transport blocks in state are incomplete, so the running system was not read; the state is kept. "+
				kit.SummarizeDiags(tdiags))
		return ns, false, diags
	}
	// The verdict record is read only when Read would adopt the running system
	// (q.NeedsRecord). An Incus node that does not run what the state says may run a
	// state a cut-off restore kept aside: its restore's journal is looked for then.
	ns, err := readNodeSystem(ctx, target, r.cfg, q)
	var pending *unfinishedRestoreError
	if errors.As(err, &pending) && interrupted != nil && !m.Toplevel.IsNull() {
		// A restore cut off in the middle is an unfinished deploy: the next plan
		// deploys again, whose first step finishes the restore, even when the
		// configuration names the system the state holds.
		*interrupted = &interruptedDeploy{toplevel: m.Toplevel.ValueString(), why: pending.fact}
	}
	if err != nil {
		diags.AddWarning(fmt.Sprintf("Node %s did not answer; state kept", node),
			fmt.Sprintf("Reading which system the node runs failed: %v.\nThe state is kept unchanged, so the plan cannot show whether the node drifted. "+
				"Bring the node back (or fix the transport) and run plan again; removing it from the configuration forgets it.", err))
		return ns, false, diags
	}
	if ns.unfinishedRestore != "" && interrupted != nil && !m.Toplevel.IsNull() {
		// The instance answers, but runs what an unfinished restore has not put back yet
		// (one cut off before its stop): the next plan deploys, whose first step
		// finishes the restore.
		*interrupted = &interruptedDeploy{toplevel: m.Toplevel.ValueString(), why: ns.unfinishedRestore}
		return ns, false, diags
	}
	return ns, true, diags
}

// recordBootFacts keeps, for the plan, the boot parts the node booted and the last
// good system it records, when they were read.
func recordBootFacts(m *nodeSwitchModel, ns nodeSystem) {
	booted := ns.booted.String()
	if !ns.bootedRead {
		booted = ""
	}
	m.bootedParts = &booted
	if ns.lastGoodRead {
		m.lastGood = &ns.lastGood
	}
}

// judgeRunningSystem records the drift decision (deploybody.JudgeDrift, the one the
// command's resume asks too) in m and in the mark for the next plan. The state's
// system, an activation = "boot" system waiting for its boot, and a system whose deploy
// failed are kept as they are; a system the node runs but does not boot is an
// unfinished switch, never adopted; any other system the node runs and boots is adopted
// (imported: the state named none yet).
func judgeRunningSystem(ctx context.Context, m *nodeSwitchModel, ns nodeSystem, q deploybody.DriftQuestion, interrupted **interruptedDeploy) (diags diag.Diagnostics) {
	d := deploybody.JudgeDrift(q, ns.NodeSystem)
	switch d.Decision {
	case deploybody.DriftNone, deploybody.DriftAwaitingBoot:
		return diags
	case deploybody.DriftFailedDeploy:
		diags.AddWarning(fmt.Sprintf("Node %s runs a system whose deploy failed", q.Node),
			fmt.Sprintf("%s The state keeps %s, so the next apply deploys and judges it again.", d.Fact, q.Known))
		return diags
	case deploybody.DriftUnfinishedSwitch:
		// A deploy cut off after its switch started, never a finished change: not adopted.
		if interrupted != nil {
			*interrupted = &interruptedDeploy{toplevel: d.Running, why: d.Fact}
		}
		tflog.Warn(ctx, "node runs a system its boot entry does not point at; not adopted", map[string]any{"node": q.Node, "running": d.Running, "profile": d.Profile})
		return diags
	}
	if !q.Adopting {
		tflog.Info(ctx, "node runs another system than the state says (drift)", map[string]any{"node": q.Node, "state": q.Known, "running": d.Running})
	}
	unjudged, failed, adiags := adoptRunningSystem(q.Node, m, d, ns.RecordErr, q.Adopting)
	diags.Append(adiags...)
	if interrupted != nil && unjudged != nil {
		*interrupted = unjudged
	}
	if interrupted != nil && failed != "" {
		*interrupted = &interruptedDeploy{toplevel: failed, failed: true}
	}
	return diags
}

// interruptedDeploy is a deploy Read found cut off: the node runs toplevel, its boot
// entry points elsewhere.
type interruptedDeploy struct {
	toplevel, why string
	// failed: the node runs and boots toplevel, whose deploy's verdict failed it; the
	// next plan deploys again (privateFailed), as after a failed update.
	failed bool
}

func (r *nodeSwitchResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	// Forgetting a node does not change it: it keeps running what it runs. There is
	// nothing sane to switch it to.
	var state nodeSwitchModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	tflog.Info(ctx, "fediversity_node_switch removed from state; the node keeps its system", map[string]any{"node": state.Node.ValueString()})
}

func (r *nodeSwitchResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	addr, err := parseImportAddress(req.ID)
	if err != nil {
		resp.Diagnostics.AddError("Unable to import fediversity_node_switch", err.Error())
		return
	}
	m := nodeSwitchModel{
		ID:               types.StringValue(addr.Node),
		Node:             types.StringValue(addr.Node),
		NodePlan:         types.StringNull(),
		Toplevel:         types.StringNull(),
		Deploy:           types.StringNull(),
		SubmissionDigest: types.StringNull(),
		SubmissionFile:   types.StringNull(),
		Strict:           types.BoolValue(true),
		Activation:       types.StringValue(string(deploybody.ActivationSwitch)),
		SecretChain:      types.ListNull(types.StringType),
		LoopBudgets:      types.MapNull(types.Int64Type),
		Timeouts:         timeouts.Value{Object: types.ObjectNull(timeoutsAttrTypes)},
		Generation:       types.Int64Null(),
		Verdict:          types.ObjectNull(verdictAttrTypes),
		Derivation:       types.StringNull(),
		Changes:          types.ObjectNull(changesAttrTypes),
	}
	m.TransportBlocks = kit.TransportBlocksFromTarget(addr.Target)
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

// deploy runs the deploy body for the planned model. out is the model to store (nil
// when the run did not reach the node's state at all, e.g. a refused submission); res
// is the body's result; runErr is the run's error (diags already say it).
func (r *nodeSwitchResource) deploy(ctx context.Context, plan nodeSwitchModel) (out *nodeSwitchModel, res *deploybody.Result, diags diag.Diagnostics, runErr error) {
	node := plan.Node.ValueString()

	// The submission must be the one the plan was made from.
	if sdiags, err := kit.CheckSubmission(plan.SubmissionDigest, plan.SubmissionFile, verbDeploy, node); err != nil {
		return nil, nil, sdiags, err
	}
	spec, target, opts, odiags := r.nodeOptions(ctx, plan)
	diags.Append(odiags...)
	if diags.HasError() {
		return nil, nil, diags, errors.New("invalid configuration")
	}
	var prepare func(context.Context, deploybody.Transport, *deploybody.Options) (*deploybody.Result, error)
	if deploysLastGood(plan.Deploy) {
		// The node's last good system, read over the deploy's connection: nothing is built.
		prepare = lastGoodTarget(plan.Toplevel)
	} else if plan.Build != nil {
		buildSpec, cleanup, bdiags := buildSpec(plan)
		diags.Append(bdiags...)
		if diags.HasError() {
			return nil, nil, diags, errors.New("invalid build")
		}
		defer cleanup()
		build, bdiags := kit.PlannedBuild(ctx, kit.EvaluatorFor(r.cfg), node, buildSpec, plan.NodePlan.ValueString(), plan.Derivation.ValueString())
		diags.Append(bdiags...)
		if diags.HasError() {
			return nil, nil, diags, errors.New("refused build")
		}
		opts.Build = build
	} else if plan.Toplevel.IsNull() || plan.Toplevel.IsUnknown() || plan.Toplevel.ValueString() == "" {
		diags.AddError(fmt.Sprintf("Nothing to deploy to %s", node),
			"Set `toplevel` to a prebuilt system closure, or give a `build` block that builds one.")
		return nil, nil, diags, errors.New("nothing to deploy")
	} else {
		opts.Toplevel = plan.Toplevel.ValueString()
	}

	run := nodeRun{verb: verbDeploy, what: "Deploy", target: target,
		run: noderun.Run{Node: node, Options: opts, Body: deploybody.Deploy, Prepare: prepare,
			SnapshotKeep: spec.SnapshotKeep(), InterruptedRestore: spec.InterruptedRestore()}}
	outcome, rdiags := run.do(ctx, r.cfg)
	diags.Append(rdiags...)
	res, runErr = outcome.Result, outcome.Err
	if res == nil || outcome.Restored {
		return nil, res, diags, runErr
	}
	m := plan
	rdiags, _ = r.refresh(ctx, &m, "", res, nil)
	diags.Append(rdiags...)
	diags.Append(runDiagnostics(verbDeploy, node, res, runErr)...)
	if runErr != nil && res.Verdict == nil {
		// The run stopped before any verdict (build, copy or switch failed): on create
		// there is nothing worth storing.
		return nil, res, diags, runErr
	}
	return &m, res, diags, runErr
}

// nodeOptions decodes the model into one whole node spec (validated once) and
// resolves its target and the deploy body's options.
func (r *nodeSwitchResource) nodeOptions(ctx context.Context, plan nodeSwitchModel) (nodespec.Spec, kit.TransportTarget, deploybody.Options, diag.Diagnostics) {
	if diags := kit.OneTransport(plan.TransportBlocks); diags.HasError() {
		return nodespec.Spec{}, kit.TransportTarget{}, deploybody.Options{}, diags
	}
	spec, target, o, diags := nodeOptions(ctx, r.cfg, switchArgs(plan))
	o.LocalStore = nixstore.DeployerStore{}
	return spec, target, o, diags
}

// switchArgs are the node switch's arguments that make its node spec.
// switchConfigArgs is switchArgs of a configuration, for its plan-time validation.
func switchConfigArgs(ctx context.Context, config tfsdk.Config) (nodeArgs, bool) {
	var m nodeSwitchModel
	if config.Get(ctx, &m).HasError() {
		return nodeArgs{}, false
	}
	return switchArgs(m), true
}

func switchArgs(m nodeSwitchModel) nodeArgs {
	a := nodeArgs{node: m.Node.ValueString(), transport: m.TransportBlocks, snapshot: m.Snapshot, strict: m.Strict, activation: m.Activation,
		chain: m.SecretChain, budgets: m.LoopBudgets, timings: m.Timings, checks: m.Checks, probes: m.Probes, toplevel: m.Toplevel, build: m.Build}
	if deploysLastGood(m.Deploy) {
		// The plan set toplevel to the node's last good system; the build block may stay
		// and is not built.
		a.build = nil
	}
	return a
}
