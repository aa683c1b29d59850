package k8s

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
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

var (
	_ resource.Resource                   = &k8sRolloutResource{}
	_ resource.ResourceWithConfigure      = &k8sRolloutResource{}
	_ resource.ResourceWithModifyPlan     = &k8sRolloutResource{}
	_ resource.ResourceWithImportState    = &k8sRolloutResource{}
	_ resource.ResourceWithValidateConfig = &k8sRolloutResource{}
)

// NewK8sRolloutResource is the fediversity_k8s_rollout resource.
func NewK8sRolloutResource() resource.Resource { return &k8sRolloutResource{} }

type k8sRolloutResource struct{ cfg *kit.Config }

type k8sRolloutModel struct {
	ID               types.String      `tfsdk:"id"`
	Namespace        types.String      `tfsdk:"namespace"`
	Node             types.String      `tfsdk:"node"`
	ImageRef         types.String      `tfsdk:"image_ref"`
	Deploy           types.String      `tfsdk:"deploy"`
	RuntimeClass     types.String      `tfsdk:"runtime_class"`
	StorageClass     types.String      `tfsdk:"storage_class"`
	StorageSize      types.String      `tfsdk:"storage_size"`
	ContainerUUID    types.String      `tfsdk:"container_uuid"`
	MachineID        types.String      `tfsdk:"machine_id"`
	RunningImageRef  types.String      `tfsdk:"running_image_ref"`
	LastGoodImageRef types.String      `tfsdk:"last_good_image_ref"`
	Status           types.String      `tfsdk:"status"`
	SpireHandoff     types.String      `tfsdk:"spire_handoff"`
	FailWhenNotReady types.Bool        `tfsdk:"fail_when_not_ready"`
	SubDigest        types.String      `tfsdk:"submission_digest"`
	SubFile          types.String      `tfsdk:"submission_file"`
	Timings          *kit.TimingsModel `tfsdk:"timings"`
	Timeouts         timeouts.Value    `tfsdk:"timeouts"`
}

// Rollout status values.
const (
	rolloutReady      = "ready"
	rolloutNotReady   = "not_ready"
	rolloutRolledBack = "rolled_back"
	rolloutFailed     = "failed"
)

const (
	rolloutDefaultTimeout = 15 * time.Minute
	rolloutReadTimeout    = time.Minute
	rolloutDeleteTimeout  = 5 * time.Minute
)

func (r *k8sRolloutResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_k8s_rollout"
}

const rollsOut = "Changing it rolls the node out again (one new pod; the claim and the machine ID stay)."

func (r *k8sRolloutResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Runs one node as the one pod of a Deployment (the k8s method: see docs/kubernetes.md#k8s in the repository) and rolls it out to an image named by digest.\n\n" +
			"The apply makes the claim `<node>-state` (mounted on /var/lib, kept across pod replacements), the service account " +
			"`node-<node>` and the Deployment `<node>` (1 replica, strategy Recreate, the RuntimeClass, `hostUsers: false`, a tty, " +
			"`container_uuid` in the environment, readiness by `systemctl is-system-running`). Then, as a distinct step, it waits " +
			"for the pod to become ready, for at most `timings.rollout_wait` (default 5m).\n\n" +
			"The wait stops early, with the pod-level reasons (container waiting reasons, false conditions, recent events, the claim), " +
			"on states that do not recover: ErrImagePull/ImagePullBackOff or an Unschedulable pod (e.g. a claim with no volume) for longer than " +
			"`timings.pull_grace` (default 20s; the scheduler retries by itself), CrashLoopBackOff (the node's container ended again after " +
			"the kubelet restarted it: the error names its exit code and restarts), a claim whose provisioning failed, a " +
			"ReplicaSet that cannot create the pod for longer than the grace, or systemd booted with a failed unit " +
			"(the readiness probe answers `degraded` for 10s). A pod that runs but never becomes ready (systemd still `starting`) " +
			"waits out the limit; the error then names what systemd last answered to the readiness probe.\n\n" +
			"When the pod does not become ready, the Deployment is set back to the last pod template seen ready (image included; it is " +
			"recorded on the Deployment in the annotation `" + k8s.LastGoodAnnotation + "` after every ready rollout) and the apply fails saying so. " +
			"Only what the apply itself rolled out is ever set back: it records the generation and the pod template of its own write, and when " +
			"another writer changes the Deployment during the wait or before the rollback, the apply stops, sets nothing back, leaves the " +
			"Deployment as that writer left it and fails naming that writer's image and, from the Deployment's managedFields, its field manager; " +
			"`image_ref` then holds that image, so the next plan shows the difference. " +
			"An apply that finds the Deployment on an image whose pod is not ready (after an apply killed during its wait, or a rollback " +
			"the apiserver refused) waits for it again and, if it still fails, sets it back to that record. Errors of the cluster's API during " +
			"the wait are retried until the wait's limit and never count as a failed pod; when the API still does not answer at the limit, the " +
			"apply fails saying the readiness could not be read, and nothing is rolled back. A first deploy has nothing to go back to and just fails (the resource is then tainted, " +
			"and the next apply makes it again). After a rollback the state tells the truth: `image_ref` holds the image the " +
			"cluster runs, so the next plan shows the difference to the configured image and the next apply tries the rollout again. " +
			"With `fail_when_not_ready = false` such an apply warns instead of failing (see that attribute). " +
			"Read always reports the image the Deployment names, and plans a new wait when its pod is not ready, or when it is ready on a " +
			"template that is not the last good record (a pod the cluster made ready by itself after a failed rollout's wait had ended): " +
			"that wait records it, so a later failed rollout has it to go back to.\n\n" +
			"The kubeconfig is the provider's `kube_config_path`, else `KUBE_CONFIG_PATH`; it is never stored. Destroy deletes the " +
			"Deployment, the service account and the claim (the node's /var/lib is lost when the StorageClass deletes the volume).",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, MarkdownDescription: "`<namespace>/<node>`.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"namespace": schema.StringAttribute{
				Required: true, Validators: kit.DNSLabelValidators,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
				MarkdownDescription: "Namespace of the target, usually `fediversity_k8s_namespace.<x>.name`. Changing it replaces the node (a new claim: its state is lost).",
			},
			"node": schema.StringAttribute{
				Required: true, Validators: kit.DNSLabelValidators,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
				MarkdownDescription: "Node name: names the Deployment, the claim `<node>-state` and the service account `node-<node>`. Changing it replaces the node (a new claim: its state is lost).",
			},
			"image_ref": schema.StringAttribute{
				// Optional and computed, as fediversity_node_switch's toplevel: with
				// deploy = "last-good" the plan sets it (rollout_last_good.go).
				Optional: true, Computed: true,
				Validators: []validator.String{stringvalidator.RegexMatches(kit.DigestRefRE,
					"must name the image by digest (<repository>@sha256:<64 hex>), e.g. fediversity_image.<x>.image_ref")},
				MarkdownDescription: "The image to run, by digest, usually `fediversity_image.<x>.image_ref`; required unless `deploy = \"last-good\"`, " +
					"which plans it as the image of the node's last good template (and then it must be unset). After apply and refresh " +
					"it holds the image the Deployment names: after a rollback, the previous image, so the next plan shows the change back " +
					"to the configured image and the next apply retries. " + rollsOut,
			},
			"deploy": rolloutDeployAttribute(),
			"runtime_class": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(defaultRuntimeClass),
				MarkdownDescription: "RuntimeClass of the pod, usually `fediversity_k8s_namespace.<x>.runtime_class`. Default `fediversity`. " + rollsOut,
			},
			"storage_class": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "StorageClass of the claim `<node>-state`. Default: the cluster's default class. A claim's class cannot change: changing it fails the apply until the claim is moved by hand.",
			},
			"storage_size": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString("1Gi"),
				MarkdownDescription: "Requested size of the claim, a Kubernetes quantity. Default `1Gi`. A larger value grows the claim (where the class allows expansion); no pod is replaced.",
			},
			"container_uuid": schema.StringAttribute{
				Computed: true, PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
				MarkdownDescription: "Random UUID (crypto/rand) made on create and kept in state; given to systemd as `container_uuid`, so the machine ID is the same across pod replacements and different for each node.",
			},
			"machine_id": schema.StringAttribute{
				Computed: true, PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
				MarkdownDescription: "The node's machine ID (`/etc/machine-id`): `container_uuid` without dashes.",
			},
			"running_image_ref": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The image the Deployment names, as last seen.",
			},
			"last_good_image_ref": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "The last image whose pod became ready (empty before the first successful rollout). " +
					"It mirrors the record on the Deployment (annotation `" + k8s.LastGoodAnnotation + "`, the whole pod template), which is the rollback target: " +
					"a record in the cluster survives an apply killed during its wait and a rollback the apiserver refused.",
			},
			"fail_when_not_ready": schema.BoolAttribute{
				Optional: true,
				MarkdownDescription: "Whether a rollout whose pod does not become ready fails the apply. Default (unset or `true`): it does. " +
					"`false` (a staged rollout with a failure budget, as modules/k8s's `strict = false` sets it): the apply records the outcome and " +
					"ends with a warning naming the node and the reason instead, so a `fediversity_rollout_gate` can count the node against the budget. " +
					"The state stays true either way: after a rollback `status` is `rolled_back` and `running_image_ref` holds the previous image the " +
					"cluster runs (`image_ref` keeps the configured image, as planned, until the next refresh reads the previous one into it), and the " +
					"next plan rolls the configured image out again; with nothing to go back to `status` is `failed` (the resource is not tainted) and " +
					"the next plan rolls it out again. Errors other than a pod that did not become ready (the cluster's " +
					"API, another writer, a refused submission) fail the apply whatever this says. Changing it alone rolls nothing out.",
			},
			rolloutSpireAttr:    rolloutSpireAttribute(),
			"submission_digest": kit.SubmissionCheckAttributes("Changing them rolls nothing out.")["submission_digest"],
			"submission_file":   kit.SubmissionCheckAttributes("Changing them rolls nothing out.")["submission_file"],
			"status": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "`ready`: the rollout completed and the pod is ready. `not_ready`: Read found the pod not ready (the next apply waits again). " +
					"`rolled_back`: the last rollout failed and the previous image runs again. `failed`: the last rollout failed with nothing to go back to.",
			},
		},
		Blocks: map[string]schema.Block{
			"timings":  kit.TimingsResourceBlock(kit.TimingsK8sRollout),
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true, Read: true, Delete: true}),
		},
	}
}

func (r *k8sRolloutResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	kit.ConfigureObject(&r.cfg, req.ProviderData, "fediversity_k8s_rollout", &resp.Diagnostics)
}

// ValidateConfig checks the timings at plan, not first at apply, and that image_ref is
// given exactly when the configured image is rolled out (deploy).
func (r *k8sRolloutResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m k8sRolloutModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	_, diags := m.Timings.ToTimings(path.Root("timings"))
	resp.Diagnostics.Append(diags...)
	validateDeploy(m, &resp.Diagnostics)
}

// ModifyPlan plans a new wait when the last rollout did not end ready, so an apply with
// an unchanged configuration tries again (docs/kubernetes.md#k8s); and when the node runs
// ready a template that is not its last good record (unrecordedReady), so that the wait
// records it: a later failed rollout goes back to the last good record only.
func (r *k8sRolloutResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	defer kit.KeepSubmissionOfUnchangedNode(req, resp)()
	if !req.Plan.Raw.IsNull() && req.State.Raw.IsNull() {
		r.warnIfDeploymentExists(ctx, req, resp)
	}
	if !req.Plan.Raw.IsNull() {
		// deploy = "last-good": image_ref is the last good template's image.
		if r.planLastGood(ctx, req, resp); resp.Diagnostics.HasError() {
			return
		}
	}
	if req.Plan.Raw.IsNull() || req.State.Raw.IsNull() {
		return
	}
	var state k8sRolloutModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if state.Status.ValueString() != rolloutReady || unrecordedReady(state) {
		for _, a := range []string{"running_image_ref", "last_good_image_ref", "status"} {
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root(a), types.StringUnknown())...)
		}
	}
}

// unrecordedReady tells whether the node runs ready a template that was never recorded
// as its last good one. It happens when a pod becomes ready on its own after the
// rollout's wait had ended (a first rollout that failed, and the cluster created the pod
// once the cause went away: Read then finds it ready). Without the record, a later failed
// rollout would have nothing to go back to, although a good template ran.
func unrecordedReady(m k8sRolloutModel) bool {
	return m.Status.ValueString() == rolloutReady && m.RunningImageRef.ValueString() != "" &&
		m.LastGoodImageRef.ValueString() != m.RunningImageRef.ValueString()
}

// warnIfDeploymentExists warns, at plan, when a node this plan creates already has its
// Deployment: the create takes it over, but when the node's rollout only moved to a new
// address (in modules/k8s a changed rollout layout moves nodes between the wave modules,
// which no static moved block can follow), the destroy of its old address in the same
// run deletes the Deployment and the claim. Only a warning: a Deployment left by an apply
// that was cut off before it saved its state is taken over as it should be. Nothing is
// said when the namespace or node is not known yet, or the cluster cannot be read.
func (r *k8sRolloutResource) warnIfDeploymentExists(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	var plan k8sRolloutModel
	if r.cfg == nil || req.Plan.Get(ctx, &plan).HasError() || plan.Namespace.IsUnknown() || plan.Node.IsUnknown() {
		return
	}
	ns, node := plan.Namespace.ValueString(), plan.Node.ValueString()
	c, diags := kit.K8sClient(r.cfg, node)
	if diags.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, rolloutReadTimeout)
	defer cancel()
	st, err := c.GetNode(ctx, ns, node)
	if err != nil || !st.Exists {
		return
	}
	resp.Diagnostics.AddWarning(fmt.Sprintf("Node %s already has a Deployment, which this plan creates", node),
		fmt.Sprintf("The Deployment %s exists in namespace %s (image %s), but no fediversity_k8s_rollout at this address holds it in the state; "+
			"the apply takes it over. If the node's rollout only moved here from another address (in modules/k8s, a changed canary, wave_size or "+
			"waves moves a node to another wave's module), the destroy of its old address in the same apply deletes the Deployment and the "+
			"claim %s-state with the node's data: do not apply, move its state instead (terraform state mv '<old address>' '<this address>') "+
			"and plan again. Otherwise import it (terraform import <address> %s/%s).", node, ns, st.Image, node, ns, node))
}

func (r *k8sRolloutResource) spec(m k8sRolloutModel, wait time.Duration) k8s.NodeSpec {
	return k8s.NodeSpec{
		Namespace: m.Namespace.ValueString(), Node: m.Node.ValueString(), Image: m.ImageRef.ValueString(),
		RuntimeClass: m.RuntimeClass.ValueString(), StorageClass: m.StorageClass.ValueString(), StorageSize: m.StorageSize.ValueString(),
		ContainerUUID: m.ContainerUUID.ValueString(), ProgressDeadline: wait,
		SpireAgent: spireAgentWanted(m.SpireHandoff),
	}
}

func (r *k8sRolloutResource) waitOptions(m k8sRolloutModel) (k8s.WaitOptions, error) {
	t, diags := m.Timings.ToTimings(path.Root("timings"))
	if diags.HasError() {
		return k8s.WaitOptions{}, errors.New(diags[0].Detail())
	}
	t = t.Merge(r.cfg.Timings)
	return k8s.WaitOptions{Limit: t.RolloutWait, PullGrace: t.PullGrace, DegradedGrace: t.DegradedGrace, RollbackWait: t.RollbackWait}, nil
}

// rollout runs the engine and writes into m what is true afterwards. It returns the
// diagnostics of the rollout (an error for a failed one; a warning for a ready one whose
// template could not be recorded as the last good one).
func (r *k8sRolloutResource) rollout(ctx context.Context, m *k8sRolloutModel, prevGood string) diag.Diagnostics {
	var diags diag.Diagnostics
	node := m.Node.ValueString()
	c, cdiags := kit.K8sClient(r.cfg, node)
	if cdiags.HasError() {
		return cdiags
	}
	wo, err := r.waitOptions(*m)
	if err != nil {
		diags.AddError("Invalid timings", err.Error())
		return diags
	}
	spec := r.spec(*m, wo.Limit)
	if spec.ProgressDeadline == 0 {
		spec.ProgressDeadline = 5 * time.Minute
	}
	out, err := c.Rollout(ctx, spec, wo)
	m.ID = types.StringValue(m.Namespace.ValueString() + "/" + node)
	m.MachineID = types.StringValue(k8s.MachineID(m.ContainerUUID.ValueString()))
	m.LastGoodImageRef = types.StringValue(prevGood)
	if out.LastGood != "" {
		// The record on the Deployment is the one a crash cannot lose.
		m.LastGoodImageRef = types.StringValue(out.LastGood)
	}
	var other *k8s.OtherWriterError
	if err == nil {
		m.RunningImageRef, m.Status = m.ImageRef, types.StringValue(rolloutReady)
		if out.Running != m.ImageRef.ValueString() {
			// Ready, then changed by another writer at once: the state says what the
			// cluster runs now, so the next plan shows the difference.
			m.ImageRef, m.RunningImageRef, m.Status = types.StringValue(out.Running), types.StringValue(out.Running), types.StringValue(rolloutNotReady)
		}
		if out.Warning != "" {
			diags.AddWarning(fmt.Sprintf("Node %s is ready, but its template was not recorded as the last good one", node),
				out.Warning+". A later failed rollout sets the Deployment back to the template recorded before ("+m.LastGoodImageRef.ValueString()+").")
		}
		return diags
	}
	var rerr *k8s.RolloutError
	var unknown *k8s.ReadinessUnknownError
	var lost *k8s.WriteAnswerLostError
	switch {
	case errors.As(err, &other):
		// Another writer changed the Deployment after this run wrote it: nothing was set
		// back over that change. image_ref holds what the cluster runs (that writer's
		// image), so the next plan shows the difference to the configured image.
		m.ImageRef = types.StringValue(out.Running)
		m.RunningImageRef, m.Status = types.StringValue(out.Running), types.StringValue(rolloutFailed)
		diags.AddError(fmt.Sprintf("Node %s was changed by another writer; nothing was rolled back", node), err.Error())
	case errors.As(err, &unknown):
		// Not a failed pod: nothing was rolled back, the Deployment names the new image,
		// and the next apply waits again.
		m.RunningImageRef, m.Status = m.ImageRef, types.StringValue(rolloutNotReady)
		diags.AddError(fmt.Sprintf("Readiness of node %s could not be read; nothing was rolled back", node), unknown.Error())
	case errors.As(err, &lost):
		// The write's answer was lost; the Deployment was read back (or could not be).
		switch {
		case lost.Running == m.ImageRef.ValueString():
			// The write took effect: as a wait whose readiness could not be read.
			m.RunningImageRef, m.Status = m.ImageRef, types.StringValue(rolloutNotReady)
			diags.AddError(fmt.Sprintf("Readiness of node %s could not be read; nothing was rolled back", node), lost.Error())
		case lost.Running != "":
			m.RunningImageRef, m.Status = types.StringValue(lost.Running), types.StringValue(rolloutFailed)
			diags.AddError("Unable to apply node "+node, lost.Error())
		default:
			// Not known: the state does not claim an image the cluster may not run.
			m.RunningImageRef, m.Status = types.StringNull(), types.StringValue(rolloutFailed)
			diags.AddError("Unable to apply node "+node, lost.Error())
		}
	case !errors.As(err, &rerr):
		// Failed before the wait (claim, service account, Deployment): the cluster still
		// runs what it ran.
		if out.Running == "" {
			out.Running = prevGood
		}
		m.RunningImageRef, m.Status = types.StringValue(out.Running), types.StringValue(rolloutFailed)
		diags.AddError("Unable to apply node "+node, kit.FailureDetail("Node "+node, "apply", err, "The cluster still runs what it ran; fix the cause and apply again."))
	case rerr.RolledBack:
		// The truth: the cluster runs the previous image. A failed apply puts it in
		// image_ref, so the next plan shows the change back to the configured image, and
		// the next apply retries. An apply that succeeds (fail_when_not_ready = false)
		// must return the image_ref it planned (Terraform refuses any other), so there
		// running_image_ref and status say it, and status plans the retry (ModifyPlan);
		// the next refresh reads the previous image into image_ref as well.
		if lenient := !m.FailWhenNotReady.IsNull() && !m.FailWhenNotReady.ValueBool(); !lenient {
			m.ImageRef = types.StringValue(out.Running)
		}
		m.RunningImageRef, m.Status = types.StringValue(out.Running), types.StringValue(rolloutRolledBack)
		notReady(&diags, *m, fmt.Sprintf("Node %s did not become ready; rolled back", node), rerr.Error())
	default:
		m.RunningImageRef, m.Status = types.StringValue(out.Running), types.StringValue(rolloutFailed)
		notReady(&diags, *m, fmt.Sprintf("Node %s did not become ready", node), rerr.Error())
	}
	return diags
}

// notReady reports a rollout whose pod did not become ready: an error, or, with
// fail_when_not_ready = false, a warning, so that the apply goes on and a rollout gate
// judges the node by its status. The state written is the same either way (what the
// cluster runs), which is what keeps a lenient rollback from looking converged: the
// rolled-back image_ref differs from the configured one, and a status other than ready
// plans a new wait (ModifyPlan).
func notReady(diags *diag.Diagnostics, m k8sRolloutModel, summary, detail string) {
	if m.FailWhenNotReady.IsNull() || m.FailWhenNotReady.ValueBool() {
		diags.AddError(summary, detail)
		return
	}
	diags.AddWarning(summary, detail+" fail_when_not_ready is false: the apply goes on, and the state records status "+
		m.Status.ValueString()+"; the next plan rolls the node out again.")
}

func (r *k8sRolloutResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan k8sRolloutModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Create(ctx, rolloutDefaultTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	uuid, err := k8s.NewUUID()
	if err != nil {
		resp.Diagnostics.AddError("Unable to make a machine ID", err.Error())
		return
	}
	plan.ContainerUUID = types.StringValue(uuid)
	if resp.Diagnostics.Append(submissionRefused(plan.SubDigest, plan.SubFile, "roll out", plan.Node.ValueString())...); resp.Diagnostics.HasError() {
		return
	}
	if resp.Diagnostics.Append(checkLastGoodUnchanged(ctx, r, plan)...); resp.Diagnostics.HasError() {
		return
	}
	rdiags := r.rollout(ctx, &plan, "")
	resp.Diagnostics.Append(rdiags...)
	if rdiags.HasError() && plan.Status.IsUnknown() {
		return // nothing reached the cluster
	}
	// On a failed first deploy the state is still written: the framework marks the
	// resource tainted, and the next apply deletes the Deployment and makes it again.
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func (r *k8sRolloutResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state k8sRolloutModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Update(ctx, rolloutDefaultTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	plan.ContainerUUID, plan.MachineID = state.ContainerUUID, state.MachineID
	if resp.Diagnostics.Append(submissionRefused(plan.SubDigest, plan.SubFile, "roll out", plan.Node.ValueString())...); resp.Diagnostics.HasError() {
		resp.Diagnostics.Append(resp.State.Set(ctx, state)...) // nothing changed
		return
	}
	if resp.Diagnostics.Append(checkLastGoodUnchanged(ctx, r, plan)...); resp.Diagnostics.HasError() {
		resp.Diagnostics.Append(resp.State.Set(ctx, state)...) // nothing changed
		return
	}
	same := plan.ImageRef.Equal(state.ImageRef) && plan.RuntimeClass.Equal(state.RuntimeClass) &&
		plan.StorageClass.Equal(state.StorageClass) && plan.StorageSize.Equal(state.StorageSize) &&
		plan.SpireHandoff.Equal(state.SpireHandoff)
	if same && state.Status.ValueString() == rolloutReady && !unrecordedReady(state) {
		// Only timings or timeouts changed: nothing to roll out.
		plan.RunningImageRef, plan.LastGoodImageRef, plan.Status = state.RunningImageRef, state.LastGoodImageRef, state.Status
		resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
		return
	}
	resp.Diagnostics.Append(r.rollout(ctx, &plan, state.LastGoodImageRef.ValueString())...)
	if plan.Status.IsUnknown() {
		plan.Status = types.StringValue(rolloutFailed)
		plan.RunningImageRef = state.RunningImageRef
		plan.LastGoodImageRef = state.LastGoodImageRef
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// Read reports what the cluster runs: the image the Deployment names goes into
// image_ref, so a rollback or an out-of-band change shows in the next plan.
func (r *k8sRolloutResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state k8sRolloutModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || r.cfg == nil {
		return
	}
	limit, diags := state.Timeouts.Read(ctx, rolloutReadTimeout)
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

// refresh reads what the cluster runs for the node of m (the provider's one refresh
// convention, see internal/provider/kit): the image the Deployment names goes into
// image_ref. gone: the Deployment no longer exists. An unreachable cluster leaves m as
// it was, with a warning.
func (r *k8sRolloutResource) refresh(ctx context.Context, m *k8sRolloutModel) (diags diag.Diagnostics, gone error) {
	node := m.Node.ValueString()
	c, cdiags := kit.K8sClient(r.cfg, node)
	if cdiags.HasError() {
		diags.AddWarning("Unable to read node "+node, cdiags[0].Detail()+" The state is kept as it was.")
		return diags, nil
	}
	st, err := c.GetNode(ctx, m.Namespace.ValueString(), node)
	if err != nil {
		diags.AddWarning("Unable to read node "+node, fmt.Sprintf("Node %s, phase read: %v. The state is kept as it was.", node, err))
		return diags, nil
	}
	if !st.Exists {
		return diags, fmt.Errorf("node %s is gone", node)
	}
	m.ImageRef = types.StringValue(st.Image)
	m.RunningImageRef = types.StringValue(st.Image)
	if st.LastGoodImage != "" {
		m.LastGoodImageRef = types.StringValue(st.LastGoodImage)
	}
	if m.ContainerUUID.ValueString() == "" { // imported: take what the cluster has
		m.ID = types.StringValue(m.Namespace.ValueString() + "/" + node)
		m.ContainerUUID = types.StringValue(st.ContainerUUID)
		m.MachineID = types.StringValue(k8s.MachineID(st.ContainerUUID))
		m.RuntimeClass = types.StringValue(st.RuntimeClass)
		m.StorageSize = types.StringValue(st.StorageSize)
		if st.StorageClass != "" {
			m.StorageClass = types.StringValue(st.StorageClass)
		}
		m.LastGoodImageRef = types.StringValue(st.LastGoodImage)
		m.Status = types.StringValue(rolloutNotReady)
	}
	switch {
	case st.Ready:
		m.Status = types.StringValue(rolloutReady)
	case m.Status.ValueString() == rolloutReady:
		m.Status = types.StringValue(rolloutNotReady)
	}
	return diags, nil
}

func (r *k8sRolloutResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state k8sRolloutModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := state.Timeouts.Delete(ctx, rolloutDeleteTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	node := state.Node.ValueString()
	c, diags := kit.K8sClient(r.cfg, node)
	resp.Diagnostics.Append(diags...)
	if diags.HasError() {
		return
	}
	if err := c.DeleteNode(ctx, state.Namespace.ValueString(), node); err != nil {
		resp.Diagnostics.AddError("Unable to delete node "+node, fmt.Sprintf("Node %s, phase delete: %v. Run the destroy again.", node, err))
	}
}

// ImportState takes `<namespace>/<node>`; Read fills the rest from the cluster,
// container_uuid included, so the machine ID stays the one the node has.
func (r *k8sRolloutResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	ns, node, ok := strings.Cut(req.ID, "/")
	if !ok || !kit.DNSLabelRE.MatchString(ns) || !kit.DNSLabelRE.MatchString(node) {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("Want <namespace>/<node>, e.g. fediversity/web01; got %q.", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("namespace"), ns)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("node"), node)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
}
