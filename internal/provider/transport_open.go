package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	incustransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/incus"
	sshtransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/ssh"
)

// This file resolves the `ssh {}` / `incus {}` blocks of a resource into a target, and
// opens the target's transport with the provider's per-run Config (key file, agent
// socket, Incus client certificates). Nothing per-run is ever read from, or written to,
// the blocks.

// transportTarget is a validated, resolved transport description (no secrets).
type transportTarget struct {
	Kind string // "ssh" or "incus"

	// ssh
	Host                  string
	Port                  int
	User                  string
	HostKey               string
	KnownHostsFile        string
	InsecureIgnoreHostKey bool
	Keepalive             time.Duration
	Sudo                  bool
	Jump                  *transportTarget

	// incus
	Instance string
	Project  string
	Remote   string
}

// Address is the import address of the target, e.g. ssh://root@127.0.0.1:2201/fedi-n1.
func (t transportTarget) Address(node string) string {
	if t.Kind == "incus" {
		remote := t.Remote
		if remote == "" {
			remote = localRemote
		}
		return fmt.Sprintf("incus://%s/%s/%s", remote, t.Project, t.Instance)
	}
	return fmt.Sprintf("ssh://%s@%s/%s", t.User, hostPort(t.Host, t.Port), node)
}

func hostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}

// resolveTarget validates the transport blocks of a resource and fills in defaults.
// Exactly one of ssh and incus must be set; at is the resource's root path.
func resolveTarget(sshB *sshBlockModel, incusB *incusBlockModel, cfg *Config) (transportTarget, diag.Diagnostics) {
	var diags diag.Diagnostics
	if (sshB == nil) == (incusB == nil) {
		diags.AddError("Exactly one transport block is required",
			"Give the node either an `ssh { host = … }` block or an `incus { instance = … }` block, not both and not neither.")
		return transportTarget{}, diags
	}
	if incusB != nil {
		t := transportTarget{Kind: "incus", Instance: incusB.Instance.ValueString(), Project: incusB.Project.ValueString(), Remote: incusB.Remote.ValueString()}
		if t.Instance == "" {
			diags.AddAttributeError(path.Root("incus").AtName("instance"), "Missing Incus instance",
				"incus.instance names the Incus instance of the node; set it.")
		}
		if t.Project == "" {
			t.Project = "default"
			if cfg != nil && cfg.IncusProject != "" {
				t.Project = cfg.IncusProject
			}
		}
		if t.Remote == "" {
			t.Remote = localRemote
		}
		if t.Remote != localRemote && cfg != nil && !remoteMatches(t.Remote, cfg.IncusAddress) {
			diags.AddAttributeError(path.Root("incus").AtName("remote"), "Incus remote does not match the provider",
				fmt.Sprintf("incus.remote is %q but the provider connects to %q. Set the provider's incus.address to that remote, or set remote = \"local\".",
					t.Remote, describeIncus(cfg)))
		}
		return t, diags
	}
	t := transportTarget{
		Kind:                  "ssh",
		Host:                  sshB.Host.ValueString(),
		Port:                  int(sshB.Port.ValueInt64()),
		User:                  sshB.User.ValueString(),
		HostKey:               sshB.HostKey.ValueString(),
		KnownHostsFile:        sshB.KnownHostsFile.ValueString(),
		InsecureIgnoreHostKey: sshB.InsecureIgnoreHostKey.ValueBool(),
		Sudo:                  sshB.Sudo.ValueBool(),
		Keepalive:             defaultKeepalive,
	}
	if t.Host == "" {
		diags.AddAttributeError(path.Root("ssh").AtName("host"), "Missing SSH host", "ssh.host names the node's sshd host; set it.")
	}
	if t.Port == 0 {
		t.Port = defaultSSHPort
	}
	if t.User == "" {
		t.User = defaultSSHUser
	}
	if v := sshB.Keepalive.ValueString(); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			diags.AddAttributeError(path.Root("ssh").AtName("keepalive"), "Invalid duration",
				fmt.Sprintf("ssh.keepalive = %q is not a non-negative Go duration such as \"15s\".", v))
		}
		t.Keepalive = d
	}
	if t.HostKey == "" && t.KnownHostsFile == "" && !t.InsecureIgnoreHostKey {
		diags.AddAttributeError(path.Root("ssh"), "No pinned host key",
			fmt.Sprintf("The node %s is reached over SSH, but neither ssh.host_key nor ssh.known_hosts_file pins its host key. "+
				"Set one of them (e.g. host_key = \"ssh-ed25519 AAAA…\" from the node's /etc/ssh/ssh_host_ed25519_key.pub); "+
				"insecure_ignore_host_key = true turns the check off for throwaway nodes only.", hostPort(t.Host, t.Port)))
	}
	if j := sshB.Jump; j != nil {
		jt := transportTarget{
			Kind: "ssh", Host: j.Host.ValueString(), Port: int(j.Port.ValueInt64()), User: j.User.ValueString(),
			HostKey: j.HostKey.ValueString(), KnownHostsFile: j.KnownHostsFile.ValueString(),
			// insecure_ignore_host_key is the node's: the jump host keeps its own pin.
			Keepalive: t.Keepalive,
		}
		if jt.Host == "" {
			diags.AddAttributeError(path.Root("ssh").AtName("jump").AtName("host"), "Missing jump host", "ssh.jump.host names the jump host; set it or remove the jump block.")
		}
		if jt.Port == 0 {
			jt.Port = defaultSSHPort
		}
		if jt.User == "" {
			jt.User = t.User
		}
		if jt.KnownHostsFile == "" {
			jt.KnownHostsFile = t.KnownHostsFile
		}
		if jt.HostKey == "" && jt.KnownHostsFile == "" {
			diags.AddAttributeError(path.Root("ssh").AtName("jump"), "No pinned host key for the jump host",
				fmt.Sprintf("The jump host %s has no pinned host key: set ssh.jump.host_key or ssh.jump.known_hosts_file (or ssh.known_hosts_file, which it shares). "+
					"insecure_ignore_host_key on the node does not reach the jump host.", hostPort(jt.Host, jt.Port)))
		}
		t.Jump = &jt
	}
	return t, diags
}

func remoteMatches(remote, address string) bool {
	if address == "" {
		return false
	}
	norm := func(s string) string {
		s = strings.TrimSuffix(strings.TrimPrefix(s, "https://"), "/")
		return s
	}
	return norm(remote) == norm(address)
}

func describeIncus(cfg *Config) string {
	if cfg.IncusAddress != "" {
		return cfg.IncusAddress
	}
	return "the local socket " + cfg.IncusSocket
}

// openTransport builds the transport for node from a resolved target and the provider
// Config. The returned transport must be closed by the caller.
func openTransport(ctx context.Context, node string, t transportTarget, cfg *Config) (deploybody.Transport, error) {
	if cfg == nil {
		return nil, fmt.Errorf("node %s: the provider is not configured (no provider block was read); this is a bug", node)
	}
	switch t.Kind {
	case "incus":
		return openIncusTransport(ctx, node, t, cfg)
	case "ssh":
		return openSSHTransport(ctx, node, t, cfg)
	}
	return nil, fmt.Errorf("node %s: unknown transport %q", node, t.Kind)
}

// openIncusTransport addresses the target's instance through the provider's Incus client
// (unix socket, or HTTPS with the provider's client certificate), built once in Configure.
func openIncusTransport(_ context.Context, node string, t transportTarget, cfg *Config) (deploybody.Transport, error) {
	client, err := cfg.incusClient()
	if err != nil {
		return nil, fmt.Errorf("node %s: connect to the Incus API (%s): %w; check the provider's incus block or INCUS_SOCKET", node, describeIncus(cfg), err)
	}
	return incustransport.New(incustransport.Config{Client: client, Instance: t.Instance, Project: t.Project, Node: node})
}

// sshConfig builds the SSH transport's config from a target plus the provider's per-run
// credentials (key file, agent socket), which never come from the resource.
func sshConfig(t transportTarget, cfg *Config) sshtransport.Config {
	c := sshtransport.Config{
		Host: t.Host, Port: t.Port, User: t.User,
		HostKey: t.HostKey, KnownHostsFile: t.KnownHostsFile, InsecureIgnoreHostKey: t.InsecureIgnoreHostKey,
		PrivateKeyFile: cfg.SSHPrivateKeyFile, AgentSocket: cfg.SSHAuthSock,
		Keepalive: t.Keepalive, Sudo: t.Sudo,
	}
	if t.Keepalive == 0 {
		c.Keepalive = -1 // keepalive = "0s" turns them off
	}
	if t.Jump != nil {
		j := sshConfig(*t.Jump, cfg)
		c.Jump = &j
	}
	return c
}

func openSSHTransport(ctx context.Context, node string, t transportTarget, cfg *Config) (deploybody.Transport, error) {
	c := sshConfig(t, cfg)
	if c.PrivateKeyFile == "" && c.AgentSocket == "" {
		return nil, fmt.Errorf("node %s: no SSH credentials: set the provider's ssh_private_key_file (or SSH_PRIVATE_KEY_FILE), or ssh_auth_sock (SSH_AUTH_SOCK) for an agent", node)
	}
	log := func(format string, args ...any) {
		tflog.Debug(ctx, fmt.Sprintf(format, args...), map[string]any{"node": node, "transport": "ssh"})
	}
	pool, err := cfg.sshPool()
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	tr, err := pool.Transport(node, c, log)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	return tr, nil
}
