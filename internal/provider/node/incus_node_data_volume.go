package node

// The data volume of fediversity_incus_node: a custom storage volume made for the
// container and attached at the node's data path, so that the node's data is a member
// of its snapshot set (internal/transport/incus/set.go) and outlives the container. A
// host path disk cannot be snapshotted, so data kept on one is in no rollback point.

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	tfpath "github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
)

const (
	// dataVolumeDevice is the container's disk device that attaches the data volume; the
	// name is reserved (a device block may not use it) and the device is reported in
	// data_volume, not among the devices.
	dataVolumeDevice = "fediversity-data"
	// defaultDataPath is where a fediversity node keeps its state.
	defaultDataPath = "/var/lib/fediversity"
)

type incusDataVolumeModel struct {
	Path            types.String `tfsdk:"path"`
	Pool            types.String `tfsdk:"pool"`
	Size            types.String `tfsdk:"size"`
	Volume          types.String `tfsdk:"volume"`
	DeleteOnDestroy types.Bool   `tfsdk:"delete_on_destroy"`
}

// dataVolumeName is the custom volume a container's data lives on.
func dataVolumeName(container string) string { return container + "-data" }

// volumeSizeRe is what Incus takes as a volume size: a whole or decimal number with an
// optional byte unit (decimal kB…EB or binary KiB…EiB).
var volumeSizeRe = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(B|kB|MB|GB|TB|PB|EB|KiB|MiB|GiB|TiB|PiB|EiB)?$`)

func dataVolumeBlock() schema.SingleNestedBlock {
	return schema.SingleNestedBlock{
		MarkdownDescription: "A custom storage volume for the node's data, made with the container and attached at `path` before its first start " +
			"(as the disk device `" + dataVolumeDevice + "`, a reserved device name). Its data is in the node's Incus snapshot sets " +
			"(a `fediversity_node_switch` with `snapshot {}` snapshots it with the root disk and restores it with it), which a host path disk " +
			"never is. The volume is named `<name>-data`.\n\n" +
			"**On destroy the volume is kept** (unless `delete_on_destroy = true`): it holds the node's data, and a container is also destroyed " +
			"when it is replaced (a new image). A container created later under the same name takes the kept volume back, with its data " +
			"(the apply says so); one that another instance attaches is refused. Delete a kept volume by hand with " +
			"`incus storage volume delete <pool> <name>-data`.\n\n" +
			"Adding the block to an existing container is refused at plan time (the empty volume would hide what the container keeps at " +
			"`path`): replace the container (`-replace`, its root disk is lost) or copy the data over by hand. Removing the block detaches " +
			"the volume and keeps it.",
		Attributes: map[string]schema.Attribute{
			"path": schema.StringAttribute{
				Optional: true,
				Computed: true,
				Default:  stringdefault.StaticString(defaultDataPath),
				MarkdownDescription: "Where the volume appears in the container, an absolute path other than `/`. Default `" + defaultDataPath + "`. " +
					"Changing it moves the mount point in place; the data stays on the volume.",
				Validators: []validator.String{dataPathValidator{}},
			},
			"pool": schema.StringAttribute{
				Optional: true,
				Computed: true,
				MarkdownDescription: "Storage pool of the volume. Default: the pool of the container's root disk (its own `root` device, " +
					"else the last of its profiles that has one). Changing it deletes the container and creates a new one (the volume in the " +
					"old pool is kept or deleted as on destroy).",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplaceIf(
					// Only another pool: removing the block detaches the volume in place.
					func(_ context.Context, req planmodifier.StringRequest, resp *stringplanmodifier.RequiresReplaceIfFuncResponse) {
						resp.RequiresReplace = !req.PlanValue.IsNull() && !req.StateValue.IsNull()
					}, "Changing the pool replaces the container.", "Changing the pool replaces the container.")},
				Validators: []validator.String{nonEmptyNoSlash{}},
			},
			"size": schema.StringAttribute{
				Optional:      true,
				Computed:      true,
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
				MarkdownDescription: "Quota of the volume, e.g. `10GiB` (a number and a unit: B, kB…EB, KiB…EiB). Default: none (the pool's " +
					"`volume.size`, if any). Changing it resizes the volume in place; the storage driver may refuse to shrink it below its use.",
				Validators: []validator.String{volumeSizeValidator{}},
			},
			"volume": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The volume's name, `<name>-data`.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"delete_on_destroy": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
				MarkdownDescription: "Delete the volume, with its snapshots, when the container is destroyed. Default `false`: the volume is kept " +
					"(see above). Changing it changes nothing on the daemon.",
			},
		},
	}
}

type dataPathValidator struct{}

func (dataPathValidator) Description(context.Context) string {
	return "an absolute, clean path other than /"
}
func (v dataPathValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }
func (dataPathValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if msg := dataPathProblem(req.ConfigValue.ValueString()); msg != "" {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid data_volume path", msg)
	}
}

func dataPathProblem(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("data_volume.path %q must be absolute, e.g. %q.", p, defaultDataPath)
	case p == "/":
		return "data_volume.path must not be / (the root disk is there); give the node's data directory, e.g. \"" + defaultDataPath + "\"."
	case path.Clean(p) != p:
		return fmt.Sprintf("data_volume.path %q is not clean (no trailing slash, no . or .. parts, no double slashes): write %q.", p, path.Clean(p))
	}
	return ""
}

type volumeSizeValidator struct{}

func (volumeSizeValidator) Description(context.Context) string {
	return "a size like 10GiB"
}
func (v volumeSizeValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (volumeSizeValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if s := req.ConfigValue.ValueString(); !volumeSizeRe.MatchString(s) {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid data_volume size",
			fmt.Sprintf("data_volume.size %q is not a size: write a number and a unit, e.g. \"10GiB\" or \"500MB\" (units B, kB, MB, GB, TB, KiB, MiB, GiB, TiB).", s))
	}
}

type nonEmptyNoSlash struct{}

func (nonEmptyNoSlash) Description(context.Context) string { return "a storage pool name" }
func (v nonEmptyNoSlash) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (nonEmptyNoSlash) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if s := req.ConfigValue.ValueString(); s == "" || strings.ContainsAny(s, "/ \t") {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid data_volume pool",
			fmt.Sprintf("data_volume.pool %q is not a storage pool name; see `incus storage list`.", s))
	}
}

// rootDiskPool is the pool of the container's root disk: its own device at "/", else
// the last of its profiles whose devices have one (a later profile wins).
func rootDiskPool(ctx context.Context, c *incusapi.Client, devices map[string]map[string]string, profiles []string) (string, error) {
	if p := rootPoolOf(devices); p != "" {
		return p, nil
	}
	merged := map[string]map[string]string{}
	for _, name := range profiles {
		devs, err := c.ProfileDevices(ctx, name)
		if err != nil {
			return "", fmt.Errorf("read profile %s for the pool of the root disk: %w", name, err)
		}
		for n, d := range devs {
			merged[n] = d
		}
	}
	if p := rootPoolOf(merged); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("neither the container's devices nor its profiles (%s) have a root disk with a pool; set data_volume.pool", strings.Join(profiles, ", "))
}

func rootPoolOf(devices map[string]map[string]string) string {
	_, root, _ := incusapi.RootDisk(devices)
	return root["pool"]
}

// dataVolumeDeviceOf is the disk device that attaches the data volume.
func dataVolumeDeviceOf(dv *incusDataVolumeModel) map[string]string {
	return map[string]string{"type": "disk", "pool": dv.Pool.ValueString(), "source": dv.Volume.ValueString(), "path": dv.Path.ValueString()}
}

// prepareDataVolume makes the data volume of container name in pool (or takes back one a
// destroyed container of the same name left), before the container exists. created
// says whether it made the volume, so that a failed create can delete it again.
func prepareDataVolume(ctx context.Context, c *incusapi.Client, name string, dv *incusDataVolumeModel, diags *diag.Diagnostics) (created bool, ok bool) {
	pool, vol := dv.Pool.ValueString(), dv.Volume.ValueString()
	at := tfpath.Root("data_volume")
	subject := fmt.Sprintf("Container %s (project %s)", name, c.Project())
	existing, err := c.GetVolume(ctx, pool, vol)
	switch {
	case incusapi.IsNotFound(err):
		config := map[string]string{}
		if s := dv.Size.ValueString(); s != "" {
			config["size"] = s
		}
		if err := c.CreateVolume(ctx, pool, vol, "data of fediversity node container "+name, config); err != nil {
			diags.AddAttributeError(at, "Unable to create the data volume of Incus container "+name,
				fmt.Sprintf("%s: creating volume %s in pool %s failed: %v. Nothing was created; check the pool (`incus storage list`) and data_volume.size, then apply again.", subject, vol, pool, err))
			return false, false
		}
		return true, true
	case err != nil:
		diags.AddAttributeError(at, "Unable to create Incus container "+name,
			fmt.Sprintf("%s: reading volume %s in pool %s failed: %v. Nothing was created; check data_volume.pool (`incus storage list`).", subject, vol, pool, err))
		return false, false
	case len(existing.UsedBy) > 0:
		diags.AddAttributeError(at, "Unable to create Incus container "+name,
			fmt.Sprintf("%s: its data volume %s in pool %s already exists and is attached elsewhere (%s). Nothing was created; "+
				"give the container another name, or detach the volume there.", subject, vol, pool, strings.Join(existing.UsedBy, ", ")))
		return false, false
	}
	if s := dv.Size.ValueString(); s != "" && existing.Config["size"] != s {
		if err := c.PatchVolumeConfig(ctx, pool, vol, map[string]string{"size": s}); err != nil {
			diags.AddAttributeError(at.AtName("size"), "Unable to create Incus container "+name,
				fmt.Sprintf("%s: resizing the kept data volume %s in pool %s to %s failed: %v. Nothing was created.", subject, vol, pool, s, err))
			return false, false
		}
	}
	diags.AddWarning(fmt.Sprintf("Incus container %s takes back its kept data volume", name),
		fmt.Sprintf("%s: volume %s in pool %s was left by a destroyed container of the same name (data_volume keeps it on destroy); "+
			"it is attached at %s with the data it holds. To start empty instead, delete it first: `incus storage volume delete --project %s %s %s`.",
			subject, vol, pool, dv.Path.ValueString(), c.Project(), pool, vol))
	return false, true
}

// readDataVolume reports the data volume the container attaches into m (nil when it
// attaches none), keeping delete_on_destroy from the prior model.
func readDataVolume(ctx context.Context, c *incusapi.Client, prior *incusDataVolumeModel, d map[string]string) *incusDataVolumeModel {
	if d == nil {
		return nil
	}
	out := &incusDataVolumeModel{
		Path: types.StringValue(d["path"]), Pool: types.StringValue(d["pool"]), Volume: types.StringValue(d["source"]),
		Size: types.StringNull(), DeleteOnDestroy: types.BoolValue(false),
	}
	if prior != nil {
		out.DeleteOnDestroy = prior.DeleteOnDestroy
		if out.DeleteOnDestroy.IsNull() || out.DeleteOnDestroy.IsUnknown() {
			out.DeleteOnDestroy = types.BoolValue(false)
		}
	}
	if v, err := c.GetVolume(ctx, d["pool"], d["source"]); err == nil && v.Config["size"] != "" {
		out.Size = types.StringValue(v.Config["size"])
	} else if err != nil && prior != nil {
		out.Size = prior.Size // unreadable now: keep what was known
	}
	if out.Size.IsUnknown() {
		out.Size = types.StringNull()
	}
	return out
}

// removeDataVolume does with the data volume what destroy promises, once the container
// is gone, and says what it did: a kept volume is named with how to delete it.
func removeDataVolume(ctx context.Context, c *incusapi.Client, name string, dv *incusDataVolumeModel, diags *diag.Diagnostics) {
	pool, vol := dv.Pool.ValueString(), dv.Volume.ValueString()
	subject := fmt.Sprintf("Container %s (project %s)", name, c.Project())
	if !dv.DeleteOnDestroy.ValueBool() {
		diags.AddWarning(fmt.Sprintf("Data volume %s of Incus container %s is kept", vol, name),
			fmt.Sprintf("%s is deleted; its data volume %s in pool %s is kept, with the data that was at %s and its snapshots "+
				"(data_volume.delete_on_destroy is false). A container created under the same name takes it back. "+
				"Delete it by hand if it is no longer needed: `incus storage volume delete --project %s %s %s`.",
				subject, vol, pool, dv.Path.ValueString(), c.Project(), pool, vol))
		return
	}
	err := c.DeleteVolume(ctx, pool, vol)
	if err != nil && !incusapi.IsNotFound(err) {
		diags.AddError(fmt.Sprintf("Unable to delete data volume %s of Incus container %s", vol, name),
			fmt.Sprintf("%s is deleted, but deleting its data volume %s in pool %s (data_volume.delete_on_destroy) failed: %v. "+
				"Delete it by hand: `incus storage volume delete --project %s %s %s`.", subject, vol, pool, err, c.Project(), pool, vol))
		return
	}
	diags.AddWarning(fmt.Sprintf("Data volume %s of Incus container %s is deleted", vol, name),
		fmt.Sprintf("%s is deleted, and so is its data volume %s in pool %s with its snapshots (data_volume.delete_on_destroy = true).", subject, vol, pool))
}

// planDataVolume plans the volume's name, and refuses to add a data volume to an
// existing container: the empty volume would hide what the container keeps at its path.
func (r *incusNodeResource) planDataVolume(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	var dv *incusDataVolumeModel
	var name types.String
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, tfpath.Root("data_volume"), &dv)...)
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, tfpath.Root("name"), &name)...)
	if resp.Diagnostics.HasError() || dv == nil {
		return
	}
	if !name.IsUnknown() {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, tfpath.Root("data_volume").AtName("volume"), types.StringValue(dataVolumeName(name.ValueString())))...)
	}
	if req.State.Raw.IsNull() {
		return
	}
	var prior *incusDataVolumeModel
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, tfpath.Root("data_volume"), &prior)...)
	if resp.Diagnostics.HasError() || prior != nil {
		return
	}
	// A replacement (another image, project or name) starts from an empty container anyway.
	var planned, state incusNodeModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &planned)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !planned.Name.Equal(state.Name) || !planned.Image.Equal(state.Image) || len(resp.RequiresReplace) > 0 {
		return
	}
	at := defaultDataPath
	if !dv.Path.IsNull() && !dv.Path.IsUnknown() {
		at = dv.Path.ValueString()
	}
	resp.Diagnostics.AddAttributeError(tfpath.Root("data_volume"), "data_volume cannot be added to an existing container",
		fmt.Sprintf("Container %s (project %s) exists without a data volume: an empty volume attached at %s would hide what the node keeps there. "+
			"Nothing was changed. Either replace the container (`-replace=<address>`; its root disk, and the data on it, is lost), "+
			"or leave data_volume out for this container (modules/tf-incus: data_volume = { enabled = false } in the node's roster entry) "+
			"and move the data to a volume by hand.", state.Name.ValueString(), state.Project.ValueString(), at))
}
