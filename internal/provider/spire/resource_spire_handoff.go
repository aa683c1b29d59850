package spire

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
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

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

var (
	_ resource.Resource               = &spireHandoffResource{}
	_ resource.ResourceWithConfigure  = &spireHandoffResource{}
	_ resource.ResourceWithModifyPlan = &spireHandoffResource{}
)

// NewSpireHandoffResource is the fediversity_spire_handoff resource.
func NewSpireHandoffResource() resource.Resource { return &spireHandoffResource{} }

type spireHandoffResource struct{ cfg *kit.Config }

type spireHandoffModel struct {
	ID                  types.String        `tfsdk:"id"`
	Namespace           types.String        `tfsdk:"namespace"`
	Group               types.String        `tfsdk:"group"`
	Nodes               types.Set           `tfsdk:"nodes"`
	Roster              map[string][]string `tfsdk:"roster"`
	TrustBundle         types.String        `tfsdk:"trust_bundle"`
	APIServer           types.String        `tfsdk:"api_server"`
	TokenLifetime       types.String        `tfsdk:"token_lifetime"`
	SpireMachineID      types.String        `tfsdk:"spire_machine_id"`
	KubeConfigExpiresAt types.String        `tfsdk:"kubeconfig_expires_at"`
	AliasIDs            types.Map           `tfsdk:"alias_ids"`
	HostIDs             types.Map           `tfsdk:"host_ids"`
	SpireNode           *spireNodeModel     `tfsdk:"spire_node"`
	Timeouts            timeouts.Value      `tfsdk:"timeouts"`
}

const (
	handoffTimeout       = 5 * time.Minute
	defaultTokenLifetime = "2160h" // 90 days
	minimumTokenLifetime = time.Hour
	spiffeProvider       = "spiffe"
)

func (r *spireHandoffResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_spire_handoff"
}

func (r *spireHandoffResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The SPIRE hand-off of one namespace of the `k8s-operator` method: what the spire node needs so that the " +
			"SPIRE agent of each node's pod attests with `k8s_psat`, and what the pods need to trust the server.\n\n" +
			"In the cluster it makes the service account `spire-server` of the namespace, bound to a ClusterRole that may create " +
			"TokenReviews and read pods and nodes, and asks the TokenRequest API for a token of it. On the spire node, over SSH, it " +
			"writes a kubeconfig of the cluster with that token (through stdin: the token is never an argument, never in state, " +
			"a plan or a log), one drop-file per node, and from them one k8s_psat cluster per node, `<namespace>.<node>`, " +
			"that allows only the service account `node-<node>` (k8s_psat names an agent after its cluster and kubelet node, so " +
			"two nodes of a namespace on one kubelet node stay two agents), which spire-server reloads. Through the spire-server CLI it registers, per node, the alias " +
			"`spiffe://fediversity/k8s/<namespace>/<namespace>/node-<node>` (k8s_psat selectors cluster `<namespace>.<node>`, agent_ns, agent_sa " +
			"`node-<node>`) and the host entry `spiffe://fediversity/host/<namespace>-<node>` parented to it; entries of nodes " +
			"that left `nodes` are deleted. The trust bundle goes into the ConfigMap `spire-agent`.\n\n" +
			"Apply it before the rollouts (give each `fediversity_k8s_rollout` `spire_handoff = <this>.id`). Destroy retires " +
			"the namespace's entries, removes its kubeconfig and drop-files from the spire node, and deletes the ConfigMap, the " +
			"service account and its RBAC. A spire node that does not answer fails the plan, the plan of a destroy too. A spire " +
			"node with a new machine ID (it was made again) replaces the hand-off, so the new node gets its files again.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, MarkdownDescription: "The namespace.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"namespace": schema.StringAttribute{Required: true, Validators: kit.DNSLabelValidators,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
				MarkdownDescription: "Namespace of the target; also the name of its k8s_psat cluster on the spire node (two clusters with the same namespace cannot share one spire node). Changing it replaces the hand-off."},
			"group": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Name of the group, for messages (e.g. the roster check). Default: the namespace."},
			"nodes": schema.SetAttribute{Required: true, ElementType: types.StringType,
				Validators:          []validator.Set{setvalidator.ValueStringsAre(kit.DNSLabelValidators...)},
				MarkdownDescription: "The nodes of the group: each gets a drop-file, an alias and a host entry. Removing a node deletes its drop-file and entries."},
			"roster": schema.MapAttribute{Optional: true, ElementType: types.ListType{ElemType: types.StringType},
				MarkdownDescription: "What each node of the group's roster provides (node → names, e.g. `[\"spiffe\"]`). A roster with a `spiffe` " +
					"provider is refused at plan time: that spire node would be a pod of the same deployment, which this method cannot run."},
			"trust_bundle": schema.StringAttribute{Required: true, Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
				MarkdownDescription: "The server's trust bundle (PEM), from `data.fediversity_spire_trust_bundle.<x>.pem`, read at plan time. " +
					"It goes into the ConfigMap `spire-agent`; a rotated CA changes it at the next plan, and the kubelet gives the pods the new bundle."},
			"api_server": schema.StringAttribute{Optional: true,
				MarkdownDescription: "The API server address as the spire node reaches it. Default: `K8S_SPIRE_API_SERVER`, then the server of the provider's kubeconfig."},
			"token_lifetime": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(defaultTokenLifetime),
				MarkdownDescription: "Lifetime of the spire-server token in the spire node's kubeconfig (Go duration, at least 1h). Default `2160h` (90 days). " +
					"A plan made when less than a third of it is left renews it (a new token, the kubeconfig written again)."},
			"spire_machine_id": schema.StringAttribute{Computed: true,
				MarkdownDescription: "The spire node's machine ID, read at plan time. When it changes (the spire node was made again) the hand-off is replaced."},
			"kubeconfig_expires_at": schema.StringAttribute{Computed: true,
				MarkdownDescription: "When the token in the spire node's kubeconfig expires (RFC 3339)."},
			"alias_ids": schema.MapAttribute{Computed: true, ElementType: types.StringType,
				MarkdownDescription: "Node → the SPIFFE ID of its alias (`spiffe://fediversity/k8s/<namespace>/<namespace>/node-<node>`)."},
			"host_ids": schema.MapAttribute{Computed: true, ElementType: types.StringType,
				MarkdownDescription: "Node → the SPIFFE ID of its host entry (`spiffe://fediversity/host/<namespace>-<node>`)."},
		},
		Blocks: map[string]schema.Block{
			spireNodeBlock: spireNodeBlockSchema(),
			"timeouts":     timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true, Read: true, Delete: true}),
		},
	}
}

func (r *spireHandoffResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	kit.ConfigureObject(&r.cfg, req.ProviderData, "fediversity_spire_handoff", &resp.Diagnostics)
}

func (m spireHandoffModel) group() string {
	if g := m.Group.ValueString(); g != "" {
		return g
	}
	return m.Namespace.ValueString()
}

func (m spireHandoffModel) nodes(ctx context.Context) ([]string, diag.Diagnostics) {
	var nodes []string
	diags := m.Nodes.ElementsAs(ctx, &nodes, false)
	sort.Strings(nodes)
	return nodes, diags
}

// checkRoster refuses a roster with a spiffe provider, naming the group.
func (m spireHandoffModel) checkRoster(diags *diag.Diagnostics) {
	var providers []string
	for node, provides := range m.Roster {
		for _, p := range provides {
			if p == spiffeProvider {
				providers = append(providers, node)
			}
		}
	}
	if len(providers) == 0 {
		return
	}
	sort.Strings(providers)
	diags.AddAttributeError(path.Root("roster"), "The roster of group "+m.group()+" has a spiffe provider",
		fmt.Sprintf("Group %s: roster node(s) %s provide spiffe, but the group deploys with k8s-operator, so that spire node would be a pod "+
			"of the same deployment. Take the spiffe provider out of the group's roster and give the hand-off the spire node of the central group "+
			"in spire_node.", m.group(), strings.Join(providers, ", ")))
}

func (m spireHandoffModel) tokenLifetime(diags *diag.Diagnostics) time.Duration {
	d, err := time.ParseDuration(m.TokenLifetime.ValueString())
	if err != nil || d < minimumTokenLifetime {
		diags.AddAttributeError(path.Root("token_lifetime"), "Invalid token lifetime",
			fmt.Sprintf("token_lifetime = %q must be a Go duration of at least 1h, e.g. \"2160h\".", m.TokenLifetime.ValueString()))
	}
	return d
}

// ModifyPlan checks at plan time what can be checked then: the roster, the spire node's
// coordinates, that the spire node answers (for a destroy too), and its machine ID.
func (r *spireHandoffResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if r.cfg == nil {
		return
	}
	if req.Plan.Raw.IsNull() {
		// Destroy: the entries live on the spire node; a plan that cannot reach it would
		// promise a destroy it cannot do.
		var state spireHandoffModel
		resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
		if resp.Diagnostics.HasError() {
			return
		}
		sn, diags := resolveSpireNode(state.SpireNode, r.cfg)
		if resp.Diagnostics.Append(diags...); diags.HasError() {
			return
		}
		srv, _, err := openSpireServer(ctx, sn, r.cfg)
		if err == nil {
			err = srv.Healthy(ctx)
		}
		if err != nil {
			spireUnreachable(&resp.Diagnostics, "The destroy of the hand-off of namespace "+state.Namespace.ValueString(), sn, err)
		}
		return
	}
	var plan spireHandoffModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.checkRoster(&resp.Diagnostics)
	lifetime := plan.tokenLifetime(&resp.Diagnostics)
	if !knownSpireNode(plan.SpireNode) {
		return
	}
	sn, diags := resolveSpireNode(plan.SpireNode, r.cfg)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	if _, d := kit.K8sClient(r.cfg, ""); d.HasError() {
		resp.Diagnostics.Append(d...)
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
		spireUnreachable(&resp.Diagnostics, "The hand-off of namespace "+plan.Namespace.ValueString(), sn, err)
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("spire_machine_id"), machineID)...)
	if !plan.Namespace.IsUnknown() {
		// Known even on a replacement, so the rollouts that name it do not change.
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("id"), plan.Namespace)...)
		if !plan.Nodes.IsUnknown() {
			nodes, d := plan.nodes(ctx)
			resp.Diagnostics.Append(d...)
			plan.setIDs(nodes)
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("alias_ids"), plan.AliasIDs)...)
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("host_ids"), plan.HostIDs)...)
		}
	}
	if req.State.Raw.IsNull() {
		return
	}
	var state spireHandoffModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if state.SpireMachineID.ValueString() != "" && state.SpireMachineID.ValueString() != machineID {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("spire_machine_id"))
		return
	}
	expires, perr := time.Parse(time.RFC3339, state.KubeConfigExpiresAt.ValueString())
	if perr != nil || time.Until(expires) < lifetime/3 {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("kubeconfig_expires_at"), types.StringUnknown())...)
	} else if !plan.Nodes.Equal(state.Nodes) || !plan.TrustBundle.Equal(state.TrustBundle) || !plan.APIServer.Equal(state.APIServer) {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("kubeconfig_expires_at"), types.StringUnknown())...)
	} else {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("kubeconfig_expires_at"), state.KubeConfigExpiresAt)...)
	}
}

// apply does what Create and Update share: the cluster side, then the spire node.
func (r *spireHandoffResource) apply(ctx context.Context, m *spireHandoffModel) diag.Diagnostics {
	var diags diag.Diagnostics
	ns := m.Namespace.ValueString()
	nodes, d := m.nodes(ctx)
	diags.Append(d...)
	m.checkRoster(&diags)
	lifetime := m.tokenLifetime(&diags)
	sn, d := resolveSpireNode(m.SpireNode, r.cfg)
	diags.Append(d...)
	if diags.HasError() {
		return diags
	}
	c, d := kit.K8sClient(r.cfg, "")
	if diags.Append(d...); diags.HasError() {
		return diags
	}
	apiServer := spireAPIServer(m.APIServer)
	if apiServer == "" {
		s, err := k8s.KubeConfigServer(r.cfg.KubeConfigPath)
		if err != nil {
			diags.AddError("Unable to read the kubeconfig", err.Error())
			return diags
		}
		apiServer = s
	}
	srv, _, err := openSpireServer(ctx, sn, r.cfg)
	if err == nil {
		err = srv.Healthy(ctx)
	}
	if err != nil {
		spireUnreachable(&diags, "The hand-off of namespace "+ns, sn, err)
		return diags
	}
	machineID, err := srv.MachineID(ctx)
	if err != nil {
		spireUnreachable(&diags, "The hand-off of namespace "+ns, sn, err)
		return diags
	}
	fail := func(phase string, err error) diag.Diagnostics {
		diags.AddError("Unable to hand namespace "+ns+" over to SPIRE",
			kit.FailureDetail("Namespace "+ns, phase, err, "Apply again once the cause is fixed: every step is idempotent."))
		return diags
	}
	if err := c.EnsureSpireServerAccess(ctx, ns); err != nil {
		return fail("service account", err)
	}
	token, expires, err := c.SpireServerToken(ctx, ns, lifetime)
	if err != nil {
		return fail("token", err)
	}
	kubeconfig, err := k8s.SpireKubeConfig(r.cfg.KubeConfigPath, apiServer, token)
	if err != nil {
		return fail("kubeconfig", err)
	}
	if _, err := srv.ApplyHandOff(ctx, spire.HandOff{Namespace: ns, Nodes: nodes}, kubeconfig); err != nil {
		return fail("spire node", err)
	}
	if err := c.ApplySpireBundle(ctx, ns, m.TrustBundle.ValueString()); err != nil {
		return fail("trust bundle", err)
	}
	m.ID = types.StringValue(ns)
	m.SpireMachineID = types.StringValue(machineID)
	m.KubeConfigExpiresAt = types.StringValue(expires.UTC().Format(time.RFC3339))
	m.setIDs(nodes)
	return diags
}

func (m *spireHandoffModel) setIDs(nodes []string) {
	aliases, hosts := map[string]string{}, map[string]string{}
	for _, n := range nodes {
		aliases[n] = spire.AliasID(m.Namespace.ValueString(), n)
		hosts[n] = spire.HostID(m.Namespace.ValueString(), n)
	}
	m.AliasIDs, _ = types.MapValueFrom(context.Background(), types.StringType, aliases)
	m.HostIDs, _ = types.MapValueFrom(context.Background(), types.StringType, hosts)
}

func (r *spireHandoffResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan spireHandoffModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Create(ctx, handoffTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if resp.Diagnostics.Append(r.apply(ctx, &plan)...); resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func (r *spireHandoffResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state spireHandoffModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Update(ctx, handoffTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if !plan.KubeConfigExpiresAt.IsUnknown() {
		// Only settings without effect on the spire node or the cluster changed (group,
		// timeouts): keep what is there.
		plan.SpireMachineID, plan.ID = state.SpireMachineID, state.ID
		resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
		return
	}
	if resp.Diagnostics.Append(r.apply(ctx, &plan)...); resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// Read reports what the spire node and the cluster hold: `nodes` becomes the nodes whose
// drop-file and both entries are there (all of them only while the kubeconfig and the
// spire-server service account exist too), and `trust_bundle` the bundle of the
// ConfigMap. Anything missing or changed so shows in the next plan. A spire node that
// does not answer fails the refresh, and so the plan.
func (r *spireHandoffResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state spireHandoffModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || r.cfg == nil {
		return
	}
	limit, diags := state.Timeouts.Read(ctx, time.Minute)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	rdiags, gone := r.refresh(ctx, &state)
	resp.Diagnostics.Append(rdiags...)
	if gone != nil {
		resp.State.RemoveResource(ctx)
		return
	}
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// refresh reads what the spire node and the cluster hold for the hand-off of m (the
// provider's one refresh convention, see internal/provider/kit). gone: nothing of it is
// left anywhere.
func (r *spireHandoffResource) refresh(ctx context.Context, m *spireHandoffModel) (diags diag.Diagnostics, gone error) {
	ns := m.Namespace.ValueString()
	sn, odiags := resolveSpireNode(m.SpireNode, r.cfg)
	if diags.Append(odiags...); odiags.HasError() {
		return diags, nil
	}
	srv, _, err := openSpireServer(ctx, sn, r.cfg)
	var st spire.HandOffState
	if err == nil {
		st, err = srv.ReadHandOff(ctx, ns)
	}
	if err != nil {
		spireUnreachable(&diags, "The hand-off of namespace "+ns, sn, err)
		return diags, nil
	}
	c, odiags := kit.K8sClient(r.cfg, "")
	if diags.Append(odiags...); odiags.HasError() {
		return diags, nil
	}
	access, err := c.SpireServerAccessPresent(ctx, ns)
	if err != nil {
		diags.AddError("Unable to read the hand-off of namespace "+ns, err.Error())
		return diags, nil
	}
	bundle, found, err := c.SpireBundle(ctx, ns)
	if err != nil {
		diags.AddError("Unable to read the hand-off of namespace "+ns, err.Error())
		return diags, nil
	}
	if !st.KubeConfig && len(st.Nodes) == 0 && len(st.Entries) == 0 && !access && !found {
		return diags, fmt.Errorf("the hand-off of namespace %s is gone", ns)
	}
	registered := st.RegisteredNodes(ns)
	if !st.KubeConfig || !access {
		registered = nil
	}
	nodes, d := types.SetValueFrom(ctx, types.StringType, registeredOrEmpty(registered))
	diags.Append(d...)
	m.Nodes = nodes
	m.TrustBundle = types.StringValue(bundle)
	m.setIDs(registered)
	return diags, nil
}

func registeredOrEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (r *spireHandoffResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state spireHandoffModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := state.Timeouts.Delete(ctx, handoffTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	ns := state.Namespace.ValueString()
	sn, diags := resolveSpireNode(state.SpireNode, r.cfg)
	if resp.Diagnostics.Append(diags...); diags.HasError() {
		return
	}
	srv, _, err := openSpireServer(ctx, sn, r.cfg)
	if err == nil {
		_, err = srv.RetireHandOff(ctx, ns)
	}
	if err != nil {
		resp.Diagnostics.AddError("Unable to retire the hand-off of namespace "+ns,
			fmt.Sprintf("Namespace %s, phase retire on the spire node %s: %v. Nothing was removed from the cluster; run the destroy again.", ns, kit.HostPort(sn.target.Host, sn.target.Port), err))
		return
	}
	c, diags := kit.K8sClient(r.cfg, "")
	if resp.Diagnostics.Append(diags...); diags.HasError() {
		return
	}
	if err := c.DeleteSpireHandOff(ctx, ns); err != nil {
		resp.Diagnostics.AddError("Unable to retire the hand-off of namespace "+ns, err.Error()+". Run the destroy again.")
	}
}
