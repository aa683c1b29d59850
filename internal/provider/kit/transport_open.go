package kit

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
)

// This file resolves the transport blocks of a resource into a target, and
// opens the target's transport with the provider's per-run Config (key file, agent
// socket, Incus client certificates). Nothing per-run is ever read from, or written to,
// the blocks.

// TransportTarget is a validated, resolved transport description (no secrets): the
// engine's node spec target.
type TransportTarget = nodespec.Target

var HostPort = nodespec.HostPort

// ResolveTarget validates the transport blocks of a resource and fills in defaults.
// Exactly one of them must be given.
func ResolveTarget(blocks TransportBlocks, cfg *Config) (TransportTarget, diag.Diagnostics) {
	diags := OneTransport(blocks)
	if diags.HasError() {
		return TransportTarget{}, diags
	}
	var spec nodespec.Spec
	blocks.Spec(&spec)
	diags.Append(SpecDiagnostics(spec.Validate())...)
	t, tdiags := ProviderTarget(spec, cfg)
	diags.Append(tdiags...)
	return t, diags
}

// OneTransport refuses a run with no transport block, or more than one.
func OneTransport(blocks TransportBlocks) diag.Diagnostics {
	var diags diag.Diagnostics
	if blocks.Given() != 1 {
		diags.AddError("Exactly one transport block is required",
			"Give the node exactly one of "+TransportChoice()+", not two and not none.")
	}
	return diags
}

// ProviderTarget is the spec's target with what only the provider knows: the Incus
// project default of its connection, and the guard that a remote names that connection.
func ProviderTarget(spec nodespec.Spec, cfg *Config) (TransportTarget, diag.Diagnostics) {
	var diags diag.Diagnostics
	t := spec.Target()
	if t.Kind != "incus" {
		return t, diags
	}
	if t.Project == "" {
		t.Project = "default"
		if cfg != nil && cfg.IncusProject != "" {
			t.Project = cfg.IncusProject
		}
	}
	if t.Remote != LocalRemote && cfg != nil && !RemoteMatches(t.Remote, cfg.IncusAddress) {
		diags.AddAttributeError(path.Root("incus").AtName("remote"), "Incus remote does not match the provider",
			fmt.Sprintf("incus.remote is %q but the provider connects to %q. Set the provider's incus.address to that remote, or set remote = \"local\".",
				t.Remote, DescribeIncus(cfg)))
	}
	return t, diags
}

func RemoteMatches(remote, address string) bool {
	if address == "" {
		return false
	}
	norm := func(s string) string {
		s = strings.TrimSuffix(strings.TrimPrefix(s, "https://"), "/")
		return s
	}
	return norm(remote) == norm(address)
}

func DescribeIncus(cfg *Config) string {
	if cfg.IncusAddress != "" {
		return cfg.IncusAddress
	}
	return "the local socket " + cfg.IncusSocket
}

// OpenTransport builds the transport for node from a resolved target and the provider
// Config, through transport.Connections.Open (the one place both front ends open a
// node). The returned transport must be closed by the caller.
func OpenTransport(ctx context.Context, node string, t TransportTarget, cfg *Config) (deploybody.Transport, error) {
	if cfg == nil {
		return nil, fmt.Errorf("node %s: the provider is not configured (no provider block was read); this is a bug", node)
	}
	creds := nodespec.Credentials{PrivateKeyFile: cfg.SSHPrivateKeyFile, AgentSocket: cfg.SSHAuthSock}
	conns := transport.Connections{
		Credentials: creds,
		Incus: func() (*incusapi.Client, error) {
			client, err := cfg.IncusClient()
			if err != nil {
				return nil, fmt.Errorf("node %s: connect to the Incus API (%s): %w; check the provider's incus block or INCUS_SOCKET", node, DescribeIncus(cfg), err)
			}
			return client, nil
		},
		Log: func(node, kind string) remote.Logger {
			return func(format string, args ...any) {
				tflog.Debug(ctx, fmt.Sprintf(format, args...), map[string]any{"node": node, "transport": kind})
			}
		},
	}
	if t.Kind == transport.KindSSH {
		// The credentials are checked before the pool is made, so that a provider with
		// neither a key nor an agent says so instead of failing on a dial.
		if creds.PrivateKeyFile == "" && creds.AgentSocket == "" {
			return nil, fmt.Errorf("node %s: no SSH credentials: set the provider's ssh_private_key_file (or SSH_PRIVATE_KEY_FILE), or ssh_auth_sock (SSH_AUTH_SOCK) for an agent", node)
		}
		pool, err := cfg.sshPool()
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", node, err)
		}
		conns.SSH = pool
	}
	tr, err := conns.Open(node, t)
	if err != nil && t.Kind == transport.KindSSH {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	return tr, err
}
