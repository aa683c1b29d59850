package k8s

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

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

var (
	_ resource.Resource                = &k8sNamespaceResource{}
	_ resource.ResourceWithConfigure   = &k8sNamespaceResource{}
	_ resource.ResourceWithModifyPlan  = &k8sNamespaceResource{}
	_ resource.ResourceWithImportState = &k8sNamespaceResource{}
)

// NewK8sNamespaceResource is the fediversity_k8s_namespace resource.
func NewK8sNamespaceResource() resource.Resource { return &k8sNamespaceResource{} }

type k8sNamespaceResource struct{ cfg *kit.Config }

type k8sNamespaceModel struct {
	ID            types.String   `tfsdk:"id"`
	App           types.String   `tfsdk:"app"`
	Name          types.String   `tfsdk:"name"`
	RuntimeClass  types.String   `tfsdk:"runtime_class"`
	NetworkPolicy types.String   `tfsdk:"network_policy"`
	UID           types.String   `tfsdk:"uid"`
	Timeouts      timeouts.Value `tfsdk:"timeouts"`
}

const (
	namespaceCreateTimeout = 5 * time.Minute
	namespaceDeleteTimeout = 5 * time.Minute
	namespaceReadTimeout   = time.Minute
)

func (r *k8sNamespaceResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_k8s_namespace"
}

func (r *k8sNamespaceResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The Kubernetes namespace of a target of the k8s method, with a NetworkPolicy " +
			"`same-namespace-only` that lets the pods of the namespace accept connections only from pods of the same namespace. " +
			"The policy is applied on create, before any Deployment of the namespace; a cluster needs a network plugin that " +
			"enforces NetworkPolicy for it to take effect.\n\n" +
			"Every plan checks that the cluster has the method's RuntimeClass (`runtime_class`), so a cluster without it fails " +
			"the plan, before any image is pushed. The kubeconfig is the provider's `kube_config_path`, else `KUBE_CONFIG_PATH`; " +
			"it is never stored.\n\n" +
			"A namespace that already exists and does not carry the label `app.kubernetes.io/managed-by=terraform-provider-fediversity` " +
			"(one this provider did not create) is refused at plan; import it to manage it. A change of the namespace's name " +
			"(`K8S_NAMESPACE`, the provider's `k8s_namespace`, or `app`) plans a replacement, and the plan warns with the names of " +
			"the claims that the replacement deletes.\n\n" +
			"Destroy deletes the namespace with everything in it, the state claims of its nodes included (the plan names them), " +
			"and waits until it is gone. Images stay in the registry. It deletes only the namespace this state manages: one whose UID is `uid` " +
			"and that carries the label. A namespace deleted and re-created under the same name by someone else, or one whose label was removed " +
			"or changed, is refused with an error, at the plan of the destroy and again at the delete, and left as it is; the delete carries the UID " +
			"as a precondition, so a namespace re-created between the check and the delete is never deleted. An imported namespace is given the label by its first apply.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, MarkdownDescription: "The namespace name.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"app": schema.StringAttribute{
				Optional: true, Validators: []validator.String{stringvalidator.RegexMatches(kit.DNSLabelRE, "must be a DNS label")},
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
				MarkdownDescription: "For a per-app target: the application name, appended as `-<app>` to the base namespace, so two targets never hold the same Deployment. Unset for the `all` target. Changing it replaces the namespace (and deletes the old one with all in it).",
			},
			"name": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "The namespace: the provider's `k8s_namespace`, else `K8S_NAMESPACE`, else `fediversity`; then `-<app>` when `app` is set. " +
					"A change of the base namespace replaces the resource.",
			},
			"runtime_class": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(defaultRuntimeClass),
				MarkdownDescription: "The method's RuntimeClass, checked at every plan. Default `fediversity`. Changing it changes nothing in the cluster; pass it on to `fediversity_k8s_rollout`.",
			},
			"uid": schema.StringAttribute{
				Computed: true, PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
				MarkdownDescription: "The namespace's UID, recorded on create and on import. A namespace of the same name with another UID is not this one " +
					"(it was deleted and re-created): refresh warns, and apply and destroy refuse to touch it.",
			},
			"network_policy": schema.StringAttribute{
				Computed: true, MarkdownDescription: "Name of the NetworkPolicy (`same-namespace-only`). When Read finds it missing or changed, the next apply puts it back.",
			},
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Read: true, Delete: true}),
		},
	}
}

func (r *k8sNamespaceResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	kit.ConfigureObject(&r.cfg, req.ProviderData, "fediversity_k8s_namespace", &resp.Diagnostics)
}

// ModifyPlan names the namespace and checks the RuntimeClass: a missing one fails the
// plan, before any image is pushed (docs/kubernetes.md#k8s). A new namespace that exists
// without the provider's label fails the plan (import it to manage it). A replacement or
// a destroy warns with the claims that go with the old namespace.
func (r *k8sNamespaceResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if r.cfg == nil {
		return
	}
	var state k8sNamespaceModel
	if !req.State.Raw.IsNull() {
		resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	}
	if req.Plan.Raw.IsNull() {
		r.refuseNotOurs(ctx, state, "Destroying", &resp.Diagnostics)
		r.warnClaims(ctx, state.Name.ValueString(), "Destroying", "", &resp.Diagnostics)
		return
	}
	var plan k8sNamespaceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.App.IsUnknown() {
		return
	}
	name := k8s.NamespaceName(r.cfg.K8sNamespace, plan.App.ValueString())
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("name"), types.StringValue(name))...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("id"), types.StringValue(name))...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("network_policy"), types.StringValue(k8s.NetworkPolicyName))...)
	replaced := !req.State.Raw.IsNull() && state.Name.ValueString() != name
	if replaced {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("name"))
		r.refuseNotOurs(ctx, state, "Replacing", &resp.Diagnostics)
		r.warnClaims(ctx, state.Name.ValueString(), "Replacing", name, &resp.Diagnostics)
	}
	c, diags := kit.K8sClient(r.cfg, "")
	resp.Diagnostics.Append(diags...)
	if diags.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, namespaceReadTimeout)
	defer cancel()
	if req.State.Raw.IsNull() || replaced {
		if err := c.CheckNamespaceFree(ctx, name); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("name"), "Namespace exists and is not the provider's",
				fmt.Sprintf("Namespace %s, phase plan: %v. Nothing was pushed or applied.", name, err))
			return
		}
	}
	if plan.RuntimeClass.IsUnknown() {
		return
	}
	if err := c.RuntimeClassExists(ctx, plan.RuntimeClass.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("runtime_class"), "RuntimeClass missing",
			fmt.Sprintf("Namespace %s, phase plan: %v. Nothing was pushed or applied.", name, err))
	}
}

// refuseNotOurs fails the plan of a destroy or a replacement when the namespace of that
// name is not the one in state (another UID: deleted and re-created by someone else; or
// without the provider's label), before anything is destroyed. Delete checks again.
func (r *k8sNamespaceResource) refuseNotOurs(ctx context.Context, state k8sNamespaceModel, doing string, d *diag.Diagnostics) {
	c, diags := kit.K8sClient(r.cfg, "")
	if diags.HasError() {
		return // the delete reports it
	}
	ctx, cancel := context.WithTimeout(ctx, namespaceReadTimeout)
	defer cancel()
	if err := c.NamespaceDeletable(ctx, state.Name.ValueString(), state.UID.ValueString()); err != nil {
		d.AddError(fmt.Sprintf("%s namespace %s would delete a namespace that is not this state's", doing, state.Name.ValueString()),
			fmt.Sprintf("Namespace %s, phase plan: %v.", state.Name.ValueString(), err))
	}
}

// warnClaims warns, at plan, that deleting namespace ns deletes its claims, by name.
func (r *k8sNamespaceResource) warnClaims(ctx context.Context, ns, doing, newName string, d *diag.Diagnostics) {
	if ns == "" {
		return
	}
	c, diags := kit.K8sClient(r.cfg, "")
	if diags.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, namespaceReadTimeout)
	defer cancel()
	why := ""
	if newName != "" {
		why = fmt.Sprintf(" The namespace changes from %s to %s (K8S_NAMESPACE, k8s_namespace or app changed), which replaces it.", ns, newName)
	}
	claims, err := c.Claims(ctx, ns)
	switch {
	case err != nil:
		d.AddWarning(fmt.Sprintf("%s namespace %s deletes everything in it", doing, ns),
			fmt.Sprintf("%s Its claims (the nodes' /var/lib) could not be listed: %v. Every claim in it will be deleted with it.", why, err))
	case len(claims) > 0:
		d.AddWarning(fmt.Sprintf("%s namespace %s deletes %d claims", doing, ns, len(claims)),
			fmt.Sprintf("%s These claims, holding the nodes' /var/lib, will be deleted with the namespace: %s. "+
				"If that is not wanted, keep the namespace as it was (revert the change) before applying.", why, strings.Join(claims, ", ")))
	}
}

func (r *k8sNamespaceResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan k8sNamespaceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Create(ctx, namespaceCreateTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	r.apply(ctx, &plan, "", false, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// apply makes or updates the namespace; uid is the one in state ("" on create).
func (r *k8sNamespaceResource) apply(ctx context.Context, plan *k8sNamespaceModel, uid string, adopt bool, d interface{ AddError(string, string) }) {
	c, diags := kit.K8sClient(r.cfg, "")
	if diags.HasError() {
		d.AddError(diags[0].Summary(), diags[0].Detail())
		return
	}
	made, err := c.EnsureNamespace(ctx, plan.Name.ValueString(), uid, adopt)
	if err != nil {
		d.AddError("Unable to create the target namespace", kit.FailureDetail("Namespace "+plan.Name.ValueString(), "create", err, "Nothing else was changed; fix the cause and apply again."))
		return
	}
	plan.ID, plan.UID = plan.Name, types.StringValue(made)
	plan.NetworkPolicy = types.StringValue(k8s.NetworkPolicyName)
}

// Update only runs when the NetworkPolicy drifted (or runtime_class/timeouts changed):
// it puts the policy back.
func (r *k8sNamespaceResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state k8sNamespaceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, namespaceCreateTimeout)
	defer cancel()
	// In state: made by this provider, or imported by the operator; the very namespace
	// recorded, not one re-created under its name.
	r.apply(ctx, &plan, state.UID.ValueString(), true, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func (r *k8sNamespaceResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state k8sNamespaceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || r.cfg == nil {
		return
	}
	limit, diags := state.Timeouts.Read(ctx, namespaceReadTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	rdiags, gone := r.refresh(ctx, &state)
	resp.Diagnostics.Append(rdiags...)
	if gone != nil {
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// refresh reads the namespace of m from the cluster (the provider's one refresh
// convention, see internal/provider/kit). gone: it no longer exists or is terminating.
// An unreachable cluster leaves m as it was, with a warning.
func (r *k8sNamespaceResource) refresh(ctx context.Context, m *k8sNamespaceModel) (diags diag.Diagnostics, gone error) {
	c, cdiags := kit.K8sClient(r.cfg, "")
	if cdiags.HasError() {
		diags.AddWarning("Unable to read the target namespace", cdiags[0].Detail()+" The state is kept as it was.")
		return diags, nil
	}
	st, err := c.GetNamespace(ctx, m.Name.ValueString())
	if err != nil {
		diags.AddWarning("Unable to read the target namespace", fmt.Sprintf("Namespace %s, phase read: %v. The state is kept as it was.", m.Name.ValueString(), err))
		return diags, nil
	}
	if !st.Exists || st.Terminating {
		return diags, fmt.Errorf("namespace %s is gone", m.Name.ValueString())
	}
	if !st.NetworkPolicy {
		m.NetworkPolicy = types.StringValue("")
	}
	switch uid := m.UID.ValueString(); {
	case uid == "" && st.Labeled:
		// A state written before the UID was kept: the provider's label says it is ours.
		m.UID = types.StringValue(st.UID)
	case uid != "" && uid != st.UID:
		// Not ours: kept in state with our UID, so that no apply or destroy touches it
		// and the operator decides (state rm, or a new import).
		diags.AddWarning(fmt.Sprintf("Namespace %s was re-created by someone else", m.Name.ValueString()),
			(&k8s.ReplacedNamespaceError{Name: m.Name.ValueString(), StateUID: uid, UID: st.UID}).Error()+". Apply and destroy refuse to touch it.")
	}
	return diags, nil
}

func (r *k8sNamespaceResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state k8sNamespaceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := state.Timeouts.Delete(ctx, namespaceDeleteTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	c, diags := kit.K8sClient(r.cfg, "")
	resp.Diagnostics.Append(diags...)
	if diags.HasError() {
		return
	}
	if err := c.DeleteNamespace(ctx, state.Name.ValueString(), state.UID.ValueString()); err != nil {
		resp.Diagnostics.AddError("Unable to delete the target namespace",
			kit.FailureDetail("Namespace "+state.Name.ValueString(), "delete", err, "Run the destroy again, or raise timeouts.delete."))
	}
}

// ImportState takes the namespace name and records the UID of the namespace it names:
// importing says that this very namespace is the operator's. The RuntimeClass is taken
// to be the default; set runtime_class in the configuration when it differs.
func (r *k8sNamespaceResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if !kit.DNSLabelRE.MatchString(req.ID) {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("Want a namespace name, e.g. fediversity; got %q.", req.ID))
		return
	}
	c, diags := kit.K8sClient(r.cfg, "")
	if resp.Diagnostics.Append(diags...); diags.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, namespaceReadTimeout)
	defer cancel()
	st, err := c.GetNamespace(ctx, req.ID)
	switch {
	case err != nil:
		resp.Diagnostics.AddError("Unable to read the namespace to import", fmt.Sprintf("Namespace %s, phase import: %v.", req.ID, err))
		return
	case !st.Exists || st.Terminating:
		resp.Diagnostics.AddError("No namespace to import", fmt.Sprintf("Namespace %s does not exist (or is being deleted) in the cluster of the provider's kubeconfig.", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("uid"), st.UID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("runtime_class"), defaultRuntimeClass)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("network_policy"), k8s.NetworkPolicyName)...)
}
