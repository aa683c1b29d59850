// Package nodespec is everything a deploy (or verdict pass) of one node takes, as one
// type both front ends decode into: the provider's node resources from their schema,
// the `fediversity` command from its roster. Spec.Validate checks it once, with one set
// of messages (the field, the node, what to do), so the two front ends accept and
// refuse the same input in the same words; Target, SSHConfig and Options turn it into
// what the engines take.
//
// It is a package of its own, beside the engines: it names the transports' settings
// (SSH, Incus) and the build, which the deploy body is kept free of (the body reaches
// nodes only through its Transport interface); it is not in internal/provider, because
// the command must not import the plugin framework; and not in internal/fleet, because
// the provider deploys single nodes, not groups.
package nodespec

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// Spec is one node's deploy. JSON names are the roster's (the same names the provider's
// schema uses); the roster spells the SSH settings at the node's top level.
type Spec struct {
	Node string `json:"-"`

	// The target: exactly one of SSH and Incus.
	SSH   *SSH   `json:"-"`
	Incus *Incus `json:"incus,omitempty"`

	// Snapshot guards an Incus node's switch with a native snapshot, restored when the
	// node stops answering after it.
	Snapshot *Snapshot `json:"snapshot,omitempty"`

	// Toplevel is a prebuilt system; else Build builds one, handed NodePlan.
	Toplevel string `json:"toplevel,omitempty"`
	Build    *Build `json:"build,omitempty"`
	NodePlan string `json:"-"`

	Checks []Check `json:"checks,omitempty"`
	Probes []Probe `json:"probes,omitempty"`

	// Strict: a failed unit fails the run (the default); false warns instead.
	Strict *bool `json:"strict,omitempty"`
	// Activation is how the node comes to run its new system: "switch" ("" too),
	// "boot", "reboot-if-needed" or "reboot" (deploybody.Activation).
	Activation string `json:"activation,omitempty"`
	// SecretChain are the units that bring the node's secrets up, in order.
	SecretChain []string `json:"secret_chain,omitempty"`
	// LoopBudgets are per-unit restart budgets.
	LoopBudgets map[string]int64 `json:"loop_budgets,omitempty"`
	// Timings are the node's own, as written ("30s"); unset ones come from the front
	// end's defaults, then the table's (deploybody.TimingTable).
	Timings map[string]string `json:"timings,omitempty"`
}

// SSH reaches the node over SSH. Credentials are never here: they are per run.
type SSH struct {
	Host           string `json:"host"`
	Port           int    `json:"port,omitempty"`
	User           string `json:"user,omitempty"`
	HostKey        string `json:"host_key,omitempty"`
	KnownHostsFile string `json:"known_hosts_file,omitempty"`
	// InsecureIgnoreHostKey accepts any host key: throwaway nodes only.
	InsecureIgnoreHostKey bool `json:"insecure_ignore_host_key,omitempty"`
	// Keepalive is a Go duration; "" is DefaultKeepalive, "0s" turns keepalives off.
	Keepalive string `json:"keepalive,omitempty"`
	// Sudo runs the commands that change the system through `sudo -n` as User.
	Sudo bool `json:"sudo,omitempty"`
	// RevertOnLockout arms the node-side revert before the switch (nil: true).
	RevertOnLockout *bool `json:"revert_on_lockout,omitempty"`
	Jump            *Jump `json:"jump,omitempty"`
}

// Jump is the host the node is reached through (ssh -J).
type Jump struct {
	Host           string `json:"host"`
	Port           int    `json:"port,omitempty"`
	User           string `json:"user,omitempty"`
	HostKey        string `json:"host_key,omitempty"`
	KnownHostsFile string `json:"known_hosts_file,omitempty"`
}

// Incus reaches the node as an Incus instance.
type Incus struct {
	Instance string `json:"instance"`
	Project  string `json:"project,omitempty"`
	Remote   string `json:"remote,omitempty"`
}

// Snapshot is the Incus snapshot guard: Enabled (nil: true) and how many rollback
// points to keep (0: DefaultSnapshotKeep).
type Snapshot struct {
	Enabled *bool `json:"enabled,omitempty"`
	Keep    int   `json:"keep,omitempty"`
	// InterruptedRestore is what a deploy does first with a restore an earlier run left
	// unfinished: InterruptedRestoreFinish ("": the default) or InterruptedRestoreAbort.
	InterruptedRestore string `json:"interrupted_restore,omitempty"`
}

// The values of Snapshot.InterruptedRestore.
const (
	// InterruptedRestoreFinish restores the set the cut-off restore was restoring.
	InterruptedRestoreFinish = "finish"
	// InterruptedRestoreAbort puts the instance back on the state kept aside (the
	// state that stopped answering), for an operator who wants to look at it.
	InterruptedRestoreAbort = "abort"
)

// InterruptedRestore is what the run's snapshot guard does with a restore an earlier
// run left unfinished.
func (s Spec) InterruptedRestore() string {
	if s.Snapshot == nil || s.Snapshot.InterruptedRestore == "" {
		return InterruptedRestoreFinish
	}
	return s.Snapshot.InterruptedRestore
}

// DefaultSnapshotKeep is how many rollback points the snapshot guard keeps.
const DefaultSnapshotKeep = 3

// SnapshotKeep is how many rollback points the run's snapshot guard keeps; 0 means no
// guard.
func (s Spec) SnapshotKeep() int {
	switch {
	case s.Snapshot == nil || (s.Snapshot.Enabled != nil && !*s.Snapshot.Enabled):
		return 0
	case s.Snapshot.Keep > 0:
		return s.Snapshot.Keep
	}
	return DefaultSnapshotKeep
}

// Build is how the node's system is built: exactly one of Flake
// (`<flake ref>#<attribute>`, evaluated with nix eval), Installable
// (`<file>#<attribute>`), File and Expression (nix-build).
type Build struct {
	Flake       string            `json:"flake,omitempty"`
	Installable string            `json:"installable,omitempty"`
	File        string            `json:"file,omitempty"`
	Attribute   string            `json:"attribute,omitempty"`
	Expression  string            `json:"expression,omitempty"`
	Args        map[string]string `json:"args,omitempty"`
}

// Problem is one thing wrong with a spec.
type Problem struct {
	Node string
	// Field is in the provider's terms: "ssh.host_key", "timings.watch",
	// "secret_chain[1]", `loop_budgets["a.service"]`, "checks".
	Field string
	// Summary is a short title (the provider's diagnostic summary).
	Summary string
	// Message says what is wrong and what to do.
	Message string
	// At is where the provider attaches the problem when it is not Field: a missing
	// choice between fields (host_key or known_hosts_file) belongs to their block.
	At string
}

func (p Problem) String() string { return p.Field + ": " + p.Message }

// Transports are the keys of the transports the spec gives ("ssh", "incus"), in the
// order of Spec's fields; Validate accepts exactly one. The front ends ask this rather
// than naming each transport, so that a new one is a field here and a case in Target.
func (s Spec) Transports() []string {
	var given []string
	if s.SSH != nil {
		given = append(given, "ssh")
	}
	if s.Incus != nil {
		given = append(given, "incus")
	}
	return given
}

// Validate reports everything wrong with s, in a stable order. A spec without a
// target is not refused here: each front end says in its own terms where the target
// goes (the provider's blocks, the roster's host).
func (s Spec) Validate() []Problem {
	v := &validation{node: s.Node}
	if given := s.Transports(); len(given) > 1 {
		v.bad(given[1], "Conflicting transports", "give exactly one transport: SSH (host) or incus, not both; a node is reached one way")
	}
	if s.SSH != nil {
		v.ssh(*s.SSH)
	}
	if s.Incus != nil && s.Incus.Instance == "" {
		v.bad("incus.instance", "Missing Incus instance", "missing: incus.instance names the Incus instance of the node; set it")
	}
	if s.Snapshot != nil {
		if s.SSH != nil {
			v.bad("snapshot", "Snapshots need the Incus transport", "an SSH node has no native snapshots; remove the snapshot, or reach the node over incus")
		}
		if s.Snapshot.Keep < 0 {
			v.bad("snapshot.keep", "Invalid snapshot keep", fmt.Sprintf("%d: want 1 or more rollback points (leave it out for %d)", s.Snapshot.Keep, DefaultSnapshotKeep))
		}
		switch s.Snapshot.InterruptedRestore {
		case "", InterruptedRestoreFinish, InterruptedRestoreAbort:
		default:
			v.bad("snapshot.interrupted_restore", "Invalid snapshot interrupted_restore",
				fmt.Sprintf("%q: want %q (restore the rollback point an earlier run's cut-off restore was restoring; the default) or %q (put the instance back on the state that run kept aside)",
					s.Snapshot.InterruptedRestore, InterruptedRestoreFinish, InterruptedRestoreAbort))
		}
	}
	if s.Toplevel != "" && !nixstore.ValidStorePath(s.Toplevel) {
		v.bad("toplevel", "Not a Nix store path", fmt.Sprintf("%q is not a Nix store path (/nix/store/<hash>-<name>): give the store path of a built system, such as nix-build's output", s.Toplevel))
	}
	if s.Toplevel != "" && s.Build != nil {
		v.bad("build", "Conflicting build inputs", "give toplevel (a prebuilt system) or build, not both")
	}
	if s.Build != nil {
		v.build(*s.Build)
	}
	if s.NodePlan != "" && !json.Valid([]byte(s.NodePlan)) {
		v.bad("node_plan", "Invalid node plan", "not JSON; pass data.fediversity_submission.<name>.node_plans[\"<node>\"]")
	}
	if !deploybody.ValidActivation(s.Activation) {
		v.bad("activation", "Unknown activation", fmt.Sprintf("%q is not an activation; want one of %s (leave it out for switch)", s.Activation, activationNames()))
	}
	for i, u := range s.SecretChain {
		if !judge.ValidUnitName(u) {
			v.bad(fmt.Sprintf("secret_chain[%d]", i), "Invalid unit name", fmt.Sprintf("%q is not a systemd unit name (want e.g. \"secrets-fetch.service\")", u))
		}
	}
	for _, u := range sortedKeys(s.LoopBudgets) {
		if n := s.LoopBudgets[u]; !judge.ValidUnitName(u) || n < 0 {
			v.bad(fmt.Sprintf("loop_budgets[%q]", u), "Invalid loop budget", fmt.Sprintf("loop_budgets[%q] = %d: want a systemd unit name and a budget ≥ 0", u, n))
		}
	}
	v.timings(s.Timings)
	if _, _, err := s.checks(); err != nil {
		v.bad("checks", "Invalid health checks", err.Error()+"; fix the check or probe named")
	}
	return v.problems
}

type validation struct {
	node     string
	problems []Problem
}

func (v *validation) bad(field, summary, message string) {
	v.problems = append(v.problems, Problem{Node: v.node, Field: field, Summary: summary, Message: message})
}

// badBlock is bad with the problem attached to block.
func (v *validation) badBlock(block, field, summary, message string) {
	v.bad(field, summary, message)
	v.problems[len(v.problems)-1].At = block
}

func (v *validation) ssh(s SSH) {
	if s.Host == "" {
		v.bad("ssh.host", "Missing SSH host", "missing: give the node's sshd host name or address")
	}
	v.port("ssh.port", s.Port)
	if s.HostKey == "" && s.KnownHostsFile == "" && !s.InsecureIgnoreHostKey {
		v.badBlock("ssh", "ssh.host_key", "No pinned host key", fmt.Sprintf(
			"missing: the node %s is reached over SSH, but neither host_key nor known_hosts_file pins its host key. "+
				"Set one of them (e.g. host_key = \"ssh-ed25519 AAAA…\" from the node's /etc/ssh/ssh_host_ed25519_key.pub); "+
				"insecure_ignore_host_key = true turns the check off for throwaway nodes only", HostPort(s.Host, s.portOrDefault())))
	}
	if err := CheckHostKey(s.HostKey); err != nil {
		v.bad("ssh.host_key", "Not an SSH host key", err.Error())
	}
	if _, err := parseKeepalive(s.Keepalive); err != nil {
		v.bad("ssh.keepalive", "Invalid duration", err.Error())
	}
	if j := s.Jump; j != nil {
		if j.Host == "" {
			v.bad("ssh.jump.host", "Missing jump host", "missing: name the jump host, or remove the jump")
		}
		v.port("ssh.jump.port", j.Port)
		if j.HostKey == "" && j.KnownHostsFile == "" && s.KnownHostsFile == "" {
			v.badBlock("ssh.jump", "ssh.jump.host_key", "No pinned host key for the jump host", fmt.Sprintf(
				"missing: the jump host %s has no pinned host key: set jump.host_key or jump.known_hosts_file (or the node's known_hosts_file, which it shares). "+
					"insecure_ignore_host_key on the node does not reach the jump host", HostPort(j.Host, portOrDefault(j.Port))))
		}
		if err := CheckHostKey(j.HostKey); err != nil {
			v.bad("ssh.jump.host_key", "Not an SSH host key", err.Error())
		}
	}
}

func (v *validation) port(field string, p int) {
	if p < 0 || p > 65535 {
		v.bad(field, "Invalid port", fmt.Sprintf("%d is not a TCP port (1-65535); leave it out for 22", p))
	}
}

func (v *validation) build(b Build) {
	if b.Flake != "" {
		v.flake(b)
		return
	}
	given := 0
	for _, s := range []string{b.Installable, b.File, b.Expression} {
		if s != "" {
			given++
		}
	}
	switch {
	case b.Installable != "" && given > 1:
		v.bad("build.installable", "Conflicting build inputs", "build.installable already names the file (and attribute); remove build.file / build.expression")
	case b.Installable != "" && strings.Contains(b.Installable, "#") && b.Attribute != "":
		v.bad("build.attribute", "Conflicting build inputs", "build.installable already names the attribute after '#'; remove build.attribute")
	case given != 1:
		v.bad("build", "Incomplete build block", "give exactly one of file and expression (or installable, `<file>#<attribute>`; or flake, `<flake ref>#<attribute>`)")
	}
}

// flake checks the flake form: the reference and attribute in one string, and none of
// the nix-build fields beside it.
func (v *validation) flake(b Build) {
	if b.Installable != "" || b.File != "" || b.Expression != "" || b.Attribute != "" {
		v.bad("build.flake", "Conflicting build inputs",
			"build.flake names the flake and its attribute; remove build.installable, build.file, build.expression and build.attribute")
	}
	if len(b.Args) > 0 {
		v.bad("build.args", "Arguments do not reach a flake",
			"a flake takes no arguments (nix eval has no --argstr); put the values in the flake, or read them from the node plan (the flake input "+nixstore.NodePlanInput+")")
	}
	if _, _, ok := nixstore.SplitFlake(b.Flake); !ok {
		v.bad("build.flake", "Invalid flake build", fmt.Sprintf(
			"%q: want `<flake ref>#<attribute>`, the attribute being the system's toplevel, e.g. \".#nixosConfigurations.%s.config.system.build.toplevel\"", b.Flake, v.node))
	}
}

func (v *validation) timings(t map[string]string) {
	for _, name := range sortedKeys(t) {
		tm, ok := deploybody.LookupTiming(name)
		if !ok || !tm.NodeTiming() {
			v.bad("timings."+name, "Unknown timing", "unknown timing; known: "+strings.Join(NodeTimingNames(), ", "))
			continue
		}
		if _, err := deploybody.ParseTiming(name, t[name]); err != nil {
			v.bad("timings."+name, "Invalid duration", err.Error())
		}
	}
}

// NodeTimingNames are the timings a node's run reads: the keys a spec's (and a
// roster's) timings may have.
func NodeTimingNames() []string {
	var names []string
	for _, t := range deploybody.TimingTable {
		if t.NodeTiming() {
			names = append(names, t.Name)
		}
	}
	return names
}

// NixBuild is the build as nix-build (or, for a flake, nix eval) takes it; a relative
// file or path flake reference is taken from dir (the roster's directory; "" is the
// working directory).
func (s Spec) NixBuild(dir string) nixstore.BuildSpec {
	b := s.Build
	if b.Flake != "" {
		ref, attr, _ := nixstore.SplitFlake(b.Flake)
		return nixstore.BuildSpec{Flake: nixstore.FlakeRefIn(ref, dir), Attr: attr}
	}
	spec := nixstore.BuildSpec{File: b.File, Attr: b.Attribute, Expr: b.Expression, ArgStr: b.Args}
	if b.Installable != "" {
		file, attr, _ := strings.Cut(b.Installable, "#")
		spec.File = file
		if attr != "" {
			spec.Attr = attr
		}
	}
	if dir != "" && spec.File != "" && !filepath.IsAbs(spec.File) {
		spec.File = filepath.Join(dir, spec.File)
	}
	return spec
}

// activationNames lists the activations for messages: "switch", "boot", ….
func activationNames() string {
	var names []string
	for _, a := range deploybody.Activations {
		names = append(names, fmt.Sprintf("%q", a))
	}
	return strings.Join(names, ", ")
}
