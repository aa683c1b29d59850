package node

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
	incustransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/incus"
)

var (
	_ resource.Resource                   = &incusNodeResource{}
	_ resource.ResourceWithConfigure      = &incusNodeResource{}
	_ resource.ResourceWithImportState    = &incusNodeResource{}
	_ resource.ResourceWithValidateConfig = &incusNodeResource{}
	_ resource.ResourceWithModifyPlan     = &incusNodeResource{}
)

// NewIncusNodeResource is the constructor of fediversity_incus_node.
func NewIncusNodeResource() resource.Resource { return &incusNodeResource{} }

type incusNodeResource struct {
	cfg *kit.Config
}

const (
	defaultIncusNodeCreateTimeout = 10 * time.Minute
	defaultIncusNodeDeleteTimeout = 5 * time.Minute
	// defaultIncusNodeWait bounds the wait for systemd when neither node_wait nor the
	// provider's timings.node_wait is set (the same default as the deploy's node wait).
	defaultIncusNodeWait = deploybody.DefaultNodeWait
	// incusNodeCleanStop is how long destroy lets the container shut down cleanly
	// before it stops it by force.
	incusNodeCleanStop   = 30 * time.Second
	incusNodeSystemdPoll = 500 * time.Millisecond
)

type incusNodeModel struct {
	ID               types.String          `tfsdk:"id"`
	Name             types.String          `tfsdk:"name"`
	Image            types.String          `tfsdk:"image"`
	ReplaceOnImage   types.Bool            `tfsdk:"replace_on_image_change"`
	Project          types.String          `tfsdk:"project"`
	Profiles         types.List            `tfsdk:"profiles"`
	Config           types.Map             `tfsdk:"config"`
	Limits           types.Map             `tfsdk:"limits"`
	Devices          []incusDeviceModel    `tfsdk:"device"`
	DataVolume       *incusDataVolumeModel `tfsdk:"data_volume"`
	NodeWait         types.String          `tfsdk:"node_wait"`
	Instance         types.String          `tfsdk:"instance"`
	ImageFingerprint types.String          `tfsdk:"image_fingerprint"`
	Status           types.String          `tfsdk:"status"`
	Timeouts         timeouts.Value        `tfsdk:"timeouts"`
}

// nullUnknowns makes the computed values a failed read could not fill null, so that the
// model can still be stored.
func (m *incusNodeModel) nullUnknowns() {
	for _, v := range []*types.String{&m.ID, &m.Instance, &m.ImageFingerprint, &m.Status} {
		if v.IsUnknown() {
			*v = types.StringNull()
		}
	}
}

type incusDeviceModel struct {
	Name       types.String `tfsdk:"name"`
	Type       types.String `tfsdk:"type"`
	Properties types.Map    `tfsdk:"properties"`
}

func (r *incusNodeResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_incus_node"
}

const (
	replacesContainer = "Changing it deletes the container and creates a new one."
	updatesInPlace    = "Changing it updates the container in place (devices are added and removed live); the node's system is untouched."
)

// incusNameRe is what Incus accepts as an instance name (a host name label): letters,
// digits and hyphens, starting with a letter, not ending with a hyphen, at most 63.
var incusNameRe = regexp.MustCompile(`^[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$`)

func (r *incusNodeResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	emptyMap := types.MapValueMust(types.StringType, map[string]attr.Value{})
	resp.Schema = schema.Schema{
		MarkdownDescription: "One Incus container for a node of a `tf-incus` group, created through the provider's own Incus client " +
			"(the daemon of the provider's `incus` block). Create makes the container from a local image, starts it and waits until " +
			"systemd in it answers `running` or `degraded` (bounded by `node_wait`), so that a `fediversity_node_switch` with " +
			"`incus { instance = …, project = … }` can deploy to it in the same apply. Read notices a container deleted outside " +
			"Terraform (it is removed from state with a warning and the next apply creates it again), and warns about a stopped one " +
			"(it is not started again behind the operator's back). Destroy stops the container " +
			"(cleanly for up to 30 s, then by force) and deletes it, within `timeouts.delete`.\n\n" +
			"**Why this resource exists.** The Incus provider's Go module cannot be used by this project (it may not depend on " +
			"`github.com/lxc/incus`), and a `tf-incus` group must create its containers in the same graph as the deploys that " +
			"target them. Where an operator already manages containers with another Incus provider, this resource is not needed: " +
			"pass those instances' names and projects to `fediversity_node_switch`'s `incus` block directly.\n\n" +
			"Import with `incus://local/<project>/<instance>` or a bare instance name (the provider's project).",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The container's address, `incus://local/<project>/<name>` (also its import ID).",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "Name of the container: letters, digits and hyphens, starting with a letter, at most 63 characters. " +
					replacesContainer,
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators: []validator.String{stringvalidator.RegexMatches(incusNameRe,
					"must be an Incus instance name: letters, digits and hyphens, starting with a letter, not ending with a hyphen, at most 63 characters")},
			},
			"image": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "The image on the provider's Incus daemon: an alias (e.g. `lab/debian`), or a fingerprint or a unique prefix of one. " +
					"Images on other servers (`images:debian/12`) are not fetched: import or copy the image to the daemon first. " +
					"The alias is resolved when the container is created; pointing the alias at a newer image later changes nothing. " +
					replacesContainer + " (With `replace_on_image_change = false`, changing it only records the image for a container made later.)",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplaceIf(replaceOnImageChange,
					"Changing it replaces the container unless replace_on_image_change is false.",
					"Changing it replaces the container unless `replace_on_image_change` is false.")},
				Validators: []validator.String{
					stringvalidator.LengthAtLeast(1),
					stringvalidator.RegexMatches(regexp.MustCompile(`^[^:]*$`),
						"must name an image on the provider's Incus daemon (an alias or fingerprint without a `remote:` prefix); copy a remote image there first with `incus image copy`"),
				},
			},
			"replace_on_image_change": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(true),
				MarkdownDescription: "Whether a changed `image` replaces the container (default `true`). `false` when the image only seeds " +
					"the container and the node's later systems arrive through `fediversity_node_switch`, as for an image of the node's own " +
					"system (`fediversity_incus_image`): a new image is then recorded and used only by a container made later (a replaced " +
					"or a new one), and the running container, with its state, is kept. Changing it changes nothing on the container.",
			},
			"project": schema.StringAttribute{
				Optional: true,
				Computed: true,
				MarkdownDescription: "Incus project of the container. Default: the provider's `incus.project`, then `default`. " +
					replacesContainer,
				// UseStateForUnknown first: an in-place change elsewhere must not make the
				// project unknown, which RequiresReplace would take for a new project.
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplace()},
				Validators: []validator.String{stringvalidator.RegexMatches(regexp.MustCompile(`^[^/\s]{1,63}$`),
					"must be an Incus project name: no slashes or spaces, at most 63 characters")},
			},
			"profiles": schema.ListAttribute{
				Optional:    true,
				Computed:    true,
				ElementType: types.StringType,
				Default:     listdefault.StaticValue(types.ListValueMust(types.StringType, []attr.Value{types.StringValue("default")})),
				MarkdownDescription: "Profiles applied to the container, in order (later ones win). Default `[\"default\"]`; `[]` applies none " +
					"(the container then needs its own root disk device). " + updatesInPlace,
				Validators: []validator.List{
					listvalidator.UniqueValues(),
					listvalidator.ValueStringsAre(stringvalidator.LengthAtLeast(1)),
				},
			},
			"config": schema.MapAttribute{
				Optional:    true,
				Computed:    true,
				ElementType: types.StringType,
				Default:     mapdefault.StaticValue(emptyMap),
				MarkdownDescription: "Instance configuration keys, e.g. `{ \"user.fediversity.node\" = \"web01\", \"security.nesting\" = \"true\" }`. " +
					"Limits go in `limits`; `volatile.*` and `image.*` keys belong to the daemon and `user.fediversity.set.*` keys (snapshot set manifests) to the deploy: " +
					"they are refused, not read back, and kept by an update. " +
					"The container's own keys are read back, so a key set or removed outside Terraform shows as a change. " + updatesInPlace,
			},
			"limits": schema.MapAttribute{
				Optional:    true,
				Computed:    true,
				ElementType: types.StringType,
				Default:     mapdefault.StaticValue(emptyMap),
				MarkdownDescription: "Resource limits, written as the `limits.*` keys without their prefix, e.g. `{ cpu = \"2\", memory = \"2GiB\", processes = \"2000\" }`. " +
					updatesInPlace,
			},
			"node_wait": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "How long create waits for systemd in the container to answer `running` or `degraded` (Go duration). " +
					"Default: the provider's `timings.node_wait`, then `2m`. A container that does not come up in time fails the apply and is " +
					"tainted, so the next apply replaces it. Changing it changes nothing on the container.",
			},
			"instance": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The instance name, for `fediversity_node_switch`'s `incus { instance = … }`.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"image_fingerprint": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The full fingerprint of the image the container was made from.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"status": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The container's status as the daemon last reported it (`Running`, `Stopped`, …).",
			},
		},
		Blocks: map[string]schema.Block{
			"device": schema.ListNestedBlock{
				MarkdownDescription: "A device of the container (repeatable). Types `disk` (a host path or a storage volume mounted in the container) " +
					"and `proxy` (a socket forwarded between host and container, e.g. the node's sshd on a loopback port). " +
					"Devices from profiles need not be repeated; one with the same name here overrides the profile's. " +
					"The container's own devices are read back. " + updatesInPlace,
				NestedObject: schema.NestedBlockObject{
					Attributes: map[string]schema.Attribute{
						"name": schema.StringAttribute{
							Required:            true,
							MarkdownDescription: "Device name, unique in the container (e.g. `ssh`, `data`).",
						},
						"type": schema.StringAttribute{
							Required:            true,
							MarkdownDescription: "`disk` or `proxy`.",
							Validators:          []validator.String{stringvalidator.OneOf("disk", "proxy")},
						},
						"properties": schema.MapAttribute{
							Required:    true,
							ElementType: types.StringType,
							MarkdownDescription: "The device's Incus options. `disk`: `path` and one of `source` (a host path or volume) or `pool`. " +
								"`proxy`: `listen` and `connect` as `tcp:<address>:<port>`, `udp:<address>:<port>` or `unix:<path>`, and usually `bind = \"host\"`.",
						},
					},
				},
			},
			"data_volume": dataVolumeBlock(),
			"timeouts":    timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true, Delete: true}),
		},
	}
}

func (r *incusNodeResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	kit.ConfigureObject(&r.cfg, req.ProviderData, "fediversity_incus_node", &resp.Diagnostics)
}

// ValidateConfig checks at plan time what does not need the daemon: config and limit
// keys, device names, types and their required options, and node_wait.
func (r *incusNodeResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	// A `dynamic "device"` block whose for_each is not known yet (a module's input while
	// Terraform validates the module) leaves the whole list unknown: the checks run again
	// at plan, when it is known.
	var devices types.List
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("device"), &devices)...)
	if resp.Diagnostics.HasError() || devices.IsUnknown() {
		return
	}
	var m incusNodeModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if v := m.NodeWait; !v.IsNull() && !v.IsUnknown() {
		if d, err := time.ParseDuration(v.ValueString()); err != nil || d <= 0 {
			resp.Diagnostics.AddAttributeError(path.Root("node_wait"), "Invalid duration",
				fmt.Sprintf("node_wait = %q is not a positive Go duration. Write it like \"90s\" or \"2m\".", v.ValueString()))
		}
	}
	for key := range knownStrings(m.Config) {
		at := path.Root("config").AtMapKey(key)
		switch {
		case strings.TrimSpace(key) != key || key == "":
			resp.Diagnostics.AddAttributeError(at, "Invalid Incus config key", fmt.Sprintf("config key %q is empty or has surrounding spaces.", key))
		case strings.HasPrefix(key, "limits."):
			resp.Diagnostics.AddAttributeError(at, "Limits go in `limits`",
				fmt.Sprintf("config key %q is a limit: write it as limits = { %q = … } instead, so that it is read back in one place.", key, strings.TrimPrefix(key, "limits.")))
		case strings.HasPrefix(key, "volatile.") || strings.HasPrefix(key, "image."):
			resp.Diagnostics.AddAttributeError(at, "Key belongs to the Incus daemon",
				fmt.Sprintf("config key %q is set by the daemon itself (volatile.* and image.* keys); remove it.", key))
		case strings.HasPrefix(key, incustransport.ManifestPrefix):
			resp.Diagnostics.AddAttributeError(at, "Key belongs to the deploy",
				fmt.Sprintf("config key %q is the manifest of a snapshot set, written by fediversity_node_switch's snapshot {} (%s* keys); remove it.", key, incustransport.ManifestPrefix))
		}
	}
	for key := range knownStrings(m.Limits) {
		if strings.HasPrefix(key, "limits.") || key == "" || strings.TrimSpace(key) != key {
			resp.Diagnostics.AddAttributeError(path.Root("limits").AtMapKey(key), "Invalid limit name",
				fmt.Sprintf("limits key %q: write the limit without its \"limits.\" prefix, e.g. limits = { memory = \"1GiB\" }.", key))
		}
	}
	seen := map[string]bool{}
	for i, d := range m.Devices {
		at := path.Root("device").AtListIndex(i)
		if !d.Name.IsUnknown() && !d.Name.IsNull() {
			name := d.Name.ValueString()
			if msg := deviceNameProblem(name); msg != "" {
				resp.Diagnostics.AddAttributeError(at.AtName("name"), "Invalid device name", fmt.Sprintf("device %q: %s.", name, msg))
			}
			if name == dataVolumeDevice {
				resp.Diagnostics.AddAttributeError(at.AtName("name"), "Reserved device name",
					fmt.Sprintf("device %q is the name of the disk that attaches data_volume; give this device another name.", name))
			}
			if seen[name] {
				resp.Diagnostics.AddAttributeError(at.AtName("name"), "Duplicate device name",
					fmt.Sprintf("Two device blocks are named %q; each device of a container needs its own name.", name))
			}
			seen[name] = true
		}
		if d.Type.IsUnknown() || d.Properties.IsUnknown() {
			continue
		}
		props := knownStrings(d.Properties)
		if dv := m.DataVolume; dv != nil && d.Type.ValueString() == "disk" && !dv.Path.IsUnknown() {
			want := dv.Path.ValueString()
			if dv.Path.IsNull() {
				want = defaultDataPath
			}
			if props["path"] == want {
				resp.Diagnostics.AddAttributeError(at.AtName("properties"), "Two disks at one path",
					fmt.Sprintf("device %q mounts at %s, where data_volume is attached. Drop the device (data_volume holds the node's data there, in its snapshot sets), "+
						"or move data_volume.path.", d.Name.ValueString(), want))
			}
		}
		for _, msg := range deviceProblems(d.Type.ValueString(), props, d.Properties) {
			resp.Diagnostics.AddAttributeError(at.AtName("properties"), "Invalid "+d.Type.ValueString()+" device",
				fmt.Sprintf("device %q: %s.", d.Name.ValueString(), msg))
		}
	}
}

// replaceOnImageChange replaces the container on a changed image unless the
// configuration says the image only seeds it (replace_on_image_change = false).
func replaceOnImageChange(ctx context.Context, req planmodifier.StringRequest, resp *stringplanmodifier.RequiresReplaceIfFuncResponse) {
	var replace types.Bool
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("replace_on_image_change"), &replace)...)
	resp.RequiresReplace = replace.IsNull() || replace.IsUnknown() || replace.ValueBool()
}

// knownStrings returns the known entries of a string map (keys are always known).
func knownStrings(m types.Map) map[string]string {
	out := map[string]string{}
	if m.IsNull() || m.IsUnknown() {
		return out
	}
	for k, v := range m.Elements() {
		if s, ok := v.(types.String); ok && !s.IsUnknown() && !s.IsNull() {
			out[k] = s.ValueString()
		} else {
			out[k] = "\x00unknown"
		}
	}
	return out
}

func deviceNameProblem(name string) string {
	switch {
	case name == "":
		return "the name is empty"
	case len(name) > 64:
		return "the name is longer than 64 characters"
	case strings.ContainsAny(name, "/\\ \t\n") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "-"):
		return "the name must not contain slashes or spaces, nor start with a dot or a hyphen"
	}
	return ""
}

// deviceProblems lists what is missing or malformed in a disk or proxy device. Values
// not yet known (marked "\x00unknown" by knownStrings) count as present.
func deviceProblems(typ string, props map[string]string, raw types.Map) []string {
	if raw.IsNull() {
		return []string{"properties is required"}
	}
	var out []string
	if _, ok := props["type"]; ok {
		out = append(out, "the type goes in the block's `type`, not in properties")
	}
	unknown := func(v string) bool { return v == "\x00unknown" }
	switch typ {
	case "disk":
		p, ok := props["path"]
		if !ok {
			out = append(out, "a disk needs `path` (where it appears in the container)")
		} else if !unknown(p) && !strings.HasPrefix(p, "/") {
			out = append(out, fmt.Sprintf("path %q must be absolute", p))
		}
		_, src := props["source"]
		_, pool := props["pool"]
		if !src && !pool {
			out = append(out, "a disk needs `source` (a host path or a volume) or `pool`")
		}
	case "proxy":
		for _, k := range []string{"listen", "connect"} {
			v, ok := props[k]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("a proxy needs `%s` (tcp:<address>:<port>, udp:<address>:<port> or unix:<path>)", k))
			case !unknown(v):
				if msg := proxyAddressProblem(v); msg != "" {
					out = append(out, fmt.Sprintf("%s %q: %s", k, v, msg))
				}
			}
		}
		if b, ok := props["bind"]; ok && !unknown(b) && b != "host" && b != "instance" {
			out = append(out, fmt.Sprintf("bind %q must be \"host\" or \"instance\"", b))
		}
	}
	return out
}

func proxyAddressProblem(v string) string {
	proto, rest, ok := strings.Cut(v, ":")
	if !ok {
		return "want tcp:<address>:<port>, udp:<address>:<port> or unix:<path>"
	}
	switch proto {
	case "unix":
		if rest == "" {
			return "the unix socket path is empty"
		}
	case "tcp", "udp":
		i := strings.LastIndexByte(rest, ':')
		if i < 0 || i == len(rest)-1 {
			return "want " + proto + ":<address>:<port> (a port, or a range like 8000-8010)"
		}
		for _, r := range rest[i+1:] {
			if !strings.ContainsRune("0123456789-,", r) {
				return "the port must be a number, a range or a list"
			}
		}
	default:
		return fmt.Sprintf("unknown protocol %q: want tcp, udp or unix", proto)
	}
	return ""
}

// ModifyPlan fills the project from the provider when the configuration leaves it out,
// so it is known at plan time (a node switch can use it in the same plan). A container
// made in another project (the provider's project changed) is replaced, as when the
// project attribute itself changes. For a new container it plans the instance name and
// id, and resolves the image, so the plan shows the fingerprint that create will use.
func (r *incusNodeResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.cfg == nil {
		return
	}
	var project types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("project"), &project)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if project.IsNull() {
		want := r.projectOrDefault("")
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("project"), types.StringValue(want))...)
		if !req.State.Raw.IsNull() {
			var prior types.String
			resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("project"), &prior)...)
			if !prior.IsNull() && prior.ValueString() != want {
				resp.RequiresReplace = append(resp.RequiresReplace, path.Root("project"))
			}
		}
		project = types.StringValue(want)
	}
	r.planDataVolume(ctx, req, resp)
	if !req.State.Raw.IsNull() || project.IsUnknown() {
		return
	}
	var image, name types.String
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("image"), &image)...)
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("name"), &name)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !name.IsUnknown() {
		// What a node switch's incus block takes, known before the container exists.
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("instance"), name)...)
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("id"),
			types.StringValue(fmt.Sprintf("incus://%s/%s/%s", kit.LocalRemote, project.ValueString(), name.ValueString())))...)
	}
	if image.IsUnknown() {
		return
	}
	c, err := r.client(project.ValueString())
	if err != nil {
		return // create reports it, with what to do
	}
	img, err := c.ResolveImage(ctx, image.ValueString())
	if err != nil {
		// A warning, not an error: another resource of the same apply may import the
		// image before this one is created.
		resp.Diagnostics.AddAttributeWarning(path.Root("image"), fmt.Sprintf("Image %q is not on the Incus daemon yet", image.ValueString()),
			fmt.Sprintf("Planning container %s (project %s): %v. The apply fails unless the image is imported before the container is created "+
				"(`incus image import`, `incus image copy`); check the alias with `incus image list --project %s`.",
				name.ValueString(), project.ValueString(), err, project.ValueString()))
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("image_fingerprint"), types.StringValue(img.Fingerprint))...)
}

func (r *incusNodeResource) projectOrDefault(p string) string {
	return projectOrDefault(r.cfg, p)
}

// client returns the provider's Incus client (built once in the provider's Configure)
// addressing project.
func (r *incusNodeResource) client(project string) (*incusapi.Client, error) {
	if r.cfg == nil {
		return nil, kit.ErrNotConfigured
	}
	c, err := r.cfg.IncusClient()
	if err != nil {
		return nil, fmt.Errorf("connect to the Incus API (%s): %w; check the provider's incus block or INCUS_SOCKET", kit.DescribeIncus(r.cfg), err)
	}
	return c.WithProject(project), nil
}

func (r *incusNodeResource) nodeWait(m incusNodeModel) time.Duration {
	if d, err := time.ParseDuration(m.NodeWait.ValueString()); err == nil && d > 0 {
		return d
	}
	if r.cfg != nil && r.cfg.Timings.NodeWait > 0 {
		return r.cfg.Timings.NodeWait
	}
	return defaultIncusNodeWait
}

func (r *incusNodeResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan incusNodeModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Create(ctx, defaultIncusNodeCreateTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	name, project := plan.Name.ValueString(), r.projectOrDefault(plan.Project.ValueString())
	summary := "Unable to create Incus container " + name
	subject := fmt.Sprintf("Container %s (project %s)", name, project)
	c, err := r.client(project)
	if err != nil {
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "connect", err, "Nothing was created."))
		return
	}
	// The image the plan showed is the one used, even if its alias moved since.
	ref := plan.Image.ValueString()
	if fp := plan.ImageFingerprint; !fp.IsUnknown() && !fp.IsNull() {
		ref = fp.ValueString()
	}
	img, err := c.ResolveImage(ctx, ref)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("image"), summary,
			kit.FailureDetail(subject, "resolve-image", err, fmt.Sprintf("Nothing was created. Import the image into the daemon (`incus image import`, `incus image copy`) "+
				"or give an alias or fingerprint that `incus image list --project %s` shows.", project)))
		return
	}
	if img.Type != "" && img.Type != "container" {
		resp.Diagnostics.AddAttributeError(path.Root("image"), summary,
			fmt.Sprintf("Image %q (%s) is a %s image; this resource makes containers. Give a container image.", plan.Image.ValueString(), img.Fingerprint, img.Type))
		return
	}
	create := incusapi.InstanceCreate{
		Name: name, Fingerprint: img.Fingerprint, Start: true,
		Profiles: incusStrings(ctx, plan.Profiles, &resp.Diagnostics),
		Config:   instanceConfigFrom(ctx, plan, &resp.Diagnostics),
		Devices:  devicesFrom(ctx, plan.Devices, &resp.Diagnostics),
	}
	if resp.Diagnostics.HasError() {
		return
	}
	if create.Profiles == nil {
		create.Profiles = []string{}
	}
	volumeCreated := false
	if dv := plan.DataVolume; dv != nil {
		// The volume is made and attached before the container's first start, so that
		// the node writes its data onto it from the beginning.
		if dv.Pool.IsNull() || dv.Pool.IsUnknown() || dv.Pool.ValueString() == "" {
			pool, err := rootDiskPool(ctx, c, create.Devices, create.Profiles)
			if err != nil {
				resp.Diagnostics.AddAttributeError(path.Root("data_volume").AtName("pool"), summary,
					fmt.Sprintf("%s: %v. Nothing was created.", subject, err))
				return
			}
			dv.Pool = types.StringValue(pool)
		}
		dv.Volume = types.StringValue(dataVolumeName(name))
		created, ok := prepareDataVolume(ctx, c, name, dv, &resp.Diagnostics)
		if !ok {
			return
		}
		volumeCreated = created
		create.Devices[dataVolumeDevice] = dataVolumeDeviceOf(dv)
	}
	createErr := c.CreateInstance(ctx, create)
	if createErr != nil {
		// The daemon may have made the container and failed to start it (a device that
		// cannot be set up): keep it in state, tainted, so that it is not orphaned.
		if _, err := c.GetInstanceConfig(ctx, name); err != nil {
			detail := "Nothing was created; fix the cause and apply again."
			if volumeCreated {
				dv := plan.DataVolume
				if derr := c.DeleteVolume(ctx, dv.Pool.ValueString(), dv.Volume.ValueString()); derr != nil {
					detail = fmt.Sprintf("The data volume %s made for it in pool %s could not be deleted again (%v); delete it with `incus storage volume delete %s %s`.",
						dv.Volume.ValueString(), dv.Pool.ValueString(), derr, dv.Pool.ValueString(), dv.Volume.ValueString())
				} else {
					detail = "Nothing was kept (the data volume made for it was deleted again); fix the cause and apply again."
				}
			}
			resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "create", createErr, detail))
			return
		}
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "start", createErr, fmt.Sprintf(
			"The container was created but did not start. It is kept in state as tainted; the next apply replaces it. See `incus info --show-log %s`.", name)))
	} else {
		wait := r.nodeWait(plan)
		state, err := c.WaitSystemd(ctx, name, wait, incusNodeSystemdPoll)
		if err != nil {
			resp.Diagnostics.AddError(fmt.Sprintf("Container %s did not come up", name),
				kit.FailureDetail(subject, "wait-for-systemd", err, fmt.Sprintf("The container is kept in state as tainted; the next apply replaces it. "+
					"Look at `incus exec %s -- systemctl --failed` and `incus info --show-log %s`, or raise node_wait.", name, name)))
		} else {
			tflog.Info(ctx, "incus container up", map[string]any{"instance": name, "project": project, "systemd": state})
		}
	}
	plan.Project = types.StringValue(project)
	plan.ImageFingerprint = types.StringValue(img.Fingerprint)
	rdiags, gone := r.refresh(ctx, &plan, c)
	resp.Diagnostics.Append(rdiags...)
	if gone != nil {
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "read", gone, "It vanished right after it was created; find out what deletes it, then apply again."))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// refresh reads the container into m (the one shared read of Create, Read, Update and
// import). When the container is gone it returns the daemon's not-found error and
// leaves m alone. A missing project counts as gone: Incus deletes only empty projects.
func (r *incusNodeResource) refresh(ctx context.Context, m *incusNodeModel, c *incusapi.Client) (diags diag.Diagnostics, gone error) {
	name := m.Name.ValueString()
	inst, err := c.GetInstanceConfig(ctx, name)
	if incusapi.IsNotFound(err) {
		return nil, err
	}
	if err != nil {
		diags.AddError("Unable to read Incus container "+name, kit.FailureDetail(fmt.Sprintf("Container %s (project %s)", name, c.Project()), "read", err,
			"Nothing was changed; check that the daemon answers (`incus info`), then run again."))
		m.nullUnknowns()
		return diags, nil
	}
	m.ID = types.StringValue(fmt.Sprintf("incus://%s/%s/%s", kit.LocalRemote, c.Project(), name))
	m.Instance = types.StringValue(inst.Name)
	m.Project = types.StringValue(c.Project())
	m.Status = types.StringValue(inst.Status)
	if fp := inst.Config["volatile.base_image"]; fp != "" {
		m.ImageFingerprint = types.StringValue(fp)
	}
	if m.ImageFingerprint.IsUnknown() {
		m.ImageFingerprint = types.StringNull()
	}
	profiles := make([]attr.Value, 0, len(inst.Profiles))
	for _, p := range inst.Profiles {
		profiles = append(profiles, types.StringValue(p))
	}
	m.Profiles = types.ListValueMust(types.StringType, profiles)
	config, limits := map[string]attr.Value{}, map[string]attr.Value{}
	for k, v := range inst.Config {
		switch {
		case notOperatorKey(k):
		case strings.HasPrefix(k, "limits."):
			limits[strings.TrimPrefix(k, "limits.")] = types.StringValue(v)
		default:
			config[k] = types.StringValue(v)
		}
	}
	m.Config = types.MapValueMust(types.StringType, config)
	m.Limits = types.MapValueMust(types.StringType, limits)
	devices := map[string]map[string]string{}
	for n, d := range inst.Devices {
		if n != dataVolumeDevice {
			devices[n] = d
		}
	}
	m.Devices = devicesToModel(m.Devices, devices)
	m.DataVolume = readDataVolume(ctx, c, m.DataVolume, inst.Devices[dataVolumeDevice])
	return diags, nil
}

// devicesToModel lists the container's devices in the order the prior model had them,
// then any others by name, so that an unchanged container reads back unchanged.
func devicesToModel(prior []incusDeviceModel, devices map[string]map[string]string) []incusDeviceModel {
	var order []string
	for _, d := range prior {
		if _, ok := devices[d.Name.ValueString()]; ok && !slices.Contains(order, d.Name.ValueString()) {
			order = append(order, d.Name.ValueString())
		}
	}
	var rest []string
	for n := range devices {
		if !slices.Contains(order, n) {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	out := make([]incusDeviceModel, 0, len(devices))
	for _, n := range append(order, rest...) {
		props := map[string]attr.Value{}
		for k, v := range devices[n] {
			if k != "type" {
				props[k] = types.StringValue(v)
			}
		}
		out = append(out, incusDeviceModel{
			Name: types.StringValue(n), Type: types.StringValue(devices[n]["type"]),
			Properties: types.MapValueMust(types.StringType, props),
		})
	}
	return out
}

func (r *incusNodeResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state incusNodeModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name, project := state.Name.ValueString(), r.projectOrDefault(state.Project.ValueString())
	c, err := r.client(project)
	if err != nil {
		resp.Diagnostics.AddError("Unable to read Incus container "+name,
			kit.FailureDetail(fmt.Sprintf("Container %s (project %s)", name, project), "connect", err, "Nothing was changed."))
		return
	}
	rdiags, gone := r.refresh(ctx, &state, c)
	resp.Diagnostics.Append(rdiags...)
	if gone != nil {
		resp.Diagnostics.AddWarning(fmt.Sprintf("Incus container %s is gone", name),
			fmt.Sprintf("Container %s (project %s) was deleted outside Terraform (%v). It is removed from state; the next apply creates it again.", name, project, gone))
		resp.State.RemoveResource(ctx)
		return
	}
	if resp.Diagnostics.HasError() {
		return
	}
	if st := state.Status.ValueString(); st != "Running" {
		if pending, err := incustransport.ListPendingRestores(ctx, c, name); err == nil && len(pending) > 0 {
			// Stopped by a restore that did not finish: the deploy finishes it.
			resp.Diagnostics.AddWarning(fmt.Sprintf("Incus container %s is %s: a restore did not finish", name, st),
				fmt.Sprintf("Container %s (project %s) is %s: %s.", name, project, st, pending[len(pending)-1].Describe(name)))
		} else {
			resp.Diagnostics.AddWarning(fmt.Sprintf("Incus container %s is %s", name, st),
				fmt.Sprintf("Container %s (project %s) is %s, so a deploy to it cannot reach the node. This resource does not start it again; "+
					"run `incus start --project %s %s`, or replace it with `-replace`.", name, project, st, project, name))
		}
	}
	if state.Image.IsNull() {
		// Imported: name the image as the operator most likely did, by its alias.
		state.Image = types.StringValue(importedImageRef(ctx, c, state.ImageFingerprint.ValueString()))
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// importedImageRef is the alias of the container's image when it has exactly one, or
// else its fingerprint (an image deleted since keeps only its fingerprint).
func importedImageRef(ctx context.Context, c *incusapi.Client, fp string) string {
	if fp == "" {
		return ""
	}
	img, err := c.GetImage(ctx, fp)
	if err != nil {
		return fp
	}
	if names := img.AliasNames(); len(names) == 1 {
		return names[0]
	}
	return fp
}

// notOperatorKey tells an instance config key that is not the operator's: the daemon's
// (volatile.*, image.*) and the deploy's (a snapshot set's manifest, written by
// fediversity_node_switch's snapshot {}). Such keys are not read back into config, and
// an update keeps them.
func notOperatorKey(k string) bool {
	return strings.HasPrefix(k, "volatile.") || strings.HasPrefix(k, "image.") || strings.HasPrefix(k, incustransport.ManifestPrefix)
}

func (r *incusNodeResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, prior incusNodeModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Update(ctx, defaultIncusNodeCreateTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	name, project := plan.Name.ValueString(), r.projectOrDefault(plan.Project.ValueString())
	summary := "Unable to update Incus container " + name
	subject := fmt.Sprintf("Container %s (project %s)", name, project)
	c, err := r.client(project)
	if err != nil {
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "connect", err, "Nothing was changed."))
		return
	}
	cur, err := c.GetInstanceConfig(ctx, name)
	if err != nil {
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "read", err, "Nothing was changed."))
		return
	}
	next := *cur
	next.Config = instanceConfigFrom(ctx, plan, &resp.Diagnostics)
	for k, v := range cur.Config {
		// The daemon's keys, and the manifests of the snapshot sets a deploy took (a set
		// without its manifest could not be restored), stay as they are.
		if notOperatorKey(k) {
			next.Config[k] = v
		}
	}
	next.Devices = devicesFrom(ctx, plan.Devices, &resp.Diagnostics)
	if dv := plan.DataVolume; dv != nil {
		next.Devices[dataVolumeDevice] = dataVolumeDeviceOf(dv)
		if s := dv.Size; !s.IsNull() && !s.IsUnknown() && (prior.DataVolume == nil || prior.DataVolume.Size.ValueString() != s.ValueString()) {
			if err := c.PatchVolumeConfig(ctx, dv.Pool.ValueString(), dv.Volume.ValueString(), map[string]string{"size": s.ValueString()}); err != nil {
				resp.Diagnostics.AddAttributeError(path.Root("data_volume").AtName("size"), summary, kit.FailureDetail(subject, "resize-data-volume", err,
					fmt.Sprintf("Nothing was changed: volume %s keeps its size. The driver may refuse to shrink a volume below what it holds.", dv.Volume.ValueString())))
				return
			}
		}
	} else if old := prior.DataVolume; old != nil {
		resp.Diagnostics.AddWarning(fmt.Sprintf("Incus container %s no longer attaches its data volume", name),
			fmt.Sprintf("%s: data_volume was removed, so volume %s in pool %s is detached from %s and kept, with its data. "+
				"Delete it by hand if it is no longer needed: `incus storage volume delete --project %s %s %s`.",
				subject, old.Volume.ValueString(), old.Pool.ValueString(), old.Path.ValueString(), project, old.Pool.ValueString(), old.Volume.ValueString()))
	}
	next.Profiles = incusStrings(ctx, plan.Profiles, &resp.Diagnostics)
	if next.Profiles == nil {
		next.Profiles = []string{}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	if err := c.UpdateInstance(ctx, name, next); err != nil {
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "update", err, "The container keeps its previous configuration; fix the cause and apply again."))
		return
	}
	rdiags, gone := r.refresh(ctx, &plan, c)
	resp.Diagnostics.Append(rdiags...)
	if gone != nil {
		resp.Diagnostics.AddError(summary, kit.FailureDetail(subject, "read", gone, "It vanished during the update; the next plan creates it again."))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func (r *incusNodeResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state incusNodeModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := state.Timeouts.Delete(ctx, defaultIncusNodeDeleteTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	name, project := state.Name.ValueString(), r.projectOrDefault(state.Project.ValueString())
	c, err := r.client(project)
	if err == nil {
		err = c.RemoveInstance(ctx, name, incusNodeCleanStop)
	}
	if err != nil {
		resp.Diagnostics.AddError("Unable to delete Incus container "+name,
			kit.FailureDetail(fmt.Sprintf("Container %s (project %s)", name, project), "delete", err,
				fmt.Sprintf("Delete it by hand with `incus delete --force --project %s %s` if it is still there.", project, name)))
		return
	}
	if dv := state.DataVolume; dv != nil {
		removeDataVolume(ctx, c, name, dv, &resp.Diagnostics)
	}
}

// ImportState takes `incus://local/<project>/<instance>` (the resource's id) or a bare
// instance name in the provider's project; Read fills in the rest.
func (r *incusNodeResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	const summary = "Unable to import fediversity_incus_node"
	name, project := req.ID, r.projectOrDefault("")
	if strings.Contains(req.ID, "://") {
		addr, err := parseImportAddress(req.ID)
		if err != nil {
			resp.Diagnostics.AddError(summary, err.Error())
			return
		}
		t := addr.Target
		switch {
		case t.Kind != "incus":
			resp.Diagnostics.AddError(summary, fmt.Sprintf("import address %q is not an incus:// address; want incus://local/<project>/<instance> or an instance name.", req.ID))
			return
		case addr.Node != t.Instance:
			resp.Diagnostics.AddError(summary, fmt.Sprintf("import address %q names a node after the instance; a container has no node name: want incus://local/<project>/<instance>.", req.ID))
			return
		case t.Remote != kit.LocalRemote && (r.cfg == nil || !kit.RemoteMatches(t.Remote, r.cfg.IncusAddress)):
			resp.Diagnostics.AddError(summary, fmt.Sprintf("import address %q names remote %q, but the provider connects to %s; use incus://local/… or set the provider's incus.address.",
				req.ID, t.Remote, kit.DescribeIncus(r.cfgOrEmpty())))
			return
		}
		name, project = t.Instance, t.Project
	} else if !incusNameRe.MatchString(req.ID) {
		resp.Diagnostics.AddError(summary, fmt.Sprintf("import ID %q is neither an instance name nor incus://local/<project>/<instance>.", req.ID))
		return
	}
	m := incusNodeModel{
		Name: types.StringValue(name), Project: types.StringValue(project),
		Image: types.StringNull(), NodeWait: types.StringNull(), ReplaceOnImage: types.BoolValue(true),
		ID: types.StringNull(), Instance: types.StringNull(), ImageFingerprint: types.StringNull(), Status: types.StringNull(),
		Profiles: types.ListNull(types.StringType), Config: types.MapNull(types.StringType), Limits: types.MapNull(types.StringType),
		Timeouts: timeouts.Value{Object: types.ObjectNull(incusNodeTimeoutsAttrTypes)},
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

var incusNodeTimeoutsAttrTypes = map[string]attr.Type{
	"create": types.StringType, "update": types.StringType, "delete": types.StringType,
}

func (r *incusNodeResource) cfgOrEmpty() *kit.Config {
	if r.cfg == nil {
		return &kit.Config{IncusSocket: "(unconfigured)"}
	}
	return r.cfg
}

// instanceConfigFrom is the container's own config: the config map plus limits.* keys.
func instanceConfigFrom(ctx context.Context, m incusNodeModel, diags *diag.Diagnostics) map[string]string {
	out := map[string]string{}
	var config, limits map[string]string
	if !m.Config.IsNull() {
		diags.Append(m.Config.ElementsAs(ctx, &config, false)...)
	}
	if !m.Limits.IsNull() {
		diags.Append(m.Limits.ElementsAs(ctx, &limits, false)...)
	}
	for k, v := range config {
		out[k] = v
	}
	for k, v := range limits {
		out["limits."+k] = v
	}
	return out
}

func devicesFrom(ctx context.Context, devs []incusDeviceModel, diags *diag.Diagnostics) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, d := range devs {
		props := map[string]string{}
		diags.Append(d.Properties.ElementsAs(ctx, &props, false)...)
		props["type"] = d.Type.ValueString()
		out[d.Name.ValueString()] = props
	}
	return out
}

func incusStrings(ctx context.Context, l types.List, diags *diag.Diagnostics) []string {
	if l.IsNull() || l.IsUnknown() {
		return nil
	}
	var out []string
	diags.Append(l.ElementsAs(ctx, &out, false)...)
	return out
}
