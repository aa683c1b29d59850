package kit

// The transport blocks (`ssh {}`, `incus {}`) of the objects that reach a node: their
// models and schemas, how they decode into the node spec, and how an import address
// fills them. This file is the one place the provider decodes a transport: the objects
// embed TransportBlocks and name no transport themselves, so a new transport's block is
// added here (and to nodespec.Spec), nowhere else in the provider
// (docs/transports.md#adding-a-transport). The blocks hold only where the node is and how
// its identity is pinned, never a per-run value.

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
)

// TransportBlocks are the transport blocks of an object that reaches a node, embedded
// (by value) in its model: exactly one of them is given.
type TransportBlocks struct {
	SSH   *SSHBlockModel   `tfsdk:"ssh"`
	Incus *IncusBlockModel `tfsdk:"incus"`
}

// TransportBlockNames are the names of the transport blocks, in the schema's order.
var TransportBlockNames = []string{"ssh", "incus"}

// TransportBlockSchemas are the transport blocks of a resource's schema; changeEffect
// says what changing one does.
func TransportBlockSchemas(changeEffect string) map[string]schema.Block {
	return map[string]schema.Block{"ssh": SSHBlockSchema(changeEffect), "incus": IncusBlockSchema(changeEffect)}
}

// TransportChoice names the blocks to choose from, for a message: "an ssh block or an
// incus block".
func TransportChoice() string {
	var each []string
	for _, name := range TransportBlockNames {
		each = append(each, "an "+name+" block")
	}
	return strings.Join(each, " or ")
}

// Given is how many transport blocks are given.
func (b TransportBlocks) Given() int {
	n := 0
	if b.SSH != nil {
		n++
	}
	if b.Incus != nil {
		n++
	}
	return n
}

// Known tells whether the given blocks name their node with values known now (not an
// address from a resource that is not created yet).
func (b TransportBlocks) Known() bool {
	return (b.SSH == nil || !b.SSH.Host.IsUnknown()) && (b.Incus == nil || !b.Incus.Instance.IsUnknown())
}

// Spec decodes the blocks into the node spec's transports (s's others are kept).
func (b TransportBlocks) Spec(s *nodespec.Spec) {
	s.SSH, s.Incus = b.SSH.Spec(), b.Incus.Spec()
}

// KeepSurelyGiven leaves out the blocks that may yet be absent from config: a `dynamic`
// block whose for_each is not known is expanded while validating as one block of
// unknown values (see BlockGiven).
func (b *TransportBlocks) KeepSurelyGiven(ctx context.Context, config tfsdk.Config) {
	for _, name := range TransportBlockNames {
		var o types.Object
		if config.GetAttribute(ctx, path.Root(name), &o).HasError() || !BlockGiven(o) {
			switch name {
			case "ssh":
				b.SSH = nil
			case "incus":
				b.Incus = nil
			}
		}
	}
}

// TransportSpecValidator judges, when the configuration is validated, the transport
// blocks of an object that reaches a node without being the node's settings (the SPIRE
// registration): its `node` and blocks decoded into a node spec and validated
// (nodespec.Spec.Validate), so a bad block gets the words a node object and the
// command's roster get for it, naming the node. Values not known yet are judged at
// plan (ResolveTarget).
type TransportSpecValidator struct{}

var _ resource.ConfigValidator = TransportSpecValidator{}

func (TransportSpecValidator) Description(context.Context) string {
	return "the transport blocks make a valid node spec"
}

func (v TransportSpecValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (TransportSpecValidator) ValidateResource(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var node types.String
	var b TransportBlocks
	if req.Config.GetAttribute(ctx, path.Root("node"), &node).HasError() ||
		req.Config.GetAttribute(ctx, path.Root("ssh"), &b.SSH).HasError() ||
		req.Config.GetAttribute(ctx, path.Root("incus"), &b.Incus).HasError() {
		return // a block not known yet: judged at plan
	}
	b.KeepSurelyGiven(ctx, req.Config)
	spec := nodespec.Spec{Node: node.ValueString()}
	b.Spec(&spec)
	resp.Diagnostics.Append(KnownSpecDiagnostics(ctx, req.Config, spec.Validate())...)
}

// TransportBlocksFromTarget fills the blocks on import.
func TransportBlocksFromTarget(t TransportTarget) TransportBlocks {
	if t.Kind == "incus" {
		return TransportBlocks{Incus: IncusBlockFromTarget(t)}
	}
	return TransportBlocks{SSH: SSHBlockFromTarget(t)}
}

// TransportBlocksKnown tells whether the planned transport blocks are known in full, so
// the plan can reach the node (a `dynamic` block or an address from a resource not
// created yet is known only at apply).
func TransportBlocksKnown(ctx context.Context, plan tfsdk.Plan) bool {
	for _, name := range TransportBlockNames {
		var obj types.Object
		if plan.GetAttribute(ctx, path.Root(name), &obj).HasError() {
			return false
		}
		v, err := obj.ToTerraformValue(ctx)
		if err != nil || !v.IsFullyKnown() {
			return false
		}
	}
	return true
}

// RequireTransport refuses, at plan time, an object with no transport block. It is a
// plan check, not a config validator, on purpose: Terraform validates a configuration
// with its variables unknown, and a `dynamic` single block whose for_each is not known
// yet then reads as absent. A group module that picks the transport from a variable
// would be refused for a block it does give. (Two blocks at once are the node spec's
// "Conflicting transports".)
func RequireTransport(ctx context.Context, config tfsdk.Config, diags *diag.Diagnostics) {
	var node types.String
	diags.Append(config.GetAttribute(ctx, path.Root("node"), &node)...)
	for _, name := range TransportBlockNames {
		var block types.Object
		diags.Append(config.GetAttribute(ctx, path.Root(name), &block)...)
		if !block.IsNull() {
			return
		}
	}
	if diags.HasError() {
		return
	}
	who := node.ValueString()
	if node.IsUnknown() {
		who = "this node"
	}
	diags.AddError(fmt.Sprintf("No transport for %s", who),
		"Give exactly one of "+TransportChoice()+", so the provider knows how to reach the node. "+
			"If the block comes from a `dynamic` block, its for_each must be known at plan time.")
}

// BlockGiven tells whether a single block is surely in the configuration. A `dynamic`
// block with an unknown for_each is expanded while validating as one block whose
// attributes are all unknown or unset: it may yet be absent. An empty block written out
// (`snapshot {}`) is given.
func BlockGiven(o types.Object) bool {
	if o.IsNull() || o.IsUnknown() {
		return false
	}
	known, unknown := false, false
	for _, a := range o.Attributes() {
		switch {
		case a.IsUnknown():
			unknown = true
		case !a.IsNull():
			known = true
		}
	}
	return known || !unknown
}

// SSHBlockModel is the `ssh` block.
type SSHBlockModel struct {
	Host                  types.String   `tfsdk:"host"`
	Port                  types.Int64    `tfsdk:"port"`
	User                  types.String   `tfsdk:"user"`
	HostKey               types.String   `tfsdk:"host_key"`
	KnownHostsFile        types.String   `tfsdk:"known_hosts_file"`
	InsecureIgnoreHostKey types.Bool     `tfsdk:"insecure_ignore_host_key"`
	Keepalive             types.String   `tfsdk:"keepalive"`
	RevertOnLockout       types.Bool     `tfsdk:"revert_on_lockout"`
	Sudo                  types.Bool     `tfsdk:"sudo"`
	Jump                  *JumpHostModel `tfsdk:"jump"`
}

// JumpHostModel is the `ssh { jump {} }` block.
type JumpHostModel struct {
	Host           types.String `tfsdk:"host"`
	Port           types.Int64  `tfsdk:"port"`
	User           types.String `tfsdk:"user"`
	HostKey        types.String `tfsdk:"host_key"`
	KnownHostsFile types.String `tfsdk:"known_hosts_file"`
}

// IncusBlockModel is the `incus` block.
type IncusBlockModel struct {
	Instance types.String `tfsdk:"instance"`
	Project  types.String `tfsdk:"project"`
	Remote   types.String `tfsdk:"remote"`
}

const (
	DefaultSSHPort   = nodespec.DefaultSSHPort
	DefaultSSHUser   = nodespec.DefaultSSHUser
	DefaultKeepalive = nodespec.DefaultKeepalive
	LocalRemote      = nodespec.LocalRemote
)

func SSHBlockSchema(changeEffect string) schema.SingleNestedBlock {
	return schema.SingleNestedBlock{
		MarkdownDescription: "Reach the node over SSH (`golang.org/x/crypto/ssh`). Exactly one of `ssh` and `incus`. " +
			"The host key is pinned: give `host_key` or `known_hosts_file`; an unknown or changed key is refused. " +
			"The private key or agent comes from the provider (`ssh_private_key_file`, `ssh_auth_sock`), never from here. " + changeEffect,
		Attributes: map[string]schema.Attribute{
			"host": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Host name or address of the node's sshd. Required in the block.",
				Validators:          []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"port": schema.Int64Attribute{
				Optional:            true,
				MarkdownDescription: "TCP port of the node's sshd. Default `22`.",
				Validators:          []validator.Int64{int64validator.Between(1, 65535)},
			},
			"user": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Remote user. Default `root`. Another user needs `sudo = true` and passwordless sudo.",
			},
			"sudo": schema.BoolAttribute{
				Optional: true,
				MarkdownDescription: "Run the commands that change the system (the closure's import, the switch, the boot entry, unit restarts) through `sudo -n`; " +
					"reads (unit states, the journal, checks) run as `user`. Before anything changes, `sudo -n` is asked once whether it allows them: " +
					"a user without the right fails at once, naming the refused command; sudo never prompts. Default `false`.\n\n" +
					"Every privileged command runs in the deploy's `/bin/sh` PATH wrapper, so the rule must let the user run `/bin/sh` as root " +
					"without a password, which is root: in `/etc/sudoers.d/deploy` write `deploy ALL=(root) NOPASSWD: ALL` " +
					"(with `Defaults:deploy !requiretty` where `requiretty` is set). To let the verdict read unit journals " +
					"(condition skips), add the user to the `systemd-journal` group; without it those units stay unclassified.",
			},
			"host_key": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The node's public host key in authorized_keys form (`ssh-ed25519 AAAA…`). " +
					"Takes precedence over `known_hosts_file`.",
				// Not checked here but by the node spec (nodespec.Spec.Validate), in the
				// command's words, so that a bad key is one error, naming the node.
			},
			"known_hosts_file": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "A known_hosts file that pins the node's host key (entries `[host]:port` for a port other than 22).",
			},
			"insecure_ignore_host_key": schema.BoolAttribute{
				Optional:            true,
				MarkdownDescription: "Accept any host key. Default `false`. Only for throwaway test nodes: it lets anyone on the path impersonate the node.",
			},
			"revert_on_lockout": schema.BoolAttribute{
				Optional: true,
				MarkdownDescription: "Deploys: arm a revert on the node before the switch (default `true`). If the node accepts no new SSH login " +
					"within `timings.confirm_timeout` after the switch, it switches itself back to the system it ran before, and the apply fails saying so. " +
					"A node with a failed unit still accepts logins, so it keeps its new boot entry. `false` deploys without it (as nixos-rebuild does).",
			},
			"keepalive": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Interval of SSH keepalive requests (Go duration). Default `15s`; `0s` turns them off.",
			},
		},
		Blocks: map[string]schema.Block{
			"jump": schema.SingleNestedBlock{
				MarkdownDescription: "Reach the node through this jump host (like `ssh -J`). Its host key is pinned the same way; the same credentials are used.",
				Attributes: map[string]schema.Attribute{
					"host":             schema.StringAttribute{Optional: true, MarkdownDescription: "Jump host name or address."},
					"port":             schema.Int64Attribute{Optional: true, MarkdownDescription: "Jump host sshd port. Default `22`.", Validators: []validator.Int64{int64validator.Between(1, 65535)}},
					"user":             schema.StringAttribute{Optional: true, MarkdownDescription: "Jump host user. Default: the node's `user`."},
					"host_key":         schema.StringAttribute{Optional: true, MarkdownDescription: "Jump host public key (`ssh-ed25519 AAAA…`). `insecure_ignore_host_key` on the node does not reach the jump host: it keeps this pin (or `known_hosts_file`)."},
					"known_hosts_file": schema.StringAttribute{Optional: true, MarkdownDescription: "known_hosts file pinning the jump host's key. Default: the node's `known_hosts_file`."},
				},
			},
		},
	}
}

func IncusBlockSchema(changeEffect string) schema.SingleNestedBlock {
	return schema.SingleNestedBlock{
		MarkdownDescription: "Reach the node as an Incus instance through the Incus REST API (exec, files, snapshots). Exactly one of `ssh` and `incus`. " +
			"The API connection (unix socket, or HTTPS with client certificates) comes from the provider's `incus` block. " + changeEffect,
		Attributes: map[string]schema.Attribute{
			"instance": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Name of the Incus instance. Required in the block.",
				Validators:          []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"project": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Incus project of the instance. Default: the provider's `incus.project`, then `default`.",
			},
			"remote": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Which Incus daemon: `local` (default) is the one the provider's `incus` block configures. " +
					"Any other value must equal the provider's `incus.address` (a guard against deploying to the wrong daemon); " +
					"the provider connects to one daemon per run.",
			},
		},
	}
}

// SSHBlockFromTarget / incusBlockFromTarget fill the blocks on import.
func SSHBlockFromTarget(t TransportTarget) *SSHBlockModel {
	return &SSHBlockModel{
		Host:                  types.StringValue(t.Host),
		Port:                  types.Int64Value(int64(t.Port)),
		User:                  types.StringValue(t.User),
		HostKey:               StringOrNull(t.HostKey),
		KnownHostsFile:        StringOrNull(t.KnownHostsFile),
		InsecureIgnoreHostKey: types.BoolNull(),
		Keepalive:             types.StringNull(),
		RevertOnLockout:       types.BoolNull(),
		Sudo:                  types.BoolNull(),
	}
}

func IncusBlockFromTarget(t TransportTarget) *IncusBlockModel {
	remote := types.StringNull()
	if t.Remote != "" && t.Remote != LocalRemote {
		remote = types.StringValue(t.Remote)
	}
	return &IncusBlockModel{
		Instance: types.StringValue(t.Instance),
		Project:  types.StringValue(t.Project),
		Remote:   remote,
	}
}

// Spec decodes the `ssh` block into the engine's node spec (nil for no block).
func (b *SSHBlockModel) Spec() *nodespec.SSH {
	if b == nil {
		return nil
	}
	s := &nodespec.SSH{
		Host: b.Host.ValueString(), Port: int(b.Port.ValueInt64()), User: b.User.ValueString(),
		HostKey: b.HostKey.ValueString(), KnownHostsFile: b.KnownHostsFile.ValueString(),
		InsecureIgnoreHostKey: b.InsecureIgnoreHostKey.ValueBool(), Keepalive: b.Keepalive.ValueString(),
		Sudo: b.Sudo.ValueBool(), RevertOnLockout: b.RevertOnLockout.ValueBoolPointer(),
	}
	if j := b.Jump; j != nil {
		s.Jump = &nodespec.Jump{Host: j.Host.ValueString(), Port: int(j.Port.ValueInt64()), User: j.User.ValueString(),
			HostKey: j.HostKey.ValueString(), KnownHostsFile: j.KnownHostsFile.ValueString()}
	}
	return s
}

// Spec decodes the `incus` block into the engine's node spec (nil for no block).
func (b *IncusBlockModel) Spec() *nodespec.Incus {
	if b == nil {
		return nil
	}
	return &nodespec.Incus{Instance: b.Instance.ValueString(), Project: b.Project.ValueString(), Remote: b.Remote.ValueString()}
}
