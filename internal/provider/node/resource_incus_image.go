package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
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
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/image"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

var (
	_ resource.Resource                     = &incusImageResource{}
	_ resource.ResourceWithConfigure        = &incusImageResource{}
	_ resource.ResourceWithModifyPlan       = &incusImageResource{}
	_ resource.ResourceWithConfigValidators = &incusImageResource{}
)

// NewIncusImageResource is the constructor of fediversity_incus_image.
func NewIncusImageResource() resource.Resource { return &incusImageResource{} }

type incusImageResource struct{ cfg *kit.Config }

type incusImageModel struct {
	ID          types.String    `tfsdk:"id"`
	Node        types.String    `tfsdk:"node"`
	Project     types.String    `tfsdk:"project"`
	Toplevel    types.String    `tfsdk:"toplevel"`
	Build       *kit.BuildModel `tfsdk:"build"`
	NodePlan    types.String    `tfsdk:"node_plan"`
	Derivation  types.String    `tfsdk:"derivation"`
	System      types.String    `tfsdk:"system"`
	Alias       types.String    `tfsdk:"alias"`
	Fingerprint types.String    `tfsdk:"fingerprint"`
	SubDigest   types.String    `tfsdk:"submission_digest"`
	SubFile     types.String    `tfsdk:"submission_file"`
	Timeouts    timeouts.Value  `tfsdk:"timeouts"`
}

const (
	incusImageCreateTimeout = 20 * time.Minute
	incusImageDeleteTimeout = 5 * time.Minute
	// incusImageAliasPrefix starts the alias of every image this resource makes, so
	// that an operator can tell them (`incus image list fediversity/`).
	incusImageAliasPrefix = "fediversity/"
)

func (r *incusImageResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_incus_image"
}

func (r *incusImageResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "An Incus container image of one node's system, built in the graph from its `toplevel` (or its `build`) and imported " +
			"into the provider's Incus daemon, so that `fediversity_incus_node` creates the node's container from the node's own system: " +
			"a `tf-incus` group then needs no image prepared by hand (see [tf-incus from the node's source](../incus-nodes.md#incus-from-source)).\n\n" +
			"The image is the one NixOS's own container images are: one uncompressed tarball of `metadata.yaml` and `rootfs/`, which holds " +
			"exactly the system's closure under `/nix/store`, `/sbin/init` pointing at `<toplevel>/init`, empty `/dev`, `/proc` and `/sys`, " +
			"and `/nix-path-registration` (the closure's registrations, which the system's stage 2 loads at its first boot with " +
			"`nix-store --load-db`, so the node's Nix holds the paths it booted from and a deploy copies only what a new system adds). " +
			"It is reproducible (sorted entries, mtime 1, owner 0:0), so one system always gives one fingerprint. It is streamed to the " +
			"daemon, never written to disk or held in memory whole.\n\n" +
			"The image is keyed on the system: its alias is `fediversity/<node>/<key>`, the key being the hash part of the toplevel (of the " +
			"derivation, with `build`). An unchanged system imports nothing; another system is another image, and replaces this resource; " +
			"two nodes of one system share one image under two aliases. Read checks that the alias is still there (the next plan imports " +
			"the image again when it is not). Destroy deletes the alias, and the image once no other alias names it; containers made from " +
			"it keep running, their root file systems are their own.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, MarkdownDescription: "`incus://local/<project>/images/<alias>`.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"node": schema.StringAttribute{
				Required: true, Validators: kit.DNSLabelValidators,
				MarkdownDescription: "The node whose system the image holds: part of the alias, and named in messages. Changing it replaces the image.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"project": schema.StringAttribute{
				Optional: true, Computed: true,
				MarkdownDescription: "Incus project the image is imported into (a project without its own images, `features.images=false`, " +
					"keeps them in `default`). Default: the provider's `incus.project`, then `default`. Changing it replaces the image.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplace()},
				Validators: []validator.String{stringvalidator.RegexMatches(regexp.MustCompile(`^[^/\s]{1,63}$`),
					"must be an Incus project name: no slashes or spaces, at most 63 characters")},
			},
			"toplevel": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The node's system, a store path in the local Nix store; exactly one of `toplevel` and `build` is set. " +
					"Changing it replaces the image.",
			},
			"node_plan": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "With `build`: the node plan the build is handed, as for `fediversity_node_switch` (`data.fediversity_submission.<x>.node_plans[<node>]`).",
			},
			"derivation": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "With a `build` block: the derivation (`.drv`) the plan evaluated it to, through the evaluation cache shared with " +
					"`fediversity_node_switch` (one evaluation and one build however many resources name the node's source). When it changes the image " +
					"is built and imported again; the apply builds exactly this derivation and refuses when the source changed since the plan.",
			},
			"system": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The toplevel the image holds (built from `build`, or `toplevel`).",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"alias": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`fediversity/<node>/<key>`: the image's alias, known at plan.",
			},
			"fingerprint": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "The image's fingerprint (the SHA-256 of its tarball): what `fediversity_incus_node`'s `image` takes, so that " +
					"the container is made from exactly this image.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"submission_digest": kit.SubmissionCheckAttributes("Changing them imports nothing.")["submission_digest"],
			"submission_file":   kit.SubmissionCheckAttributes("Changing them imports nothing.")["submission_file"],
		},
		Blocks: map[string]schema.Block{
			"build":    kit.BuildBlockSchema("The image holds the toplevel it builds, with `node_plan` handed to it. Changing what it evaluates to imports a new image."),
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Delete: true}),
		},
	}
}

func (r *incusImageResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	kit.ConfigureObject(&r.cfg, req.ProviderData, "fediversity_incus_image", &resp.Diagnostics)
}

func (r *incusImageResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{
		resourcevalidator.ExactlyOneOf(path.MatchRoot("toplevel"), path.MatchRoot("build")),
	}
}

// imageKey is the part of the alias that names the system: the hash part of the store
// path (a toplevel, or the derivation it is built from).
func imageKey(storePath string) (string, error) {
	if !nixstore.ValidStorePath(storePath) {
		return "", fmt.Errorf("%q is not a store path (/nix/store/<hash>-<name>)", storePath)
	}
	hash, _, _ := strings.Cut(filepath.Base(storePath), "-")
	return hash, nil
}

// ModifyPlan fills in the project, evaluates the build block to its derivation, and
// plans the alias, so that the plan shows which system the image holds and a changed
// one as a replacement.
func (r *incusImageResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	defer kit.KeepSubmissionOfUnchangedNode(req, resp)()
	if req.Plan.Raw.IsNull() || r.cfg == nil {
		return
	}
	var config incusImageModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() || config.Node.IsUnknown() {
		return
	}
	node := config.Node.ValueString()
	project := config.Project
	if project.IsNull() {
		project = types.StringValue(projectOrDefault(r.cfg, ""))
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("project"), project)...)
	}
	derivation, from := types.StringNull(), types.StringUnknown()
	switch {
	case config.Build != nil && kit.BuildBlockUnknown(config.Build, config.NodePlan):
		derivation = types.StringUnknown()
	case config.Build != nil:
		drv, diags := kit.EvaluateBuild(ctx, kit.EvaluatorFor(r.cfg), node, config.Build, config.NodePlan.ValueString())
		if resp.Diagnostics.Append(diags...); resp.Diagnostics.HasError() {
			return
		}
		derivation, from = types.StringValue(drv), types.StringValue(drv)
	case !config.Toplevel.IsUnknown():
		from = config.Toplevel
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("derivation"), derivation)...)
	alias := types.StringUnknown()
	if !from.IsUnknown() {
		key, err := imageKey(from.ValueString())
		if err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("toplevel"), "Invalid toplevel", fmt.Sprintf("Node %s: %v.", node, err))
			return
		}
		alias = types.StringValue(incusImageAliasPrefix + node + "/" + key)
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("alias"), alias)...)
	if !alias.IsUnknown() && !project.IsUnknown() {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("id"), types.StringValue(incusImageID(project.ValueString(), alias.ValueString())))...)
	}
	if req.State.Raw.IsNull() {
		return
	}
	var state incusImageModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	// The alias names the system: another one (or one not known yet) is another image.
	if alias.IsUnknown() || !alias.Equal(state.Alias) {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("alias"))
	}
	if !config.Toplevel.Equal(state.Toplevel) {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("toplevel"))
	}
	if !derivation.Equal(state.Derivation) {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("derivation"))
	}
}

func incusImageID(project, alias string) string {
	return fmt.Sprintf("incus://%s/%s/images/%s", kit.LocalRemote, project, alias)
}

// projectOrDefault is p, else the provider's Incus project, else "default".
func projectOrDefault(cfg *kit.Config, p string) string {
	if p != "" {
		return p
	}
	if cfg != nil && cfg.IncusProject != "" {
		return cfg.IncusProject
	}
	return "default"
}

func (r *incusImageResource) client(project string) (*incusapi.Client, error) {
	if r.cfg == nil {
		return nil, kit.ErrNotConfigured
	}
	c, err := r.cfg.IncusClient()
	if err != nil {
		return nil, fmt.Errorf("connect to the Incus API (%s): %w; check the provider's incus block or INCUS_SOCKET", kit.DescribeIncus(r.cfg), err)
	}
	return c.WithProject(project), nil
}

// system builds the planned derivation of the build block (refusing a source changed
// since the plan), or returns the configured toplevel.
func (r *incusImageResource) system(ctx context.Context, plan *incusImageModel) (string, diag.Diagnostics) {
	if plan.Build == nil {
		if plan.Derivation.IsUnknown() {
			plan.Derivation = types.StringNull()
		}
		return plan.Toplevel.ValueString(), nil
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
			kit.FailureDetail("Node "+node, "build", err, "Nothing was imported. Fix the build and apply again."))
	}
	return top, diags
}

func (r *incusImageResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan incusImageModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Create(ctx, incusImageCreateTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	node := plan.Node.ValueString()
	refused, _ := kit.CheckSubmission(plan.SubDigest, plan.SubFile, "import the image of", node)
	if resp.Diagnostics.Append(refused...); resp.Diagnostics.HasError() {
		return
	}
	top, diags := r.system(ctx, &plan)
	if resp.Diagnostics.Append(diags...); resp.Diagnostics.HasError() {
		return
	}
	if plan.Alias.IsUnknown() {
		from := top
		if !plan.Derivation.IsNull() {
			from = plan.Derivation.ValueString()
		}
		key, err := imageKey(from)
		if err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("toplevel"), "Invalid toplevel", fmt.Sprintf("Node %s: %v.", node, err))
			return
		}
		plan.Alias = types.StringValue(incusImageAliasPrefix + node + "/" + key)
	}
	project := projectOrDefault(r.cfg, plan.Project.ValueString())
	plan.Project, plan.System = types.StringValue(project), types.StringValue(top)
	plan.ID = types.StringValue(incusImageID(project, plan.Alias.ValueString()))
	subject := fmt.Sprintf("Node %s (image %s, project %s)", node, plan.Alias.ValueString(), project)
	c, err := r.client(project)
	if err != nil {
		resp.Diagnostics.AddError("Unable to import the Incus image of node "+node, kit.FailureDetail(subject, "connect", err, "Nothing was imported."))
		return
	}
	fp, err := importSystemImage(ctx, c, top, plan.Alias.ValueString())
	if err != nil {
		resp.Diagnostics.AddError("Unable to import the Incus image of node "+node, kit.FailureDetail(subject, "import", err,
			"No alias was made; an image the daemon unpacked stays without one until the next apply names it. Check the daemon's free space "+
				"(`incus storage info`) and `incus image list`, then apply again."))
		return
	}
	plan.Fingerprint = types.StringValue(fp)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// importSystemImage makes alias name the Incus image of toplevel, importing the image
// unless the alias already names an image of that toplevel (an unchanged system imports
// nothing). It returns the image's fingerprint.
func importSystemImage(ctx context.Context, c *incusapi.Client, toplevel, alias string) (string, error) {
	if a, err := c.GetImageAlias(ctx, alias); err == nil {
		img, err := c.GetImage(ctx, a.Target)
		if err == nil && img.Properties[image.IncusImageProperty] == toplevel {
			tflog.Info(ctx, "incus image already imported", map[string]any{"alias": alias, "fingerprint": a.Target})
			return a.Target, nil
		}
		return "", fmt.Errorf("alias %s exists and names image %s, which is not an image of %s (property %s %q); delete the alias (`incus image alias delete %s`) if nothing needs it",
			alias, a.Target, toplevel, image.IncusImageProperty, imageProperty(img), alias)
	} else if !incusapi.IsNotFound(err) {
		return "", err
	}
	start := time.Now()
	pr, pw := io.Pipe()
	written := make(chan image.IncusImageResult, 1)
	go func() {
		res, err := image.WriteIncusImage(ctx, pw, toplevel)
		written <- res
		pw.CloseWithError(err)
	}()
	fp, err := c.ImportImage(ctx, pr, "")
	_ = pr.CloseWithError(errors.New("the upload ended"))
	res := <-written
	switch {
	case errors.Is(err, incusapi.ErrImageExists):
		// Another node of the same system imported it: name it too.
		fp = res.Fingerprint
	case err != nil:
		return "", err
	case fp != res.Fingerprint:
		return "", fmt.Errorf("the daemon made image %s of a tarball whose SHA-256 is %s", fp, res.Fingerprint)
	}
	tflog.Info(ctx, "incus image imported", map[string]any{"alias": alias, "fingerprint": fp, "bytes": res.Size,
		"paths": len(res.Paths), "seconds": time.Since(start).Seconds()})
	if err := c.CreateImageAlias(ctx, alias, fp, "fediversity: the system "+toplevel); err != nil {
		return "", fmt.Errorf("name image %s: %w", fp, err)
	}
	return fp, nil
}

func imageProperty(img *incusapi.Image) string {
	if img == nil {
		return ""
	}
	return img.Properties[image.IncusImageProperty]
}

// Update changes nothing on the daemon: only the submission check or the timeouts
// changed (every other change replaces the image).
func (r *incusImageResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state incusImageModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	refused, _ := kit.CheckSubmission(plan.SubDigest, plan.SubFile, "import the image of", plan.Node.ValueString())
	if resp.Diagnostics.Append(refused...); resp.Diagnostics.HasError() {
		resp.Diagnostics.Append(resp.State.Set(ctx, state)...) // nothing changed
		return
	}
	plan.ID, plan.System, plan.Alias, plan.Fingerprint, plan.Derivation = state.ID, state.System, state.Alias, state.Fingerprint, state.Derivation
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// Read checks that the alias still names the image. A missing alias removes the
// resource from state (the next apply imports the image again); a daemon that does not
// answer keeps the state, with a warning.
func (r *incusImageResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state incusImageModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || r.cfg == nil {
		return
	}
	diags, gone := r.refresh(ctx, &state)
	resp.Diagnostics.Append(diags...)
	if gone != nil {
		resp.Diagnostics.AddWarning("Incus image of node "+state.Node.ValueString()+" is gone",
			fmt.Sprintf("Alias %s (project %s) is no longer on the daemon (%v); the next apply imports the image again.",
				state.Alias.ValueString(), state.Project.ValueString(), gone))
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// refresh re-reads the alias into m (the provider's one refresh convention). gone is
// the daemon's not-found.
func (r *incusImageResource) refresh(ctx context.Context, m *incusImageModel) (diags diag.Diagnostics, gone error) {
	c, err := r.client(projectOrDefault(r.cfg, m.Project.ValueString()))
	if err == nil {
		var a *incusapi.ImageAlias
		a, err = c.GetImageAlias(ctx, m.Alias.ValueString())
		switch {
		case incusapi.IsNotFound(err):
			return nil, err
		case err == nil && a.Target != m.Fingerprint.ValueString():
			diags.AddWarning("Incus image alias moved",
				fmt.Sprintf("Node %s: alias %s now names image %s, not %s, which this resource imported. The alias is the image of the node's system; "+
					"the state now follows it.", m.Node.ValueString(), m.Alias.ValueString(), a.Target, m.Fingerprint.ValueString()))
			m.Fingerprint = types.StringValue(a.Target)
		}
	}
	if err != nil {
		diags.AddWarning("Unable to check the Incus image of node "+m.Node.ValueString(),
			fmt.Sprintf("Alias %s, phase read: %v. The state is kept as it was.", m.Alias.ValueString(), err))
	}
	return diags, nil
}

// Delete deletes the alias, then the image unless another alias names it (another
// node of the same system).
func (r *incusImageResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state incusImageModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := state.Timeouts.Delete(ctx, incusImageDeleteTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	project, alias, fp := projectOrDefault(r.cfg, state.Project.ValueString()), state.Alias.ValueString(), state.Fingerprint.ValueString()
	summary := "Unable to delete the Incus image of node " + state.Node.ValueString()
	subject := fmt.Sprintf("Node %s (image %s, project %s)", state.Node.ValueString(), alias, project)
	c, err := r.client(project)
	if err == nil {
		err = c.DeleteImageAlias(ctx, alias)
	}
	if err != nil {
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "delete-alias", err,
			fmt.Sprintf("Delete it by hand with `incus image alias delete --project %s %s`, and the image with `incus image delete --project %s %s`.", project, alias, project, fp)))
		return
	}
	img, err := c.GetImage(ctx, fp)
	switch {
	case incusapi.IsNotFound(err):
		return
	case err == nil && len(img.AliasNames()) > 0:
		tflog.Info(ctx, "incus image kept: another alias names it", map[string]any{"fingerprint": fp, "aliases": img.AliasNames()})
		return
	case err == nil:
		err = c.DeleteImage(ctx, fp)
	}
	if err != nil {
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "delete-image", err,
			fmt.Sprintf("The alias is gone; delete the image by hand with `incus image delete --project %s %s`.", project, fp)))
	}
}
