package provider

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	incustransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/incus"
	sshtransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/ssh"
)

// This file turns the `ssh {}` / `incus {}` blocks of a resource, plus the provider's
// per-run Config (key file, agent socket, Incus client certificates), into a
// deploybody.Transport. Nothing per-run is ever read from, or written to, the blocks:
// they hold only where the node is and how its identity is pinned.

// sshBlockModel is the `ssh` block.
type sshBlockModel struct {
	Host                  types.String   `tfsdk:"host"`
	Port                  types.Int64    `tfsdk:"port"`
	User                  types.String   `tfsdk:"user"`
	HostKey               types.String   `tfsdk:"host_key"`
	KnownHostsFile        types.String   `tfsdk:"known_hosts_file"`
	InsecureIgnoreHostKey types.Bool     `tfsdk:"insecure_ignore_host_key"`
	Keepalive             types.String   `tfsdk:"keepalive"`
	Jump                  *jumpHostModel `tfsdk:"jump"`
}

// jumpHostModel is the `ssh { jump {} }` block.
type jumpHostModel struct {
	Host           types.String `tfsdk:"host"`
	Port           types.Int64  `tfsdk:"port"`
	User           types.String `tfsdk:"user"`
	HostKey        types.String `tfsdk:"host_key"`
	KnownHostsFile types.String `tfsdk:"known_hosts_file"`
}

// incusBlockModel is the `incus` block.
type incusBlockModel struct {
	Instance types.String `tfsdk:"instance"`
	Project  types.String `tfsdk:"project"`
	Remote   types.String `tfsdk:"remote"`
}

const (
	defaultSSHPort   = 22
	defaultSSHUser   = "root"
	defaultKeepalive = 15 * time.Second
	localRemote      = "local"
)

func sshBlockSchema(changeEffect string) schema.SingleNestedBlock {
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
				MarkdownDescription: "Remote user; it must be able to switch the system (root). Default `root`.",
			},
			"host_key": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The node's public host key in authorized_keys form (`ssh-ed25519 AAAA…`). " +
					"Takes precedence over `known_hosts_file`.",
			},
			"known_hosts_file": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "A known_hosts file that pins the node's host key (entries `[host]:port` for a port other than 22).",
			},
			"insecure_ignore_host_key": schema.BoolAttribute{
				Optional:            true,
				MarkdownDescription: "Accept any host key. Default `false`. Only for throwaway test nodes: it lets anyone on the path impersonate the node.",
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
					"host_key":         schema.StringAttribute{Optional: true, MarkdownDescription: "Jump host public key (`ssh-ed25519 AAAA…`)."},
					"known_hosts_file": schema.StringAttribute{Optional: true, MarkdownDescription: "known_hosts file pinning the jump host's key. Default: the node's `known_hosts_file`."},
				},
			},
		},
	}
}

func incusBlockSchema(changeEffect string) schema.SingleNestedBlock {
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
			InsecureIgnoreHostKey: t.InsecureIgnoreHostKey, Keepalive: t.Keepalive,
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

// importAddress is a parsed import ID.
type importAddress struct {
	Node   string
	Target transportTarget
}

// parseImportAddress parses the import ID of fediversity_node_switch and
// fediversity_verdict:
//
//	ssh://[user@]host[:port]/node[?known_hosts_file=…|host_key=…] (user root, port 22 by default)
//	incus://[remote]/project/instance (remote "local" by default; the node is the instance)
//	incus://[remote]/project/instance/node (an explicit node name)
func parseImportAddress(id string) (importAddress, error) {
	const want = "want ssh://[user@]host[:port]/node or incus://remote/project/instance"
	u, err := url.Parse(id)
	if err != nil {
		return importAddress{}, fmt.Errorf("import address %q: %v; %s", id, err, want)
	}
	if u.Fragment != "" {
		return importAddress{}, fmt.Errorf("import address %q has a fragment; %s", id, want)
	}
	query := u.Query()
	for k := range query {
		if u.Scheme != "ssh" || (k != "host_key" && k != "known_hosts_file") {
			return importAddress{}, fmt.Errorf("import address %q: unknown parameter %q (an ssh address takes host_key= or known_hosts_file=)", id, k)
		}
	}
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(segs) == 1 && segs[0] == "" {
		segs = nil
	}
	switch u.Scheme {
	case "ssh":
		if u.Hostname() == "" {
			return importAddress{}, fmt.Errorf("import address %q names no host; %s", id, want)
		}
		if len(segs) != 1 || !validNodeName(segs[0]) {
			return importAddress{}, fmt.Errorf("import address %q: the path must be exactly one node name; %s", id, want)
		}
		if _, hasPass := u.User.Password(); hasPass {
			return importAddress{}, fmt.Errorf("import address %q carries a password: credentials come from the provider, never from an address", id)
		}
		t := transportTarget{Kind: "ssh", Host: u.Hostname(), Port: defaultSSHPort, User: defaultSSHUser, Keepalive: defaultKeepalive}
		if p := u.Port(); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return importAddress{}, fmt.Errorf("import address %q: port %q is not 1…65535", id, p)
			}
			t.Port = n
		}
		if u.User != nil && u.User.Username() != "" {
			t.User = u.User.Username()
		}
		t.HostKey = query.Get("host_key")
		t.KnownHostsFile = query.Get("known_hosts_file")
		return importAddress{Node: segs[0], Target: t}, nil
	case "incus":
		if u.User != nil {
			return importAddress{}, fmt.Errorf("import address %q: an incus address carries no user; %s", id, want)
		}
		if len(segs) != 2 && len(segs) != 3 {
			return importAddress{}, fmt.Errorf("import address %q: want project/instance[/node] after the remote; %s", id, want)
		}
		for _, s := range segs {
			if !validNodeName(s) {
				return importAddress{}, fmt.Errorf("import address %q: %q is not a valid project, instance or node name", id, s)
			}
		}
		remote := u.Host
		if remote == "" {
			remote = localRemote
		}
		t := transportTarget{Kind: "incus", Remote: remote, Project: segs[0], Instance: segs[1]}
		node := segs[1]
		if len(segs) == 3 {
			node = segs[2]
		}
		return importAddress{Node: node, Target: t}, nil
	default:
		return importAddress{}, fmt.Errorf("import address %q: unknown scheme %q; %s", id, u.Scheme, want)
	}
}

// validNodeName accepts the names of nodes, instances and projects: letters, digits,
// '-', '_', '.', not starting with '.' or '-'.
func validNodeName(s string) bool {
	if s == "" || len(s) > 253 || s[0] == '.' || s[0] == '-' {
		return false
	}
	for _, c := range s {
		if !nameRune(c) {
			return false
		}
	}
	return true
}

func nameRune(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// sshBlockFromTarget / incusBlockFromTarget fill the blocks on import.
func sshBlockFromTarget(t transportTarget) *sshBlockModel {
	return &sshBlockModel{
		Host:                  types.StringValue(t.Host),
		Port:                  types.Int64Value(int64(t.Port)),
		User:                  types.StringValue(t.User),
		HostKey:               stringOrNull(t.HostKey),
		KnownHostsFile:        stringOrNull(t.KnownHostsFile),
		InsecureIgnoreHostKey: types.BoolNull(),
		Keepalive:             types.StringNull(),
	}
}

func incusBlockFromTarget(t transportTarget) *incusBlockModel {
	remote := types.StringNull()
	if t.Remote != "" && t.Remote != localRemote {
		remote = types.StringValue(t.Remote)
	}
	return &incusBlockModel{
		Instance: types.StringValue(t.Instance),
		Project:  types.StringValue(t.Project),
		Remote:   remote,
	}
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

func stringOrNull(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// openIncusTransport connects to the provider's Incus daemon (unix socket, or HTTPS with
// the provider's client certificate) and addresses the target's instance.
func openIncusTransport(_ context.Context, node string, t transportTarget, cfg *Config) (deploybody.Transport, error) {
	var client *incusapi.Client
	var err error
	if cfg.IncusAddress != "" {
		client, err = incusapi.NewHTTPS(incusapi.HTTPSConfig{
			URL: cfg.IncusAddress, ClientCertFile: cfg.IncusClientCert, ClientKeyFile: cfg.IncusClientKey, ServerCertFile: cfg.IncusServerCert,
		})
	} else {
		client, err = incusapi.NewUnix(cfg.IncusSocket)
	}
	if err != nil {
		return nil, fmt.Errorf("node %s: connect to the Incus API (%s): %w; check the provider's incus block or INCUS_SOCKET", node, describeIncus(cfg), err)
	}
	return incustransport.New(incustransport.Config{Client: client, Instance: t.Instance, Project: t.Project, Node: node})
}

// snapshotGuard wraps an Incus transport: before the switch it takes a native snapshot
// named after the generation the node runs (the rollback point) and rotates to the
// newest keep. After a run that left the node unreachable it restores that snapshot.
type snapshotGuard struct {
	*incustransport.Transport
	keep     int
	instance string
	taken    string
}

func newSnapshotGuard(t deploybody.Transport, keep int, instance string) (*snapshotGuard, error) {
	it, ok := t.(*incustransport.Transport)
	if !ok {
		return nil, fmt.Errorf("node %s: the snapshot block needs the incus transport (an ssh node has no native snapshots); remove the snapshot block or use an incus block", t.Node())
	}
	return &snapshotGuard{Transport: it, keep: keep, instance: instance}, nil
}

// Switch takes the snapshot, then switches. A snapshot that cannot be taken stops the
// deploy before anything changed on the node.
func (g *snapshotGuard) Switch(ctx context.Context, toplevel, action string, limit time.Duration) (deploybody.SwitchResult, error) {
	gen := 0
	if res, err := g.Run(ctx, []string{"readlink", "/nix/var/nix/profiles/system"}, deploybody.RunOptions{}); err == nil && res.ExitCode == 0 {
		gen = parseGenerationLink(strings.TrimSpace(string(res.Stdout)))
	}
	name := incustransport.GenerationSnapshotName(gen)
	if err := g.SnapshotBeforeSwitch(ctx, name, g.keep); err != nil {
		return deploybody.SwitchResult{}, fmt.Errorf("snapshot %s before the switch: %w (nothing was switched; fix the instance's storage or remove the snapshot block)", name, err)
	}
	g.taken = name
	return g.Transport.Switch(ctx, toplevel, action, limit)
}

// parseGenerationLink reads N from "system-N-link" (the target of the system profile).
func parseGenerationLink(target string) int {
	base := target[strings.LastIndex(target, "/")+1:]
	s, ok := strings.CutPrefix(base, "system-")
	if !ok {
		return 0
	}
	s, ok = strings.CutSuffix(s, "-link")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// switched reports whether the run reached the switch phase.
func switched(res *deploybody.Result) bool {
	if res == nil {
		return false
	}
	for _, p := range res.Phases {
		if p.Name == deploybody.PhaseSwitch && !strings.HasPrefix(p.Note, "skipped") {
			return true
		}
	}
	return false
}

// unreachableAfterSwitch reports whether a run switched and then, by its own account,
// lost the node (the verdict says unreachable, or an error wraps ErrUnreachable).
func unreachableAfterSwitch(res *deploybody.Result, runErr error) bool {
	if !switched(res) {
		return false
	}
	if res.Verdict != nil && res.Verdict.Unreachable {
		return true
	}
	return runErr != nil && errors.Is(runErr, deploybody.ErrUnreachable)
}

// mayBeUnreachable reports whether a failed run after the switch needs a reachability
// probe: any error except a verdict the node answered (a failed unit is never restored,
// FR-004).
func mayBeUnreachable(res *deploybody.Result, runErr error) bool {
	if runErr == nil || !switched(res) {
		return false
	}
	var de *deploybody.DeployError
	if errors.As(runErr, &de) && de.Phase == deploybody.PhaseVerdict && res.Verdict != nil && !res.Verdict.Unreachable {
		return false
	}
	return true
}

// restoreIfUnreachable restores the snapshot when the switch left the node unreachable:
// the run says so, or the run failed after the switch and the node then does not answer
// within nodeWait. A node with a failed unit answers, so it is never restored (FR-004).
func (g *snapshotGuard) restoreIfUnreachable(ctx context.Context, res *deploybody.Result, runErr error, nodeWait, interval time.Duration) (bool, error) {
	if g.taken == "" {
		return false, nil
	}
	// The deploy's own deadline may be spent; probe and restore get their own bounded time.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nodeWait+5*time.Minute)
	defer cancel()
	if !unreachableAfterSwitch(res, runErr) {
		if !mayBeUnreachable(res, runErr) || g.answers(rctx, nodeWait, interval) {
			return false, nil
		}
	}
	return true, g.RestoreSnapshot(rctx, g.taken)
}

// answers polls the node until it answers twice in a row, interval apart, with a
// systemd that is up (not "stopping": a node that powers itself off still answers for a
// moment), or until wait has passed.
func (g *snapshotGuard) answers(ctx context.Context, wait, interval time.Duration) bool {
	if interval <= 0 {
		interval = time.Second
	}
	deadline := time.Now().Add(wait)
	good := 0
	for i := 0; i < 1000; i++ {
		if g.systemdUp(ctx) {
			good++
			if good >= 2 {
				return true
			}
		} else {
			good = 0
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(interval):
		}
	}
	return false
}

func (g *snapshotGuard) systemdUp(ctx context.Context) bool {
	if g.Reach(ctx) != nil {
		return false
	}
	res, err := g.Run(ctx, []string{"systemctl", "is-system-running"}, deploybody.RunOptions{})
	if err != nil {
		return false
	}
	switch strings.TrimSpace(string(res.Stdout)) {
	case "running", "degraded", "starting", "initializing", "maintenance":
		return true
	}
	return false
}

func (g *snapshotGuard) diagnostic(node string, restoreErr error) diag.Diagnostics {
	var diags diag.Diagnostics
	if restoreErr != nil {
		diags.AddError(fmt.Sprintf("Node %s is unreachable after the switch and its snapshot could not be restored", node),
			fmt.Sprintf("Node %s, phase restore-snapshot: the node did not answer after the switch; restoring snapshot %s failed: %v. "+
				"Restore it by hand (`incus snapshot restore %s %s`) and start the instance.", node, g.taken, restoreErr, g.instance, g.taken))
		return diags
	}
	diags.AddError(fmt.Sprintf("Node %s was unreachable after the switch: snapshot %s restored", node, g.taken),
		fmt.Sprintf("Node %s, phase wait-for-node: the node did not answer after the switch, so the snapshot %s taken before it was restored "+
			"and the instance started again; it runs its previous system. Find out why the new closure bricks the node before applying it again.", node, g.taken))
	return diags
}

// sshPool keeps one SSH connection per target for the life of the provider process,
// so the phases of a deploy and the Read of the next plan reuse it.
var sshPool sshtransport.Pool

// sshConfig builds the SSH transport's config from a target plus the provider's per-run
// credentials (key file, agent socket), which never come from the resource.
func sshConfig(t transportTarget, cfg *Config) sshtransport.Config {
	c := sshtransport.Config{
		Host: t.Host, Port: t.Port, User: t.User,
		HostKey: t.HostKey, KnownHostsFile: t.KnownHostsFile, InsecureIgnoreHostKey: t.InsecureIgnoreHostKey,
		PrivateKeyFile: cfg.SSHPrivateKeyFile, AgentSocket: cfg.SSHAuthSock,
		Keepalive: t.Keepalive,
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
	tr, err := sshPool.Transport(node, c, log)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	return tr, nil
}
