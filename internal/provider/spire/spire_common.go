package spire

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

// The spire node's coordinates, shared by fediversity_spire_handoff,
// fediversity_spire_registration and the fediversity_spire_trust_bundle data source: a
// `spire_node` block that reads like a node's `ssh` block (host, port, user, the pinned
// host key, a jump host), plus where spire-server keeps its admin socket. The SSH key
// comes from the provider (`ssh_private_key_file` / SSH_PRIVATE_KEY_FILE, or the agent),
// per run: it is never an input or a trigger, because each run stages it elsewhere.

const spireNodeBlock = "spire_node"

// spireNodeModel is the `spire_node` block: an `ssh` block plus the server's CLI settings.
type spireNodeModel struct {
	Host                  types.String       `tfsdk:"host"`
	Port                  types.Int64        `tfsdk:"port"`
	User                  types.String       `tfsdk:"user"`
	HostKey               types.String       `tfsdk:"host_key"`
	KnownHostsFile        types.String       `tfsdk:"known_hosts_file"`
	InsecureIgnoreHostKey types.Bool         `tfsdk:"insecure_ignore_host_key"`
	Keepalive             types.String       `tfsdk:"keepalive"`
	Jump                  *kit.JumpHostModel `tfsdk:"jump"`
	ServerCommand         types.String       `tfsdk:"server_command"`
	SocketPath            types.String       `tfsdk:"socket_path"`
	Service               types.String       `tfsdk:"service"`
}

func spireNodeBlockSchema() schema.SingleNestedBlock {
	b := kit.SSHBlockSchema("")
	// Deploy-only settings of a node's ssh block mean nothing for the spire node.
	delete(b.Attributes, "revert_on_lockout")
	delete(b.Attributes, "sudo")
	// The spire node is no node's settings, so no node spec judges its block when the
	// configuration is validated: its pinned keys are checked here.
	pinChecked := func(attrs map[string]schema.Attribute) {
		a := attrs["host_key"].(schema.StringAttribute)
		a.Validators = append(a.Validators, kit.HostKeyValidator{})
		attrs["host_key"] = a
	}
	pinChecked(b.Attributes)
	pinChecked(b.Blocks["jump"].(schema.SingleNestedBlock).Attributes)
	b.MarkdownDescription = "How to reach the spire node (the machine that runs spire-server) over SSH, as for a node of the `ssh` method. " +
		"Required. The host key is pinned: give `host_key` or `known_hosts_file`. The private key or agent comes from the provider " +
		"(`ssh_private_key_file` / `SSH_PRIVATE_KEY_FILE`, `ssh_auth_sock`), per run, never from here. The user must be root (or " +
		"able to run spire-server and write its state directory)."
	b.Attributes["server_command"] = schema.StringAttribute{Optional: true,
		MarkdownDescription: "The spire-server binary on the spire node. Default `spire-server` (found on the node's PATH)."}
	b.Attributes["socket_path"] = schema.StringAttribute{Optional: true,
		MarkdownDescription: "The server's admin socket (`-socketPath`). Default: the CLI's own default, `/tmp/spire-server/private/api.sock`."}
	b.Attributes["service"] = schema.StringAttribute{Optional: true,
		MarkdownDescription: "The systemd unit of spire-server, sent SIGUSR1 to reload the k8s_psat clusters. Default `spire-server.service`."}
	return b
}

// spireNodeConfig is the resolved spire node: its SSH target and the server's settings.
type spireNodeConfig struct {
	target  kit.TransportTarget
	command string
	socket  string
	service string
}

// resolveSpireNode validates the `spire_node` block; errors name spire_node.<field>.
func resolveSpireNode(b *spireNodeModel, cfg *kit.Config) (spireNodeConfig, diag.Diagnostics) {
	var diags diag.Diagnostics
	if b == nil || b.Host.IsNull() && b.HostKey.IsNull() && b.KnownHostsFile.IsNull() {
		diags.AddAttributeError(path.Root(spireNodeBlock), "Missing spire node coordinates",
			"The spire_node block must name the spire node: set spire_node.host (its FQDN or address) and pin its host key with "+
				"spire_node.host_key or spire_node.known_hosts_file. The spire node is the machine of the central group that runs spire-server.")
		return spireNodeConfig{}, diags
	}
	sshB := &kit.SSHBlockModel{Host: b.Host, Port: b.Port, User: b.User, HostKey: b.HostKey, KnownHostsFile: b.KnownHostsFile,
		InsecureIgnoreHostKey: b.InsecureIgnoreHostKey, Keepalive: b.Keepalive, Jump: b.Jump}
	t, d := kit.ResolveTarget(kit.TransportBlocks{SSH: sshB}, cfg)
	diags.Append(underBlock(d, spireNodeBlock)...)
	return spireNodeConfig{target: t, command: b.ServerCommand.ValueString(), socket: b.SocketPath.ValueString(), service: b.Service.ValueString()}, diags
}

// underBlock renames the `ssh` of kit.ResolveTarget's diagnostics to the block they belong to.
func underBlock(diags diag.Diagnostics, block string) diag.Diagnostics {
	var out diag.Diagnostics
	for _, d := range diags {
		dp, ok := d.(diag.DiagnosticWithPath)
		if !ok {
			out.Append(d)
			continue
		}
		p := path.Root(block)
		for i, s := range dp.Path().Steps() {
			if n, ok := s.(path.PathStepAttributeName); ok && i > 0 {
				p = p.AtName(string(n))
			}
		}
		detail := strings.ReplaceAll(d.Detail(), "ssh.", block+".")
		if d.Severity() == diag.SeverityError {
			out.AddAttributeError(p, d.Summary(), detail)
		} else {
			out.AddAttributeWarning(p, d.Summary(), detail)
		}
	}
	return out
}

// openSpireServer opens the SSH transport to the spire node (shared with every other
// resource of the run) and returns the server.
func openSpireServer(ctx context.Context, sn spireNodeConfig, cfg *kit.Config) (*spire.Server, deploybody.Transport, error) {
	name := "spire node " + kit.HostPort(sn.target.Host, sn.target.Port)
	tr, err := kit.OpenTransport(ctx, name, sn.target, cfg)
	if err != nil {
		return nil, nil, err
	}
	return &spire.Server{Runner: tr, Node: kit.HostPort(sn.target.Host, sn.target.Port), Command: sn.command, SocketPath: sn.socket, Service: sn.service}, tr, nil
}

// spireUnreachable is the diagnostic of a spire node that does not answer at plan time.
func spireUnreachable(diags *diag.Diagnostics, what string, sn spireNodeConfig, err error) {
	diags.AddAttributeError(path.Root(spireNodeBlock), "Unable to reach the spire node",
		fmt.Sprintf("%s needs the spire node %s, which did not answer: %v. "+
			"The plan stops here (a destroy too: it must retire the entries on that node). "+
			"Check that the spire node is up, that spire_node.host/port reach its sshd and that spire-server runs there.",
			what, kit.HostPort(sn.target.Host, sn.target.Port), err))
}

// SpireAPIServerEnv names the API server address the spire node uses to reach the
// cluster, when it differs from the kubeconfig's.
const SpireAPIServerEnv = "K8S_SPIRE_API_SERVER"

func spireAPIServer(attr types.String) string {
	if v := attr.ValueString(); v != "" {
		return v
	}
	return os.Getenv(SpireAPIServerEnv)
}

// knownSpireNode is false while the block holds values only known at apply. A missing
// block is "known": resolveSpireNode then says what is missing.
func knownSpireNode(b *spireNodeModel) bool {
	return b == nil || !b.Host.IsUnknown() && !b.Port.IsUnknown() && !b.HostKey.IsUnknown() && !b.KnownHostsFile.IsUnknown() && !b.User.IsUnknown()
}
