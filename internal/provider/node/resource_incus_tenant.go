package node

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

var (
	_ resource.Resource                   = &incusTenantResource{}
	_ resource.ResourceWithConfigure      = &incusTenantResource{}
	_ resource.ResourceWithValidateConfig = &incusTenantResource{}
	_ resource.ResourceWithModifyPlan     = &incusTenantResource{}
)

// NewIncusTenantResource is the constructor of fediversity_incus_tenant.
func NewIncusTenantResource() resource.Resource { return &incusTenantResource{} }

type incusTenantResource struct{ cfg *kit.Config }

type incusTenantModel struct {
	ID              types.String `tfsdk:"id"`
	Name            types.String `tfsdk:"name"`
	Description     types.String `tfsdk:"description"`
	Limits          types.Map    `tfsdk:"limits"`
	ContainerLimits types.Map    `tfsdk:"container_limits"`
	Pool            types.String `tfsdk:"pool"`
	Network         types.String `tfsdk:"network"`
	Devices         types.Map    `tfsdk:"devices"`
	Project         types.String `tfsdk:"project"`
	Profile         types.String `tfsdk:"profile"`
}

// tenantFeatures are the project features a tenant's project is made with: its own
// profiles and storage volumes (the nodes' data volumes, named after their containers,
// do not meet another tenant's of the same name), and the default project's images and
// networks (the images a group's nodes are made from are imported once; the networks
// belong to the operator's address management).
var tenantFeatures = map[string]string{
	"features.images":          "false",
	"features.profiles":        "true",
	"features.storage.volumes": "true",
	"features.storage.buckets": "true",
	"features.networks":        "false",
	"features.networks.zones":  "false",
}

// tenantProfile is the profile of the tenant's project that its nodes' containers use:
// the project's own default profile, so a container made in the project with the
// default profiles gets it.
const tenantProfile = "default"

// tenantNIC is the name of the network device the tenant's profile gives a container
// on the tenant's network.
const tenantNIC = "eth0"

// tenantMarker is the project configuration key that says which tenant a project is: a
// project kept on destroy for the volumes it holds is taken back by a tenant of the same
// name only when it carries it, never a project someone else made.
const tenantMarker = "user.fediversity.tenant"

func (r *incusTenantResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_incus_tenant"
}

// deviceMapType is the type of a profile's devices as Incus writes them: each device's
// name to its options, `type` among them.
var deviceMapType = types.MapType{ElemType: types.StringType}

func (r *incusTenantResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	emptyMap := types.MapValueMust(types.StringType, map[string]attr.Value{})
	resp.Schema = schema.Schema{
		MarkdownDescription: "The shared resources of one tenant on Incus (method `tf-incus-operator`, see " +
			"[per-tenant resources](../incus-nodes.md#incus-tenant)): an Incus project named after the tenant, with the tenant's limits, " +
			"and the project's default profile, which every container of the tenant's nodes uses: its root disk on `pool`, the " +
			"limits of one container, and, when `network` is set, `eth0` on that existing network.\n\n" +
			"The project has its own profiles and storage volumes (a node's data volume is the tenant's; two tenants may both have " +
			"a `web01`), and uses the default project's images and networks: an image is imported once however many tenants use it, " +
			"and networks and their addresses belong to the operator's address management, not to this resource.\n\n" +
			"Destroy deletes the project. When it still holds data volumes that their containers' destroy kept (`data_volume`'s " +
			"default), the project is kept for them: it leaves the state with a warning naming each volume and the commands that " +
			"delete them, and a tenant of the same name takes it back later (the project carries `" + tenantMarker + "`), with " +
			"the volumes, which containers made again under their nodes' names take back. The tenant's data is never deleted " +
			"behind the operator's back. Anything else left in the project (an instance, an image) fails the destroy, naming it.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, MarkdownDescription: "`incus://local/<project>`.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "The tenant, and the name of its Incus project: letters, digits, `-` and `_`, at most 63 characters. " +
					"Changing it makes another project (and so moves every container of the tenant).",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators: []validator.String{stringvalidator.RegexMatches(regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,62}$`),
					"must be an Incus project name: letters, digits, '-' and '_', starting with a letter or digit, at most 63 characters"),
					stringvalidator.NoneOf("default")},
			},
			"description": schema.StringAttribute{
				Optional: true, Computed: true,
				MarkdownDescription: "The project's description. Default: `fediversity tenant <name>`. Changing it updates the project in place.",
			},
			"limits": schema.MapAttribute{
				Optional: true, Computed: true, ElementType: types.StringType,
				Default: mapdefault.StaticValue(emptyMap),
				MarkdownDescription: "The tenant's limits: the project's `limits.*` keys without their prefix, e.g. " +
					"`{ instances = \"10\", cpu = \"8\", memory = \"16GiB\", disk = \"200GiB\" }`. Incus refuses a container that would " +
					"go past one (and, with `cpu`, `memory` or `disk`, a container without its own limit of that kind: set it in " +
					"`container_limits`). Changing them updates the project in place; a limit below what the tenant uses is refused.",
			},
			"container_limits": schema.MapAttribute{
				Optional: true, Computed: true, ElementType: types.StringType,
				Default: mapdefault.StaticValue(emptyMap),
				MarkdownDescription: "Limits of each of the tenant's containers, set in the tenant's profile: `limits.*` keys without their " +
					"prefix, e.g. `{ cpu = \"2\", memory = \"2GiB\" }`. A container's own `limits` win. Changing them updates the profile, " +
					"and so the running containers, in place.",
			},
			"pool": schema.StringAttribute{
				Optional: true, Computed: true,
				MarkdownDescription: "Storage pool of the containers' root disks (the profile's `root` device). Default: the pool of the root " +
					"disk of the default project's default profile. Changing it updates the profile; Incus refuses that while a container uses it.",
			},
			"network": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "An existing network of the default project that the tenant's containers join as `eth0` (the profile's " +
					"`nic` device). Unset: the profile gives no network device. The network itself is the operator's.",
			},
			"devices": schema.MapAttribute{
				Optional: true, Computed: true, ElementType: deviceMapType,
				Default: mapdefault.StaticValue(types.MapValueMust(deviceMapType, map[string]attr.Value{})),
				MarkdownDescription: "More devices of the tenant's profile, which every container of the tenant gets, as Incus writes a profile's " +
					"devices: each device's name to its options, `type` among them (`proxy` or `disk`). For a service every node of the " +
					"tenant reaches where its configuration names it, e.g. the SPIRE server at the node's own `127.0.0.1:8081`: " +
					"`{ spire = { type = \"proxy\", listen = \"tcp:127.0.0.1:8081\", connect = \"tcp:<server>:8081\", bind = \"instance\" } }` " +
					"(`bind = \"instance\"`: the container listens, the host connects). `root` and `" + tenantNIC + "` are the profile's own " +
					"(`pool` and `network`). A container's own device of the same name wins. Changing them updates the profile, and so the " +
					"running containers, in place.",
			},
			"project": schema.StringAttribute{
				Computed: true, MarkdownDescription: "The project, for `fediversity_incus_node`'s `project`.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"profile": schema.StringAttribute{
				Computed: true, MarkdownDescription: "The profile of the project that the tenant's containers use (`default`).",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
		},
	}
}

func (r *incusTenantResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	kit.ConfigureObject(&r.cfg, req.ProviderData, "fediversity_incus_tenant", &resp.Diagnostics)
}

// ValidateConfig checks the limit names at plan time.
func (r *incusTenantResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m incusTenantModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for _, attr := range []struct {
		name string
		m    types.Map
	}{{"limits", m.Limits}, {"container_limits", m.ContainerLimits}} {
		for key := range knownStrings(attr.m) {
			if strings.HasPrefix(key, "limits.") || key == "" || strings.TrimSpace(key) != key {
				resp.Diagnostics.AddAttributeError(path.Root(attr.name).AtMapKey(key), "Invalid limit name",
					fmt.Sprintf("%s key %q: write the limit without its \"limits.\" prefix, e.g. %s = { memory = \"1GiB\" }.", attr.name, key, attr.name))
			}
		}
	}
	if m.Devices.IsNull() || m.Devices.IsUnknown() {
		return
	}
	for name, v := range m.Devices.Elements() {
		at := path.Root("devices").AtMapKey(name)
		for _, msg := range tenantDeviceProblems(name, v) {
			resp.Diagnostics.AddAttributeError(at, "Invalid tenant device", fmt.Sprintf("devices[%q]: %s.", name, msg))
		}
	}
}

// tenantDeviceProblems lists what is wrong with device name of the tenant's profile:
// a name the profile's own devices use, or a type or options a container's device of
// that type would be refused for (resource_incus_node.go's checks).
func tenantDeviceProblems(name string, v attr.Value) []string {
	if msg := deviceNameProblem(name); msg != "" {
		return []string{msg}
	}
	if name == "root" || name == tenantNIC {
		return []string{fmt.Sprintf("%q is the tenant profile's own device (set by pool and network); give this device another name", name)}
	}
	opts, ok := v.(types.Map)
	if !ok || opts.IsUnknown() {
		return nil
	}
	props := knownStrings(opts)
	typ, ok := props["type"]
	if !ok {
		return []string{"a device needs its `type` among its options (proxy or disk)"}
	}
	delete(props, "type")
	switch typ {
	case "\x00unknown":
		return nil
	case "proxy", "disk":
		return deviceProblems(typ, props, opts)
	}
	return []string{fmt.Sprintf("type %q: the tenant's profile takes proxy and disk devices", typ)}
}

// ModifyPlan plans the project, the profile and the id from the name, and the default
// pool, so that the nodes' containers know their project at plan.
func (r *incusTenantResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan incusTenantModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.Name.IsUnknown() {
		return
	}
	name := plan.Name.ValueString()
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("project"), types.StringValue(name))...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("profile"), types.StringValue(tenantProfile))...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("id"), types.StringValue(tenantID(name)))...)
	if plan.Description.IsUnknown() {
		var configured types.String
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("description"), &configured)...)
		if configured.IsNull() {
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("description"), types.StringValue("fediversity tenant "+name))...)
		}
	}
	if plan.Pool.IsUnknown() && r.cfg != nil {
		var configured types.String
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("pool"), &configured)...)
		if configured.IsNull() {
			if pool, err := r.defaultPool(ctx); err == nil {
				resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("pool"), types.StringValue(pool))...)
			}
		}
	}
}

func tenantID(project string) string { return fmt.Sprintf("incus://%s/%s", kit.LocalRemote, project) }

func (r *incusTenantResource) client(project string) (*incusapi.Client, error) {
	if r.cfg == nil {
		return nil, kit.ErrNotConfigured
	}
	c, err := r.cfg.IncusClient()
	if err != nil {
		return nil, fmt.Errorf("connect to the Incus API (%s): %w; check the provider's incus block or INCUS_SOCKET", kit.DescribeIncus(r.cfg), err)
	}
	return c.WithProject(project), nil
}

// defaultPool is the pool of the root disk of the default project's default profile.
func (r *incusTenantResource) defaultPool(ctx context.Context) (string, error) {
	c, err := r.client("default")
	if err != nil {
		return "", err
	}
	return rootDiskPool(ctx, c, nil, []string{"default"})
}

// projectConfig is the project's configuration: the tenant's features and limits.
func projectConfig(ctx context.Context, m incusTenantModel, diags *diag.Diagnostics) map[string]string {
	out := map[string]string{}
	for k, v := range tenantFeatures {
		out[k] = v
	}
	out[tenantMarker] = m.Name.ValueString()
	for k, v := range mapStrings(ctx, m.Limits, diags) {
		out["limits."+k] = v
	}
	return out
}

// profileOf is the tenant's profile: the root disk, the network device, and the limits
// of each container.
func profileOf(ctx context.Context, m incusTenantModel, diags *diag.Diagnostics) incusapi.Profile {
	p := incusapi.Profile{
		Description: "fediversity tenant " + m.Name.ValueString() + ": the profile of its containers",
		Config:      map[string]string{},
		Devices:     map[string]map[string]string{"root": {"type": "disk", "path": "/", "pool": m.Pool.ValueString()}},
	}
	for k, v := range mapStrings(ctx, m.ContainerLimits, diags) {
		p.Config["limits."+k] = v
	}
	if n := m.Network; !n.IsNull() && n.ValueString() != "" {
		p.Devices[tenantNIC] = map[string]string{"type": "nic", "name": tenantNIC, "network": n.ValueString()}
	}
	if !m.Devices.IsNull() && !m.Devices.IsUnknown() {
		for name, v := range m.Devices.Elements() {
			if opts, ok := v.(types.Map); ok {
				p.Devices[name] = mapStrings(ctx, opts, diags)
			}
		}
	}
	return p
}

func mapStrings(ctx context.Context, m types.Map, diags *diag.Diagnostics) map[string]string {
	out := map[string]string{}
	if m.IsNull() || m.IsUnknown() {
		return out
	}
	diags.Append(m.ElementsAs(ctx, &out, false)...)
	return out
}

func (r *incusTenantResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan incusTenantModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := plan.Name.ValueString()
	summary, subject := "Unable to create the Incus project of tenant "+name, "Tenant "+name
	c, err := r.client(name)
	if err == nil && (plan.Pool.IsUnknown() || plan.Pool.IsNull()) {
		var pool string
		if pool, err = r.defaultPool(ctx); err == nil {
			plan.Pool = types.StringValue(pool)
		}
	}
	if err != nil {
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "connect", err, "Nothing was created. Set pool if the default profile has no root disk."))
		return
	}
	if plan.Description.IsUnknown() || plan.Description.IsNull() {
		plan.Description = types.StringValue("fediversity tenant " + name)
	}
	config, profile := projectConfig(ctx, plan, &resp.Diagnostics), profileOf(ctx, plan, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	existing, err := c.GetProject(ctx, name)
	switch {
	case incusapi.IsNotFound(err):
		if err := c.CreateProject(ctx, incusapi.Project{Name: name, Description: plan.Description.ValueString(), Config: config}); err != nil {
			resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "create-project", err, "Nothing was created; fix the cause and apply again."))
			return
		}
		if err := c.UpdateProfile(ctx, tenantProfile, profile); err != nil {
			detail := "The project was deleted again; fix the cause and apply again."
			if derr := c.DeleteProject(ctx, name); derr != nil {
				detail = fmt.Sprintf("The project could not be deleted again (%v); delete it with `incus project delete %s`.", derr, name)
			}
			resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "write-profile", err, detail))
			return
		}
	case err != nil:
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "read-project", err, "Nothing was created; check the provider's incus block or INCUS_SOCKET and apply again."))
		return
	case existing.Config[tenantMarker] != name:
		resp.Diagnostics.AddAttributeError(path.Root("name"), summary, fmt.Sprintf(
			"%s: Incus already has a project %s, and it is not this tenant's (its %s is %q). Nothing was changed. "+
				"Give the tenant another name; or, if that project is this tenant's (made by an earlier version of the provider), "+
				"mark it with `incus project set %s %s=%s` and apply again: the tenant then takes it, with what it holds.",
			subject, name, tenantMarker, existing.Config[tenantMarker], name, tenantMarker, name))
		return
	default:
		// The tenant's own project, kept by an earlier destroy for the data volumes it
		// still holds: taken back as it is, with the tenant's settings.
		if err := c.UpdateProject(ctx, name, incusapi.Project{Description: plan.Description.ValueString(), Config: config}); err != nil {
			resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "update-kept-project", err, "Nothing was changed; the kept project keeps its previous settings."))
			return
		}
		if err := c.UpdateProfile(ctx, tenantProfile, profile); err != nil {
			resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "write-profile", err, "The kept project took the tenant's limits; its profile keeps its previous settings. Fix the cause and apply again."))
			return
		}
		vols, _ := keptVolumes(existing.UsedBy)
		resp.Diagnostics.AddWarning("Tenant "+name+" takes back its kept Incus project",
			fmt.Sprintf("Project %s was kept by an earlier destroy of the tenant, for the data volumes it still holds (%s); the tenant takes it "+
				"back with them, and a container made again under the name of its volume's node takes its data back.", name, volumeList(vols)))
	}
	plan.Project, plan.Profile, plan.ID = types.StringValue(name), types.StringValue(tenantProfile), types.StringValue(tenantID(name))
	diags, gone := r.refresh(ctx, &plan, c)
	resp.Diagnostics.Append(diags...)
	if gone != nil {
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "read", gone, "It vanished right after it was created."))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// refresh reads the project and its profile into m (the provider's one refresh
// convention). gone is the daemon's not-found of the project.
func (r *incusTenantResource) refresh(ctx context.Context, m *incusTenantModel, c *incusapi.Client) (diags diag.Diagnostics, gone error) {
	name := m.Name.ValueString()
	p, err := c.GetProject(ctx, name)
	if incusapi.IsNotFound(err) {
		return nil, err
	}
	if err != nil {
		diags.AddError("Unable to read the Incus project of tenant "+name, kit.FailureDetail("Tenant "+name, "read", err, "Nothing was changed."))
		return diags, nil
	}
	m.Description = types.StringValue(p.Description)
	limits := map[string]attr.Value{}
	for k, v := range p.Config {
		if rest, ok := strings.CutPrefix(k, "limits."); ok {
			limits[rest] = types.StringValue(v)
		}
	}
	m.Limits = types.MapValueMust(types.StringType, limits)
	prof, err := c.GetProfile(ctx, tenantProfile)
	if err != nil {
		diags.AddError("Unable to read the profile of tenant "+name, kit.FailureDetail("Tenant "+name, "read-profile", err, "Nothing was changed."))
		return diags, nil
	}
	climits := map[string]attr.Value{}
	for k, v := range prof.Config {
		if rest, ok := strings.CutPrefix(k, "limits."); ok {
			climits[rest] = types.StringValue(v)
		}
	}
	m.ContainerLimits = types.MapValueMust(types.StringType, climits)
	_, root, _ := incusapi.RootDisk(prof.Devices)
	m.Pool = types.StringValue(root["pool"])
	if nic, ok := prof.Devices[tenantNIC]; ok {
		m.Network = types.StringValue(nic["network"])
	} else {
		m.Network = types.StringNull()
	}
	devices := map[string]attr.Value{}
	for name, opts := range prof.Devices {
		if name == "root" || name == tenantNIC {
			continue
		}
		o := map[string]attr.Value{}
		for k, v := range opts {
			o[k] = types.StringValue(v)
		}
		devices[name] = types.MapValueMust(types.StringType, o)
	}
	m.Devices = types.MapValueMust(deviceMapType, devices)
	m.Project, m.Profile, m.ID = types.StringValue(name), types.StringValue(tenantProfile), types.StringValue(tenantID(name))
	return diags, nil
}

func (r *incusTenantResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state incusTenantModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c, err := r.client(state.Name.ValueString())
	if err != nil {
		resp.Diagnostics.AddError("Unable to read the Incus project of tenant "+state.Name.ValueString(), err.Error())
		return
	}
	diags, gone := r.refresh(ctx, &state, c)
	resp.Diagnostics.Append(diags...)
	if gone != nil {
		resp.Diagnostics.AddWarning("Incus project of tenant "+state.Name.ValueString()+" is gone",
			fmt.Sprintf("Project %s was deleted outside Terraform (%v). It is removed from state; the next apply creates it again.", state.Name.ValueString(), gone))
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *incusTenantResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan incusTenantModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := plan.Name.ValueString()
	summary, subject := "Unable to update the Incus project of tenant "+name, "Tenant "+name
	c, err := r.client(name)
	if err != nil {
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "connect", err, "Nothing was changed."))
		return
	}
	config, profile := projectConfig(ctx, plan, &resp.Diagnostics), profileOf(ctx, plan, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := c.UpdateProject(ctx, name, incusapi.Project{Description: plan.Description.ValueString(), Config: config}); err != nil {
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "update-project", err, "The project keeps its previous limits; a limit below what the tenant uses is refused."))
		return
	}
	if err := c.UpdateProfile(ctx, tenantProfile, profile); err != nil {
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "update-profile", err, "The project's limits were updated; its profile keeps its previous settings."))
		return
	}
	diags, _ := r.refresh(ctx, &plan, c)
	resp.Diagnostics.Append(diags...)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// Delete deletes the project. Incus refuses while it holds anything but its default
// profile. When all it still holds are custom volumes, the data volumes that their
// containers' destroy kept (data_volume's default), the project is kept for them: it
// leaves the state with a warning naming each volume and how to delete it, and a tenant
// of the same name takes it back. Anything else it holds is an error naming it; nothing
// is deleted to make room.
func (r *incusTenantResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state incusTenantModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := state.Name.ValueString()
	c, err := r.client(name)
	if err == nil {
		err = c.DeleteProject(ctx, name)
	}
	if err == nil {
		return
	}
	var vols []poolVolume
	var others []string
	if p, gerr := c.GetProject(ctx, name); gerr == nil {
		vols, others = keptVolumes(p.UsedBy)
	}
	if len(vols) > 0 && len(others) == 0 {
		var cmds []string
		for _, v := range vols {
			cmds = append(cmds, fmt.Sprintf("`incus storage volume delete --project %s %s %s`", name, v.pool, v.volume))
		}
		resp.Diagnostics.AddWarning("Incus project of tenant "+name+" is kept for its data volumes",
			fmt.Sprintf("Tenant %s has no node left, but its project %s still holds the data volumes %s, which their containers' destroy kept "+
				"(data_volume.delete_on_destroy is false). The project is kept with them, and leaves the state: nothing of the tenant's data is deleted. "+
				"When a node of the tenant is enabled again, the tenant takes the project back, and a container made again under its node's name its volume. "+
				"If the data is no longer needed, delete them by hand: %s, then `incus project delete %s`.",
				name, name, volumeList(vols), strings.Join(cmds, ", "), name))
		return
	}
	what := "Delete what it still holds, then apply again."
	if len(vols)+len(others) > 0 {
		left := append(others, volumeURLs(vols)...)
		sort.Strings(left)
		what = fmt.Sprintf("It still holds %s. An instance or image there is not one this tenant's module made: move or delete it "+
			"(a data volume its node's container kept is deleted only by hand, `incus storage volume delete --project %s <pool> <volume>`, "+
			"once its data is no longer needed); then apply again.", strings.Join(left, ", "), name)
	}
	resp.Diagnostics.AddError("Unable to delete the Incus project of tenant "+name, kit.FailureDetail("Tenant "+name, "delete-project", err, what))
}

// poolVolume is a custom storage volume of a project, as its used_by names it.
type poolVolume struct{ pool, volume, url string }

// keptVolumes splits what a project holds (its used_by) into its custom volumes and the
// rest, leaving out its default profile, which goes with it.
func keptVolumes(usedBy []string) (vols []poolVolume, others []string) {
	for _, u := range usedBy {
		if p, _, _ := strings.Cut(u, "?"); p == "/1.0/profiles/"+tenantProfile {
			continue
		}
		if pool, vol, ok := incusapi.CustomVolumeOf(u); ok {
			vols = append(vols, poolVolume{pool: pool, volume: vol, url: u})
			continue
		}
		others = append(others, u)
	}
	sort.Slice(vols, func(i, j int) bool { return vols[i].pool+"/"+vols[i].volume < vols[j].pool+"/"+vols[j].volume })
	sort.Strings(others)
	return vols, others
}

func volumeList(vols []poolVolume) string {
	var out []string
	for _, v := range vols {
		out = append(out, fmt.Sprintf("%s (pool %s)", v.volume, v.pool))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func volumeURLs(vols []poolVolume) []string {
	var out []string
	for _, v := range vols {
		out = append(out, v.url)
	}
	return out
}
