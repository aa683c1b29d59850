// Package fleet runs the deploy body on a whole group of nodes over SSH, without
// Terraform state: it is the engine of the `ssh` deployment method and of the
// `fediversity` command (cmd/fediversity). It reads a roster (how to reach each node),
// takes the node plans of a submission (internal/submission), builds each enabled
// node, and deploys or judges them with bounded concurrency.
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
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	sshtransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/ssh"
)

// Roster says how to reach and build every node of a group. It is a JSON file:
//
//	{
//	  "build":   {"file": "nodes.nix", "attribute": "system"},   // default for every node
//	  "timings": {"settle": "2s", "watch": "6s"},
//	  "nodes": {
//	    "web01": {"host": "10.0.0.5", "port": 22, "user": "root",
//	              "host_key": "ssh-ed25519 AAAA…",
//	              "jump": {"host": "bastion", "host_key": "ssh-ed25519 AAAA…"}},
//	    "web02": {"host": "10.0.0.6", "known_hosts_file": "/etc/ssh/ssh_known_hosts",
//	              "toplevel": "/nix/store/…-nixos-system-web02"}
//	  }
//	}
//
// Credentials are never in a roster: the key file and agent come from
// SSH_PRIVATE_KEY_FILE and SSH_AUTH_SOCK, as for the provider.
type Roster struct {
	Build   *BuildSpec            `json:"build,omitempty"`
	Timings map[string]string     `json:"timings,omitempty"`
	Nodes   map[string]RosterNode `json:"nodes"`
	// Checks and Probes run on every node, after the node's own.
	Checks []Check `json:"checks,omitempty"`
	Probes []Probe `json:"probes,omitempty"`

	// dir is the roster file's directory: relative build files are taken from it.
	dir string
}

// RosterNode is one node's entry.
type RosterNode struct {
	Host           string      `json:"host"`
	Port           int         `json:"port,omitempty"`
	User           string      `json:"user,omitempty"`
	HostKey        string      `json:"host_key,omitempty"`
	KnownHostsFile string      `json:"known_hosts_file,omitempty"`
	Jump           *RosterJump `json:"jump,omitempty"`
	// Toplevel is a prebuilt system; it wins over Build.
	Toplevel string     `json:"toplevel,omitempty"`
	Build    *BuildSpec `json:"build,omitempty"`
	// Checks run on the node and Probes from the deployer after the settle; a failed
	// one fails a strict verdict.
	Checks []Check `json:"checks,omitempty"`
	Probes []Probe `json:"probes,omitempty"`
}

// Check is a command run on the node until it exits ExpectExit (default 0).
type Check struct {
	Name       string   `json:"name"`
	Argv       []string `json:"argv"`
	ExpectExit int      `json:"expect_exit,omitempty"`
	Interval   string   `json:"interval,omitempty"`
	Timeout    string   `json:"timeout,omitempty"`
}

// Probe is a request from the deployer: an HTTP(S) URL that must answer ExpectStatus
// (default 200) and match BodyPattern when set, or a TCP address that must accept.
type Probe struct {
	Name         string `json:"name"`
	URL          string `json:"url,omitempty"`
	TCP          string `json:"tcp,omitempty"`
	ExpectStatus int    `json:"expect_status,omitempty"`
	BodyPattern  string `json:"body_pattern,omitempty"`
	Insecure     bool   `json:"insecure,omitempty"`
	Interval     string `json:"interval,omitempty"`
	Timeout      string `json:"timeout,omitempty"`
}

// RosterJump is the jump host a node is reached through (ssh -J).
type RosterJump struct {
	Host           string `json:"host"`
	Port           int    `json:"port,omitempty"`
	User           string `json:"user,omitempty"`
	HostKey        string `json:"host_key,omitempty"`
	KnownHostsFile string `json:"known_hosts_file,omitempty"`
}

// BuildSpec is how a node's system is built: a Nix file (or expression) and an
// attribute, evaluated with the node plan passed as `--argstr planFile <file>`.
type BuildSpec struct {
	File       string            `json:"file,omitempty"`
	Expression string            `json:"expression,omitempty"`
	Attribute  string            `json:"attribute,omitempty"`
	Args       map[string]string `json:"args,omitempty"`
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
		Build   *BuildSpec                 `json:"build,omitempty"`
		Timings map[string]string          `json:"timings,omitempty"`
		Nodes   map[string]json.RawMessage `json:"nodes"`
		Checks  []Check                    `json:"checks,omitempty"`
		Probes  []Probe                    `json:"probes,omitempty"`
	}
	if err := strictDecode(raw, &top); err != nil {
		return Roster{}, errors.New(describeJSONError(raw, err))
	}
	r := Roster{Build: top.Build, Timings: top.Timings, Checks: top.Checks, Probes: top.Probes, Nodes: map[string]RosterNode{}}
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
		return fmt.Sprintf("field %q: want %s, got a JSON %s", te.Field, te.Type, te.Value)
	}
	if errors.Is(err, io.EOF) {
		return "empty file: want a JSON object with \"nodes\""
	}
	return err.Error()
}

func (r *Roster) check(file string) []string {
	var problems []string
	bad := func(node, field, format string, args ...any) {
		where := fmt.Sprintf("roster %s: ", file)
		if node != "" {
			where += fmt.Sprintf("node %q: ", node)
		}
		problems = append(problems, where+field+": "+fmt.Sprintf(format, args...))
	}
	if len(r.Nodes) == 0 {
		bad("", "nodes", "no nodes: give one entry per node, e.g. \"nodes\": {\"web01\": {\"host\": \"…\"}}")
	}
	if r.Build != nil {
		if msg := r.Build.problem(); msg != "" {
			bad("", "build", "%s", msg)
		}
	}
	for name, v := range r.Timings {
		if !isTiming(name) {
			bad("", "timings."+name, "unknown timing; known: %s", strings.Join(timingNames(), ", "))
			continue
		}
		if d, err := time.ParseDuration(v); err != nil || d <= 0 {
			bad("", "timings."+name, "%q is not a positive duration (e.g. \"30s\", \"2m\")", v)
		}
	}
	for _, name := range r.NodeNames() {
		n := r.Nodes[name]
		if n.Host == "" {
			bad(name, "host", "missing: give the node's address")
		}
		if n.Port < 0 || n.Port > 65535 {
			bad(name, "port", "%d is not a TCP port", n.Port)
		}
		if n.HostKey == "" && n.KnownHostsFile == "" {
			bad(name, "host_key", "missing: pin the node's host key (host_key, authorized_keys format) or give known_hosts_file")
		}
		if n.HostKey != "" && len(strings.Fields(n.HostKey)) < 2 {
			bad(name, "host_key", "%q is not in authorized_keys format (\"ssh-ed25519 AAAA…\")", n.HostKey)
		}
		if n.Jump != nil {
			if n.Jump.Host == "" {
				bad(name, "jump.host", "missing")
			}
			if n.Jump.HostKey == "" && n.Jump.KnownHostsFile == "" {
				bad(name, "jump.host_key", "missing: pin the jump host's key or give jump.known_hosts_file")
			}
		}
		if n.Toplevel != "" && !nixstore.ValidStorePath(n.Toplevel) {
			bad(name, "toplevel", "%q is not a Nix store path (/nix/store/<hash>-<name>)", n.Toplevel)
		}
		if n.Build != nil {
			if msg := n.Build.problem(); msg != "" {
				bad(name, "build", "%s", msg)
			}
		}
		if _, _, err := r.checksFor(name); err != nil {
			bad(name, "checks", "%v", err)
		}
	}
	return problems
}

// checksFor are the node's checks and probes, then the roster's, in the body's terms.
func (r *Roster) checksFor(node string) ([]deploybody.NodeCheck, []deploybody.Probe, error) {
	n := r.Nodes[node]
	var checks []deploybody.NodeCheck
	var probes []deploybody.Probe
	for _, c := range append(append([]Check{}, n.Checks...), r.Checks...) {
		iv, to, err := checkTimes(c.Name, c.Interval, c.Timeout)
		if err != nil {
			return nil, nil, err
		}
		checks = append(checks, deploybody.NodeCheck{Name: c.Name, Argv: c.Argv, ExpectExit: c.ExpectExit, Interval: iv, Timeout: to})
	}
	for _, p := range append(append([]Probe{}, n.Probes...), r.Probes...) {
		iv, to, err := checkTimes(p.Name, p.Interval, p.Timeout)
		if err != nil {
			return nil, nil, err
		}
		dp := deploybody.Probe{Name: p.Name, URL: p.URL, TCP: p.TCP, ExpectStatus: p.ExpectStatus, Insecure: p.Insecure, Interval: iv, Timeout: to}
		if p.BodyPattern != "" {
			re, err := regexp.Compile(p.BodyPattern)
			if err != nil {
				return nil, nil, fmt.Errorf("probe %q: body_pattern: %v", p.Name, err)
			}
			dp.BodyPattern = re
		}
		probes = append(probes, dp)
	}
	if err := deploybody.ValidateChecks(checks, probes); err != nil {
		return nil, nil, err
	}
	return checks, probes, nil
}

func checkTimes(name, interval, timeout string) (iv, to time.Duration, err error) {
	parse := func(field, v string) (time.Duration, error) {
		if v == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("check %q: %s: %q is not a positive duration", name, field, v)
		}
		return d, nil
	}
	if iv, err = parse("interval", interval); err != nil {
		return 0, 0, err
	}
	to, err = parse("timeout", timeout)
	return iv, to, err
}

func (b *BuildSpec) problem() string {
	if (b.File == "") == (b.Expression == "") {
		return "give exactly one of file and expression"
	}
	return ""
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

// sshConfig is the SSH transport's config of node: host key pinned, credentials from
// the environment (never from the roster).
func (r *Roster) sshConfig(name string, creds Credentials) sshtransport.Config {
	n := r.Nodes[name]
	c := sshtransport.Config{
		Host: n.Host, Port: n.Port, User: n.User,
		HostKey: n.HostKey, KnownHostsFile: n.KnownHostsFile,
		PrivateKeyFile: creds.PrivateKeyFile, AgentSocket: creds.AgentSocket,
	}
	if j := n.Jump; j != nil {
		c.Jump = &sshtransport.Config{
			Host: j.Host, Port: j.Port, User: j.User, HostKey: j.HostKey, KnownHostsFile: j.KnownHostsFile,
			PrivateKeyFile: creds.PrivateKeyFile, AgentSocket: creds.AgentSocket,
		}
	}
	return c
}

// buildFor is the build of node: its own, else the roster's default.
func (r *Roster) buildFor(name string) *BuildSpec {
	if b := r.Nodes[name].Build; b != nil {
		return b
	}
	return r.Build
}

// nixSpec turns a build into a nix-build spec; relative files are taken from the
// roster's directory.
func (r *Roster) nixSpec(b *BuildSpec) nixstore.BuildSpec {
	file := b.File
	if file != "" && !filepath.IsAbs(file) {
		file = filepath.Join(r.dir, file)
	}
	return nixstore.BuildSpec{File: file, Expr: b.Expression, Attr: b.Attribute, ArgStr: b.Args}
}

// Credentials are the per-run SSH credentials (never in a roster, never printed).
type Credentials struct {
	PrivateKeyFile string
	AgentSocket    string
}

// CredentialsFromEnv reads SSH_PRIVATE_KEY_FILE and SSH_AUTH_SOCK.
func CredentialsFromEnv() Credentials {
	return Credentials{PrivateKeyFile: os.Getenv("SSH_PRIVATE_KEY_FILE"), AgentSocket: os.Getenv("SSH_AUTH_SOCK")}
}

var timingSetters = map[string]func(*deploybody.Timings, time.Duration){
	"node_wait":       func(t *deploybody.Timings, d time.Duration) { t.NodeWait = d },
	"switch_timeout":  func(t *deploybody.Timings, d time.Duration) { t.SwitchTimeout = d },
	"settle":          func(t *deploybody.Timings, d time.Duration) { t.Settle = d },
	"watch":           func(t *deploybody.Timings, d time.Duration) { t.Watch = d },
	"sample_interval": func(t *deploybody.Timings, d time.Duration) { t.SampleInterval = d },
	"stale_job":       func(t *deploybody.Timings, d time.Duration) { t.StaleJob = d },
	"chain_wait":      func(t *deploybody.Timings, d time.Duration) { t.ChainWait = d },
	"no_progress":     func(t *deploybody.Timings, d time.Duration) { t.NoProgress = d },
	"confirm_timeout": func(t *deploybody.Timings, d time.Duration) { t.ConfirmTimeout = d },
}

func isTiming(name string) bool { _, ok := timingSetters[name]; return ok }

func timingNames() []string {
	names := make([]string, 0, len(timingSetters))
	for n := range timingSetters {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// timings are the roster's timings over the body's defaults (checked by LoadRoster).
func (r *Roster) timings() deploybody.Timings {
	var t deploybody.Timings
	for name, v := range r.Timings {
		if d, err := time.ParseDuration(v); err == nil {
			timingSetters[name](&t, d)
		}
	}
	return t
}
