// Package fleet runs the deploy body on a whole group of nodes (over SSH, or Incus),
// without Terraform state: it is the engine of the `ssh` deployment method and of the
// `fediversity` command (cmd/fediversity). It reads a roster (each node's spec,
// internal/nodespec), takes the node plans of a submission (internal/submission),
// builds each enabled node, and deploys or judges them with bounded concurrency.
//
// It must not import the plugin framework: the command only parses, runs and prints,
// and every line of engine code is shared with the provider.
package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
)

// Roster says how to reach and build every node of a group. It is a JSON file:
//
//	{
//	  "build":   {"file": "nodes.nix", "attribute": "system"},   // default for every node
//	  "timings": {"settle": "2s", "watch": "6s", "lock_wait": "5m"},
//	  "nodes": {
//	    "web01": {"host": "10.0.0.5", "port": 22, "user": "deploy", "sudo": true,
//	              "host_key": "ssh-ed25519 AAAA…", "keepalive": "30s",
//	              "jump": {"host": "bastion", "host_key": "ssh-ed25519 AAAA…"}},
//	    "web02": {"host": "10.0.0.6", "known_hosts_file": "/etc/ssh/ssh_known_hosts",
//	              "toplevel": "/nix/store/…-nixos-system-web02", "revert_on_lockout": false},
//	    "web03": {"incus": {"instance": "web03"}, "snapshot": {"keep": 2}, "strict": false}
//	  }
//	}
//
// Each node decodes into the engine's node spec (internal/nodespec), the one the
// provider's node resources decode into, and is checked by its one validation: a roster
// can say everything a fediversity_node_switch can. The nodes are the same map the
// modules' `nodes` variable takes. Roster-wide build, timings, checks, probes,
// secret_chain and loop_budgets are every node's defaults (a node's own win; checks
// and probes add up).
//
// Credentials are never in a roster: the key file and agent come from
// SSH_PRIVATE_KEY_FILE and SSH_AUTH_SOCK, as for the provider; an Incus node is reached
// through the local daemon (INCUS_SOCKET).
type Roster struct {
	Build       *nodespec.Build       `json:"build,omitempty"`
	Timings     map[string]string     `json:"timings,omitempty"`
	Nodes       map[string]RosterNode `json:"nodes"`
	Checks      []nodespec.Check      `json:"checks,omitempty"`
	Probes      []nodespec.Probe      `json:"probes,omitempty"`
	SecretChain []string              `json:"secret_chain,omitempty"`
	LoopBudgets map[string]int64      `json:"loop_budgets,omitempty"`
	// Rollout stages a deploy of the group (a canary, waves, a failure budget); the
	// command's flags win over it.
	Rollout *Rollout `json:"rollout,omitempty"`

	// dir is the roster file's directory: relative build files are taken from it.
	dir string
}

// RosterNode is one node's entry: its node spec as JSON, with the SSH settings spelled
// at the node's top level (or an incus object). Both are embedded, so every key of a
// node spec is a roster key as soon as the spec has it: the entry lists none of them a
// second time (the spec's own SSH, Node and NodePlan fields have no JSON name).
type RosterNode struct {
	nodespec.SSH
	nodespec.Spec
}

// InputError is bad input: the command exits 2 and nothing was done on any node.
type InputError struct{ Problems []string }

func (e *InputError) Error() string {
	return strings.Join(e.Problems, "\n")
}

// IsInputError reports whether err is bad input.
func IsInputError(err error) bool {
	var ie *InputError
	return errors.As(err, &ie)
}

// LoadRoster reads and checks a roster file. Every problem names the file, the node and
// the field.
func LoadRoster(file string) (*Roster, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, &InputError{[]string{fmt.Sprintf("roster %s: %v", file, err)}}
	}
	r, err := decodeRoster(raw)
	if err != nil {
		return nil, &InputError{[]string{fmt.Sprintf("roster %s: %v", file, err)}}
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, &InputError{[]string{fmt.Sprintf("roster %s: %v", file, err)}}
	}
	r.dir = filepath.Dir(abs)
	if problems := r.check(file); len(problems) > 0 {
		return nil, &InputError{problems}
	}
	return &r, nil
}

// decodeRoster decodes strictly (unknown fields are refused: a typo must not pass
// silently), node by node so an error names the node.
func decodeRoster(raw []byte) (Roster, error) {
	var top struct {
		Roster
		Nodes map[string]json.RawMessage `json:"nodes"`
	}
	if err := strictDecode(raw, &top); err != nil {
		return Roster{}, errors.New(describeJSONError(raw, err))
	}
	r := top.Roster
	r.Nodes = map[string]RosterNode{}
	for name, msg := range top.Nodes {
		var n RosterNode
		if err := strictDecode(msg, &n); err != nil {
			return Roster{}, fmt.Errorf("node %q: %s", name, describeJSONError(msg, err))
		}
		r.Nodes[name] = n
	}
	return r, nil
}

func strictDecode(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func describeJSONError(raw []byte, err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Sprintf("not valid JSON: it ends at offset %d (line %d) before the document is complete (truncated?)",
			len(raw), 1+bytes.Count(raw, []byte("\n")))
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(raw[:min(int(se.Offset), len(raw))], []byte("\n"))
		return fmt.Sprintf("not valid JSON at line %d (offset %d): %v", line, se.Offset, err)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// A node's SSH settings and spec are embedded structs: the roster spells their
		// keys at the node's top level.
		field := strings.TrimPrefix(strings.TrimPrefix(te.Field, "SSH."), "Spec.")
		return fmt.Sprintf("field %q: want %s, got a JSON %s", field, te.Type, te.Value)
	}
	if errors.Is(err, io.EOF) {
		return "empty file: want a JSON object with \"nodes\""
	}
	return err.Error()
}

// check validates the roster-wide defaults once, then each node's spec, with the
// node spec's one validation; a problem of a default is not repeated for every node.
func (r *Roster) check(file string) []string {
	var problems []string
	say := func(p nodespec.Problem) string {
		where := fmt.Sprintf("roster %s: ", file)
		if p.Node != "" {
			where += fmt.Sprintf("node %q: ", p.Node)
		}
		// The roster spells a node's SSH settings at its top level.
		return where + strings.TrimPrefix(p.String(), "ssh.")
	}
	if len(r.Nodes) == 0 {
		problems = append(problems, fmt.Sprintf("roster %s: nodes: no nodes: give one entry per node, e.g. \"nodes\": {\"web01\": {\"host\": \"…\"}}", file))
	}
	seen := map[string]bool{}
	// The roster's checks are checked with each node's: their names share one namespace.
	defaults := r.defaults()
	defaults.Checks, defaults.Probes = nil, nil
	for _, p := range defaults.Validate() {
		seen[p.String()] = true
		problems = append(problems, say(p))
	}
	for _, name := range r.NodeNames() {
		for _, p := range r.Spec(name).Validate() {
			if !seen[p.String()] {
				problems = append(problems, say(p))
			}
		}
	}
	return problems
}

// defaults is the roster-wide part of every node's spec.
func (r *Roster) defaults() nodespec.Spec {
	return nodespec.Spec{Build: r.Build, Timings: r.Timings, Checks: r.Checks, Probes: r.Probes,
		SecretChain: r.SecretChain, LoopBudgets: r.LoopBudgets}
}

// Spec is node's spec: its entry over the roster's defaults. A node whose entry names
// no other transport (an incus object) is reached over SSH, with the SSH settings at
// its top level. This is the one place the command decodes a transport: any other
// transport is a key of the embedded spec, decoded with it.
func (r *Roster) Spec(node string) nodespec.Spec {
	n := r.Nodes[node]
	s := n.Spec
	s.Node = node
	if len(s.Transports()) == 0 || n.SSH != (nodespec.SSH{}) {
		ssh := n.SSH
		s.SSH = &ssh // with another transport too: two, refused by Validate
	}
	// The roster's defaults, under the node's own. A prebuilt system wins over the
	// roster's default build; checks and probes add up.
	if s.Build == nil && s.Toplevel == "" {
		s.Build = r.Build
	}
	s.Checks = append(append([]nodespec.Check{}, n.Checks...), r.Checks...)
	s.Probes = append(append([]nodespec.Probe{}, n.Probes...), r.Probes...)
	if s.SecretChain == nil {
		s.SecretChain = r.SecretChain
	}
	if s.LoopBudgets == nil {
		s.LoopBudgets = r.LoopBudgets
	}
	s.Timings = map[string]string{}
	for k, v := range r.Timings {
		s.Timings[k] = v
	}
	for k, v := range n.Timings {
		s.Timings[k] = v
	}
	return s
}

// NodeNames are the roster's nodes, sorted.
func (r *Roster) NodeNames() []string {
	names := make([]string, 0, len(r.Nodes))
	for n := range r.Nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Credentials are the per-run SSH credentials (never in a roster, never printed).
type Credentials = nodespec.Credentials

// CredentialsFromEnv reads SSH_PRIVATE_KEY_FILE and SSH_AUTH_SOCK.
func CredentialsFromEnv() Credentials {
	return Credentials{PrivateKeyFile: os.Getenv("SSH_PRIVATE_KEY_FILE"), AgentSocket: os.Getenv("SSH_AUTH_SOCK")}
}
