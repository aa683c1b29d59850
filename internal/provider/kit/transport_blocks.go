package kit

// The `ssh {}` and `incus {}` blocks of the node resources: their models and schemas, and
// how an import address fills them. They hold only where the node is and how its identity
// is pinned, never a per-run value.

import (
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
)

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
				Validators: []validator.String{hostKeyValidator{}},
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
					"host_key":         schema.StringAttribute{Optional: true, MarkdownDescription: "Jump host public key (`ssh-ed25519 AAAA…`). `insecure_ignore_host_key` on the node does not reach the jump host: it keeps this pin (or `known_hosts_file`).", Validators: []validator.String{hostKeyValidator{}}},
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
