package spire

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

var (
	_ resource.Resource                     = &spireRegistrationResource{}
	_ resource.ResourceWithConfigure        = &spireRegistrationResource{}
	_ resource.ResourceWithModifyPlan       = &spireRegistrationResource{}
	_ resource.ResourceWithConfigValidators = &spireRegistrationResource{}
)

// NewSpireRegistrationResource is the fediversity_spire_registration resource.
func NewSpireRegistrationResource() resource.Resource { return &spireRegistrationResource{} }

type spireRegistrationResource struct{ cfg *kit.Config }

type spireRegistrationModel struct {
	ID             types.String    `tfsdk:"id"`
	Group          types.String    `tfsdk:"group"`
	Node           types.String    `tfsdk:"node"`
	TrustBundle    types.String    `tfsdk:"trust_bundle"`
	AgentDir       types.String    `tfsdk:"agent_dir"`
	TokenTTL       types.String    `tfsdk:"token_ttl"`
	HostID         types.String    `tfsdk:"host_id"`
	AliasID        types.String    `tfsdk:"alias_id"`
	SpireMachineID types.String    `tfsdk:"spire_machine_id"`
	SpireNode      *spireNodeModel `tfsdk:"spire_node"`
	kit.TransportBlocks
	Timeouts timeouts.Value `tfsdk:"timeouts"`
}

const (
	registrationTimeout = 3 * time.Minute
	defaultAgentDir     = "/var/lib/spire/agent"
	joinTokenFile       = "join-token"
	agentBundleFile     = "bundle.crt"
)

func (r *spireRegistrationResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_spire_registration"
}

func (r *spireRegistrationResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		MarkdownDescription: "SPIRE registration of one Incus node of a `tf-incus-operator` group: the host entry " +
			"`spiffe://fediversity/host/<group>-<node>` (for root on the node, selector `unix:uid:0`), parented to the node's alias " +
			"`spiffe://fediversity/incus/<group>/node-<node>`, and the credential the node's agent attests with.\n\n" +
			"The attestor is `join_token`: the provider reaches the node through its own transport already, so it can hand it a " +
			"one-time credential with no further trust anchor. The token is made on the spire node (`spire-server token generate`), " +
			"read into memory and written to `<agent_dir>/join-token` (mode 0600) on the node through stdin of the node's transport: " +
			"never an argument, never in state, a plan or a log. It is single use and dies after `token_ttl`. The trust bundle goes to " +
			"`<agent_dir>/bundle.crt`. The node's agent is to run with `join_token_file` and `trust_bundle_path` set to these files and " +
			"a persistent `data_dir`: after the first attestation it renews its own SVID. An agent that lost its data directory, or " +
			"was off longer than its SVID lives, needs a new token: replace this resource (`-replace`).\n\n" +
			"Destroy evicts the node's agent and deletes both entries, and removes the token file from the node when it answers.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, MarkdownDescription: "`<group>/<node>`.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"group": schema.StringAttribute{Required: true, Validators: kit.DNSLabelValidators, PlanModifiers: replace,
				MarkdownDescription: "The group of the node. Changing it replaces the registration."},
			"node": schema.StringAttribute{Required: true, Validators: kit.DNSLabelValidators, PlanModifiers: replace,
				MarkdownDescription: "The node's name. Changing it replaces the registration."},
			"trust_bundle": schema.StringAttribute{Required: true, Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
				MarkdownDescription: "The server's trust bundle (PEM), from `data.fediversity_spire_trust_bundle.<x>.pem`; written to the node. A change rewrites the file."},
			"agent_dir": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(defaultAgentDir), PlanModifiers: replace,
				Validators:          []validator.String{stringvalidator.RegexMatches(kit.AbsPathRE, "must be an absolute path")},
				MarkdownDescription: "Directory on the node for the token and the bundle. Default `/var/lib/spire/agent`. Changing it replaces the registration."},
			"token_ttl": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("10m"),
				MarkdownDescription: "How long the join token can be used (Go duration, 1m … 24h). Default `10m`. Changing it changes nothing until the next replacement."},
			"host_id":          schema.StringAttribute{Computed: true, MarkdownDescription: "The host entry's SPIFFE ID.", PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"alias_id":         schema.StringAttribute{Computed: true, MarkdownDescription: "The node alias' SPIFFE ID.", PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"spire_machine_id": schema.StringAttribute{Computed: true, MarkdownDescription: "The spire node's machine ID, read at plan time; a new one (the spire node was made again) replaces the registration."},
		},
		Blocks: map[string]schema.Block{
			spireNodeBlock: spireNodeBlockSchema(),
			"timeouts":     timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true, Read: true, Delete: true}),
		},
	}
	for name, b := range kit.TransportBlockSchemas("How the token and the bundle reach the node. Changing it changes nothing on the node until the next replacement.") {
		resp.Schema.Blocks[name] = b
	}
}

func (r *spireRegistrationResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	// The node's transport block in the node spec's words, as the node objects judge it.
	return []resource.ConfigValidator{kit.TransportSpecValidator{}}
}

func (r *spireRegistrationResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	kit.ConfigureObject(&r.cfg, req.ProviderData, "fediversity_spire_registration", &resp.Diagnostics)
}

func (m spireRegistrationModel) tokenTTL(diags *diag.Diagnostics) int {
	d, err := time.ParseDuration(m.TokenTTL.ValueString())
	if err != nil || d < time.Minute || d > 24*time.Hour {
		diags.AddAttributeError(path.Root("token_ttl"), "Invalid token TTL",
			fmt.Sprintf("token_ttl = %q must be a Go duration from 1m to 24h, e.g. \"10m\".", m.TokenTTL.ValueString()))
	}
	return int(d / time.Second)
}

func (r *spireRegistrationResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if r.cfg == nil {
		return
	}
	// On a destroy only the state is there: the spire node must still answer.
	var m spireRegistrationModel
	if req.Plan.Raw.IsNull() {
		resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	} else {
		resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	}
	if resp.Diagnostics.HasError() || !knownSpireNode(m.SpireNode) {
		return
	}
	what := fmt.Sprintf("The SPIRE registration of node %s of group %s", m.Node.ValueString(), m.Group.ValueString())
	sn, diags := resolveSpireNode(m.SpireNode, r.cfg)
	resp.Diagnostics.Append(diags...)
	if !req.Plan.Raw.IsNull() {
		m.tokenTTL(&resp.Diagnostics)
		if m.Given() > 0 && m.Known() {
			_, d := kit.ResolveTarget(m.TransportBlocks, r.cfg)
			resp.Diagnostics.Append(d...)
		} else if m.Given() == 0 {
			resp.Diagnostics.AddError("Exactly one transport block is required",
				what+": give the node "+kit.TransportChoice()+", through which its join token is delivered.")
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	srv, _, err := openSpireServer(ctx, sn, r.cfg)
	var machineID string
	if err == nil {
		if err = srv.Healthy(ctx); err == nil {
			machineID, err = srv.MachineID(ctx)
		}
	}
	if err != nil {
		spireUnreachable(&resp.Diagnostics, what, sn, err)
		return
	}
	if req.Plan.Raw.IsNull() {
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("spire_machine_id"), machineID)...)
	if !req.State.Raw.IsNull() {
		var state spireRegistrationModel
		resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
		if state.SpireMachineID.ValueString() != "" && state.SpireMachineID.ValueString() != machineID {
			resp.RequiresReplace = append(resp.RequiresReplace, path.Root("spire_machine_id"))
		}
	}
}

func (r *spireRegistrationResource) openNode(ctx context.Context, m spireRegistrationModel) (deploybody.Transport, diag.Diagnostics) {
	t, diags := kit.ResolveTarget(m.TransportBlocks, r.cfg)
	if diags.HasError() {
		return nil, diags
	}
	tr, err := kit.OpenTransport(ctx, m.Node.ValueString(), t, r.cfg)
	if err != nil {
		diags.AddError("Unable to reach node "+m.Node.ValueString(), err.Error())
	}
	return tr, diags
}

func (r *spireRegistrationResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m spireRegistrationModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := m.Timeouts.Create(ctx, registrationTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	group, node := m.Group.ValueString(), m.Node.ValueString()
	ttl := m.tokenTTL(&resp.Diagnostics)
	sn, diags := resolveSpireNode(m.SpireNode, r.cfg)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	tr, diags := r.openNode(ctx, m)
	if resp.Diagnostics.Append(diags...); resp.Diagnostics.HasError() {
		return
	}
	defer tr.Close()
	if err := tr.Reach(ctx); err != nil {
		resp.Diagnostics.AddError("Unable to reach node "+node, fmt.Sprintf("Node %s of group %s: %v. Nothing was registered.", node, group, err))
		return
	}
	srv, _, err := openSpireServer(ctx, sn, r.cfg)
	var machineID string
	if err == nil {
		machineID, err = srv.MachineID(ctx)
	}
	if err != nil {
		spireUnreachable(&resp.Diagnostics, "The SPIRE registration of node "+node, sn, err)
		return
	}
	token, err := srv.RegisterIncusNode(ctx, group, node, ttl)
	if err != nil {
		resp.Diagnostics.AddError("Unable to register node "+node+" with SPIRE", fmt.Sprintf("Node %s of group %s, phase register: %v", node, group, err))
		return
	}
	dir := strings.TrimRight(m.AgentDir.ValueString(), "/")
	err = spire.WriteFile(ctx, tr, node, dir+"/"+joinTokenFile, "0600", []byte(token))
	if err == nil {
		err = spire.WriteFile(ctx, tr, node, dir+"/"+agentBundleFile, "0644", []byte(m.TrustBundle.ValueString()))
	}
	if err != nil {
		// A node that never got its token cannot use the entries: take them back.
		rerr := srv.RetireIncusNode(ctx, group, node)
		resp.Diagnostics.AddError("Unable to deliver the join token to node "+node,
			fmt.Sprintf("Node %s of group %s, phase deliver: %v. The entries were deleted again (%v); apply again once the node answers.", node, group, err, errOrNone(rerr)))
		return
	}
	m.ID = types.StringValue(group + "/" + node)
	m.HostID = types.StringValue(spire.HostID(group, node))
	m.AliasID = types.StringValue(spire.IncusAliasID(group, node))
	m.SpireMachineID = types.StringValue(machineID)
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

func errOrNone(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// Update only rewrites the trust bundle on the node: everything else replaces.
func (r *spireRegistrationResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m, state spireRegistrationModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := m.Timeouts.Update(ctx, registrationTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	m.ID, m.HostID, m.AliasID = state.ID, state.HostID, state.AliasID
	if m.SpireMachineID.IsUnknown() {
		m.SpireMachineID = state.SpireMachineID
	}
	if !m.TrustBundle.Equal(state.TrustBundle) {
		tr, diags := r.openNode(ctx, m)
		if resp.Diagnostics.Append(diags...); resp.Diagnostics.HasError() {
			return
		}
		defer tr.Close()
		dir := strings.TrimRight(m.AgentDir.ValueString(), "/")
		if err := spire.WriteFile(ctx, tr, m.Node.ValueString(), dir+"/"+agentBundleFile, "0644", []byte(m.TrustBundle.ValueString())); err != nil {
			resp.Diagnostics.AddError("Unable to update the trust bundle on node "+m.Node.ValueString(), err.Error())
			return
		}
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

// Read checks both entries on the server (either missing: the registration is gone and
// the next apply makes it again) and the bundle file on the node. A node that does not
// answer keeps the state with a warning; a spire node that does not answer fails.
func (r *spireRegistrationResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m spireRegistrationModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || r.cfg == nil {
		return
	}
	limit, diags := m.Timeouts.Read(ctx, time.Minute)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	rdiags, gone := r.refresh(ctx, &m)
	resp.Diagnostics.Append(rdiags...)
	if gone != nil {
		resp.State.RemoveResource(ctx)
		return
	}
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

// refresh reads the entries of m on the server and the bundle file on the node (the
// provider's one refresh convention, see internal/provider/kit). gone: an entry is
// missing. A node that does not answer leaves m as it was, with a warning.
func (r *spireRegistrationResource) refresh(ctx context.Context, m *spireRegistrationModel) (diags diag.Diagnostics, gone error) {
	group, node := m.Group.ValueString(), m.Node.ValueString()
	sn, odiags := resolveSpireNode(m.SpireNode, r.cfg)
	if diags.Append(odiags...); odiags.HasError() {
		return diags, nil
	}
	srv, _, err := openSpireServer(ctx, sn, r.cfg)
	var reg spire.IncusRegistration
	if err == nil {
		reg, err = srv.ReadIncusNode(ctx, group, node)
	}
	if err != nil {
		spireUnreachable(&diags, "The SPIRE registration of node "+node, sn, err)
		return diags, nil
	}
	if !reg.AliasPresent || !reg.HostPresent {
		return diags, fmt.Errorf("the SPIRE entries of node %s are gone", node)
	}
	tr, odiags := r.openNode(ctx, *m)
	if odiags.HasError() {
		diags.AddWarning("Unable to read node "+node, odiags[0].Detail()+" The state is kept as it was.")
		return diags, nil
	}
	defer tr.Close()
	dir := strings.TrimRight(m.AgentDir.ValueString(), "/")
	res, err := tr.Run(ctx, []string{"cat", dir + "/" + agentBundleFile}, deploybody.RunOptions{})
	switch {
	case err != nil:
		diags.AddWarning("Unable to read node "+node, fmt.Sprintf("Node %s: %v. The state is kept as it was.", node, err))
		return diags, nil
	case res.ExitCode != 0:
		m.TrustBundle = types.StringValue("")
	default:
		m.TrustBundle = types.StringValue(string(res.Stdout))
	}
	return diags, nil
}

func (r *spireRegistrationResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m spireRegistrationModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := m.Timeouts.Delete(ctx, registrationTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	group, node := m.Group.ValueString(), m.Node.ValueString()
	sn, diags := resolveSpireNode(m.SpireNode, r.cfg)
	if resp.Diagnostics.Append(diags...); diags.HasError() {
		return
	}
	srv, _, err := openSpireServer(ctx, sn, r.cfg)
	if err == nil {
		err = srv.RetireIncusNode(ctx, group, node)
	}
	if err != nil {
		resp.Diagnostics.AddError("Unable to retire the SPIRE registration of node "+node,
			fmt.Sprintf("Node %s of group %s, phase retire: %v. Run the destroy again.", node, group, err))
		return
	}
	tr, diags := r.openNode(ctx, m)
	if diags.HasError() {
		resp.Diagnostics.AddWarning("Token file left on node "+node, diags[0].Detail())
		return
	}
	defer tr.Close()
	dir := strings.TrimRight(m.AgentDir.ValueString(), "/")
	if res, err := tr.Run(ctx, []string{"rm", "-f", dir + "/" + joinTokenFile}, deploybody.RunOptions{}); err != nil || res.ExitCode != 0 {
		resp.Diagnostics.AddWarning("Token file left on node "+node,
			fmt.Sprintf("The entries are deleted, but %s/%s could not be removed from node %s (%v); it is spent or expired, remove it by hand.", dir, joinTokenFile, node, errOrNone(err)))
	}
}
