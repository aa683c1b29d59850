package k8s

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/resourcevalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/image"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

var (
	_ resource.Resource                     = &imageResource{}
	_ resource.ResourceWithConfigure        = &imageResource{}
	_ resource.ResourceWithModifyPlan       = &imageResource{}
	_ resource.ResourceWithConfigValidators = &imageResource{}
)

// NewImageResource is the fediversity_image resource.
func NewImageResource() resource.Resource { return &imageResource{} }

type imageResource struct{ cfg *kit.Config }

type imageModel struct {
	ID         types.String    `tfsdk:"id"`
	Node       types.String    `tfsdk:"node"`
	Namespace  types.String    `tfsdk:"namespace"`
	Tag        types.String    `tfsdk:"tag"`
	Archive    types.String    `tfsdk:"archive"`
	Toplevel   types.String    `tfsdk:"toplevel"`
	Build      *kit.BuildModel `tfsdk:"build"`
	NodePlan   types.String    `tfsdk:"node_plan"`
	Derivation types.String    `tfsdk:"derivation"`
	SubDigest  types.String    `tfsdk:"submission_digest"`
	SubFile    types.String    `tfsdk:"submission_file"`
	Repository types.String    `tfsdk:"repository"`
	Digest     types.String    `tfsdk:"digest"`
	ImageRef   types.String    `tfsdk:"image_ref"`
	Timeouts   timeouts.Value  `tfsdk:"timeouts"`
}

const (
	imagePushTimeout = 10 * time.Minute
	imageReadTimeout = 2 * time.Minute
)

func (r *imageResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_image"
}

func (r *imageResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Pushes the image of one node to `<registry>/<namespace>/<node>:<tag>` and reports the digest the registry " +
			"holds for it, so that `fediversity_k8s_rollout` names the image by digest, so a later change of the tag does not change the pod.\n\n" +
			"The image is either built here from the node's `toplevel` (a store path in the local Nix store), or read from a " +
			"prebuilt docker-archive (`archive`: what `docker save` and Nix's `dockerTools.buildImage` write). An image built from " +
			"the toplevel has one layer holding exactly the toplevel's closure (`nix-store -qR`) under /nix/store, and " +
			"`/sbin/init` pointing at `<toplevel>/init`, nothing else; its command is `/sbin/init`, its stop signal `SIGRTMIN+3`, and its " +
			"`PATH` NixOS's (`/run/wrappers/bin:/run/current-system/sw/bin`, made by the system's stage 2), where the readiness probe finds " +
			"`systemctl`. It is reproducible: the same toplevel gives the same layer and image digest " +
			"on every build and machine (sorted entries, mtime 1, owner 0:0, a fixed gzip level, no creation time). Its tag is the " +
			"toplevel's hash part unless `tag` is set, so an unchanged configuration pushes nothing and replaces nothing. Layers " +
			"the registry already holds are not uploaded again, and the layer is streamed, never held in memory whole.\n\n" +
			"The registry is the provider's `k8s_registry`, else `K8S_REGISTRY`; the plan fails with an error naming `K8S_REGISTRY` " +
			"when neither is set. Credentials come from the containers auth JSON file in the provider's `registry_auth_file`, else " +
			"`REGISTRY_AUTH_FILE`; they are read at each push, never stored, and only ever sent over TLS. `https://` in the registry " +
			"means TLS only. Plain HTTP is used only for a loopback registry (or with the provider's `registry_insecure = true`), " +
			"and never with credentials: a push with credentials to a registry whose HTTPS fails is refused, not downgraded.\n\n" +
			"The push is replaced when, and only when, `tag` changes. Read checks that the registry still holds the tag and plans " +
			"a new push when it does not. Destroying the resource leaves the image in the registry. A push that fails (for " +
			"instance an unreachable registry) changes nothing downstream: the rollout that consumes `image_ref` is not applied.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, MarkdownDescription: "`<repository>:<tag>`.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"node": schema.StringAttribute{
				Required: true, Validators: kit.DNSLabelValidators,
				MarkdownDescription: "Node name: the last path component of the repository. Changing it pushes to the new repository (no replace).",
			},
			"namespace": schema.StringAttribute{
				Required: true, Validators: kit.DNSLabelValidators,
				MarkdownDescription: "Namespace of the target, usually `fediversity_k8s_namespace.<x>.name`: the middle path component of the repository. Changing it pushes to the new repository (no replace).",
			},
			"tag": schema.StringAttribute{
				Optional: true, Computed: true,
				Validators: []validator.String{stringvalidator.LengthBetween(1, 128),
					stringvalidator.RegexMatches(kit.TagRE, "must be a registry tag: letters, digits, '_', '.', '-', not starting with '.' or '-'")},
				MarkdownDescription: "Tag from the node configuration. Required with `archive`; with `toplevel` it defaults to the toplevel's hash part. " +
					"Changing it replaces the push: the new image is pushed and `digest` changes.",
			},
			"archive": schema.StringAttribute{
				Optional: true, Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
				MarkdownDescription: "Path of a prebuilt docker-archive to push (one image); exactly one of `archive`, `toplevel` and `build` is set. It is read only when a push happens: changing only the path, with the same `tag`, pushes nothing, because the tag names the content.",
			},
			"toplevel": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The node's system toplevel, a store path in the local Nix store (e.g. `fediversity_submission`'s build output); exactly one of `archive`, `toplevel` and `build` is set. " +
					"The image is built from it (see above). Changing it replaces the push.",
			},
			"node_plan": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "With `build`: the node plan the build is handed, as for `fediversity_node_switch` (`data.fediversity_submission.<x>.node_plans[<node>]`).",
			},
			"derivation": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "With a `build` block: the derivation (`.drv`) the plan evaluated it to, through the evaluation cache shared with `fediversity_node_switch`. " +
					"When it changes the image is built and pushed again (its default tag is the derivation's hash part); the apply builds exactly this derivation, " +
					"once per provider process however many resources share it, and refuses when the source changed since the plan.",
			},
			"repository": schema.StringAttribute{
				Computed: true, MarkdownDescription: "`<registry>/<namespace>/<node>`.",
			},
			"digest": schema.StringAttribute{
				Computed: true, MarkdownDescription: "The manifest digest (`sha256:…`) the registry holds for the tag after the push.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"image_ref": schema.StringAttribute{
				Computed: true, MarkdownDescription: "`<repository>@<digest>`: what a Deployment should name.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"submission_digest": kit.SubmissionCheckAttributes("Changing them pushes nothing.")["submission_digest"],
			"submission_file":   kit.SubmissionCheckAttributes("Changing them pushes nothing.")["submission_file"],
		},
		Blocks: map[string]schema.Block{
			"build":    kit.BuildBlockSchema("The image is built from the toplevel it builds (see above), with `node_plan` handed to it. Changing what it evaluates to pushes a new image."),
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true, Read: true}),
		},
	}
}

func (r *imageResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	kit.ConfigureObject(&r.cfg, req.ProviderData, "fediversity_image", &resp.Diagnostics)
}

func (r *imageResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{
		resourcevalidator.ExactlyOneOf(path.MatchRoot("archive"), path.MatchRoot("toplevel"), path.MatchRoot("build")),
	}
}

// ModifyPlan resolves the repository from the per-run registry, so a plan without a
// registry fails before anything is pushed, and a changed registry plans a push.
func (r *imageResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	defer kit.KeepSubmissionOfUnchangedNode(req, resp)()
	if req.Plan.Raw.IsNull() || r.cfg == nil {
		return
	}
	var plan imageModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.Node.IsUnknown() || plan.Namespace.IsUnknown() {
		return
	}
	repo, err := image.Target{Registry: r.cfg.K8sRegistry, Insecure: r.cfg.RegistryInsecure, Namespace: plan.Namespace.ValueString(), Node: plan.Node.ValueString()}.Repository()
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("node"), "No usable registry for the node image",
			fmt.Sprintf("Node %s: %v.", plan.Node.ValueString(), err))
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("repository"), types.StringValue(repo))...)
	var config imageModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	tag := config.Tag
	derivation := types.StringNull()
	switch {
	case config.Build != nil && kit.BuildBlockUnknown(config.Build, config.NodePlan):
		// Evaluated in the apply's own plan, once known.
		derivation = types.StringUnknown()
		if tag.IsNull() {
			tag = types.StringUnknown()
		}
	case config.Build != nil:
		drv, diags := kit.EvaluateBuild(ctx, kit.EvaluatorFor(r.cfg), plan.Node.ValueString(), config.Build, config.NodePlan.ValueString())
		if resp.Diagnostics.Append(diags...); resp.Diagnostics.HasError() {
			return
		}
		derivation = types.StringValue(drv)
		if tag.IsNull() {
			derived, _ := image.ToplevelTag(drv) // a store path: evaluateBuild checked it
			tag = types.StringValue(derived)
		}
	case !config.Toplevel.IsNull() && !config.Toplevel.IsUnknown():
		if tag.IsNull() {
			derived, err := image.ToplevelTag(config.Toplevel.ValueString())
			if err != nil {
				resp.Diagnostics.AddAttributeError(path.Root("toplevel"), "Invalid toplevel", fmt.Sprintf("Node %s: %v.", plan.Node.ValueString(), err))
				return
			}
			tag = types.StringValue(derived)
		}
	case config.Toplevel.IsUnknown() && tag.IsNull():
		tag = types.StringUnknown()
	case !config.Archive.IsNull() && tag.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("tag"), "Missing tag",
			fmt.Sprintf("Node %s: an image pushed from `archive` needs a `tag` (e.g. the hash part of the archive's store path); only an image built from `toplevel` derives one.", plan.Node.ValueString()))
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("tag"), tag)...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("derivation"), derivation)...)
	if !tag.IsUnknown() {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("id"), types.StringValue(repo+":"+tag.ValueString()))...)
	}
	if req.State.Raw.IsNull() {
		return
	}
	var state imageModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	// The tag names the content: a new tag (or a toplevel not known yet) is a new push.
	if tag.IsUnknown() || !tag.Equal(state.Tag) {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("tag"))
	}
	if !config.Toplevel.Equal(state.Toplevel) {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("toplevel"))
	}
	// Another derivation is another system, whatever the tag says.
	if !derivation.Equal(state.Derivation) {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("derivation"))
	}
	if state.Repository.ValueString() != repo {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("digest"), types.StringUnknown())...)
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("image_ref"), types.StringUnknown())...)
	}
}

// push pushes the image of toplevel (the configured one, or what the build block
// built), or of the archive.
func (r *imageResource) push(ctx context.Context, plan *imageModel, toplevel string) error {
	if plan.Build == nil {
		toplevel = plan.Toplevel.ValueString()
	}
	if plan.Tag.IsUnknown() || plan.Tag.IsNull() {
		from := toplevel
		if plan.Build != nil {
			from = plan.Derivation.ValueString()
		}
		tag, err := image.ToplevelTag(from)
		if err != nil {
			return err
		}
		plan.Tag = types.StringValue(tag)
	}
	t := image.Target{
		Registry: r.cfg.K8sRegistry, Insecure: r.cfg.RegistryInsecure, Namespace: plan.Namespace.ValueString(), Node: plan.Node.ValueString(), Tag: plan.Tag.ValueString(),
	}
	o := image.Options{AuthFile: r.cfg.RegistryAuthFile}
	var res image.Result
	var err error
	if toplevel != "" {
		res, err = image.PushToplevel(ctx, toplevel, t, o)
	} else {
		res, err = image.Push(ctx, plan.Archive.ValueString(), t, o)
	}
	if err != nil {
		return err
	}
	plan.Repository = types.StringValue(res.Repository)
	plan.Digest = types.StringValue(res.Digest)
	plan.ImageRef = types.StringValue(res.ImageRef)
	plan.ID = types.StringValue(res.Repository + ":" + plan.Tag.ValueString())
	return nil
}

// build builds the planned derivation of the build block (refusing a source changed
// since the plan), once per provider process however many resources share it, and
// records the derivation built. Nothing to do without a build block.
func (r *imageResource) build(ctx context.Context, plan *imageModel) (string, diag.Diagnostics) {
	if plan.Build == nil {
		if plan.Derivation.IsUnknown() {
			plan.Derivation = types.StringNull() // a plan that did not get to say so
		}
		return "", nil
	}
	node := plan.Node.ValueString()
	spec, cleanup, diags := kit.BuildSpecFor(node, plan.Build, plan.NodePlan.ValueString())
	defer cleanup()
	if diags.HasError() {
		return "", diags
	}
	e := kit.EvaluatorFor(r.cfg)
	planned := ""
	if !plan.Derivation.IsUnknown() {
		planned = plan.Derivation.ValueString()
	}
	build, bdiags := kit.PlannedBuild(ctx, e, node, spec, plan.NodePlan.ValueString(), planned)
	if diags.Append(bdiags...); diags.HasError() {
		return "", diags
	}
	if planned == "" {
		// Not known at plan: what plannedBuild evaluated, from the cache.
		ev, err := e.Evaluate(ctx, node, spec, plan.NodePlan.ValueString())
		if err != nil {
			diags.Append(kit.EvaluationError(node, spec, err))
			return "", diags
		}
		plan.Derivation = types.StringValue(ev.Derivation)
	}
	top, err := build(ctx)
	if err != nil {
		diags.AddError(fmt.Sprintf("Unable to build the system of node %s", node),
			kit.FailureDetail("Node "+node, "build", err, "Nothing was pushed. Fix the build and apply again."))
	}
	return top, diags
}

func (r *imageResource) pushError(plan imageModel, err error) (string, string) {
	from := "archive " + plan.Archive.ValueString()
	switch {
	case plan.Build != nil:
		from = "derivation " + plan.Derivation.ValueString()
	case !plan.Toplevel.IsNull():
		from = "toplevel " + plan.Toplevel.ValueString()
	}
	return "Unable to push node image",
		kit.FailureDetail("Node "+plan.Node.ValueString(), "push", fmt.Errorf("%s: %w", from, err),
			"Nothing in the cluster was changed. Check that the registry is reachable from this machine and that REGISTRY_AUTH_FILE holds its credentials, then apply again.")
}

func (r *imageResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan imageModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Create(ctx, imagePushTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if resp.Diagnostics.Append(submissionRefused(plan.SubDigest, plan.SubFile, "push the image of", plan.Node.ValueString())...); resp.Diagnostics.HasError() {
		return
	}
	toplevel, diags := r.build(ctx, &plan)
	if resp.Diagnostics.Append(diags...); resp.Diagnostics.HasError() {
		return
	}
	if err := r.push(ctx, &plan, toplevel); err != nil {
		resp.Diagnostics.AddError(r.pushError(plan, err))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func (r *imageResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state imageModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Update(ctx, imagePushTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if resp.Diagnostics.Append(submissionRefused(plan.SubDigest, plan.SubFile, "push the image of", plan.Node.ValueString())...); resp.Diagnostics.HasError() {
		resp.Diagnostics.Append(resp.State.Set(ctx, state)...) // nothing changed
		return
	}
	if plan.Digest.IsUnknown() || plan.ImageRef.IsUnknown() {
		// The repository changed (node, namespace or registry): push there.
		toplevel, diags := r.build(ctx, &plan)
		if resp.Diagnostics.Append(diags...); resp.Diagnostics.HasError() {
			resp.Diagnostics.Append(resp.State.Set(ctx, state)...) // nothing changed
			return
		}
		if err := r.push(ctx, &plan, toplevel); err != nil {
			resp.Diagnostics.AddError(r.pushError(plan, err))
			return
		}
	} else {
		// Only the archive path, the submission or the timeouts changed: the tag names the content.
		plan.Digest, plan.ImageRef, plan.Repository, plan.Tag = state.Digest, state.ImageRef, state.Repository, state.Tag
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// Read checks that the registry still holds the tag. A missing tag removes the resource
// from state so the next plan pushes again; an unreachable registry keeps the state and
// warns. A tag that now names another digest keeps the pushed digest (the pod
// does not change when the tag moves) and warns.
func (r *imageResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state imageModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || r.cfg == nil {
		return
	}
	limit, diags := state.Timeouts.Read(ctx, imageReadTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	rdiags, gone := r.refresh(ctx, &state)
	resp.Diagnostics.Append(rdiags...)
	if gone != nil {
		resp.Diagnostics.AddWarning("Node image is gone from the registry",
			fmt.Sprintf("Node %s: %s:%s is no longer in the registry; the next apply pushes it again.", state.Node.ValueString(), state.Repository.ValueString(), state.Tag.ValueString()))
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// refresh checks the registry for the tag of m (the provider's one refresh convention,
// see internal/provider/kit). gone is the registry's not-found; an unreachable registry
// or a moved tag leaves m as it was, with a warning.
func (r *imageResource) refresh(ctx context.Context, m *imageModel) (diags diag.Diagnostics, gone error) {
	got, err := image.Head(ctx, r.stateTarget(*m), image.Options{AuthFile: r.cfg.RegistryAuthFile})
	switch {
	case errors.Is(err, image.ErrNotFound):
		return diags, err
	case err != nil:
		diags.AddWarning("Unable to check the node image",
			fmt.Sprintf("Node %s, phase read: %v. The state is kept as it was.", m.Node.ValueString(), err))
	case got.Digest != m.Digest.ValueString():
		diags.AddWarning("Registry tag moved",
			fmt.Sprintf("Node %s: %s:%s now names %s, but this resource pushed %s. The Deployment keeps naming the pushed digest; change `tag` to push a new image.",
				m.Node.ValueString(), m.Repository.ValueString(), m.Tag.ValueString(), got.Digest, m.Digest.ValueString()))
	}
	return diags, nil
}

// stateTarget is where the state's image was pushed. The registry is the configured one
// when it is the same host (so its scheme and registry_insecure apply), else the host of
// the state's repository under the default rules (TLS; plain HTTP only for loopback).
func (r *imageResource) stateTarget(state imageModel) image.Target {
	suffix := "/" + state.Namespace.ValueString() + "/" + state.Node.ValueString()
	registry := strings.TrimSuffix(state.Repository.ValueString(), suffix)
	t := image.Target{Registry: registry, Namespace: state.Namespace.ValueString(), Node: state.Node.ValueString(), Tag: state.Tag.ValueString()}
	if cur, err := (image.Target{Registry: r.cfg.K8sRegistry, Insecure: r.cfg.RegistryInsecure, Namespace: t.Namespace, Node: t.Node}).Repository(); err == nil && cur == state.Repository.ValueString() {
		t.Registry, t.Insecure = r.cfg.K8sRegistry, r.cfg.RegistryInsecure
	}
	return t
}

// Delete leaves the image in the registry (docs/kubernetes.md#k8s).
func (r *imageResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {}
