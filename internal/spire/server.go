package spire

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// TrustDomain is the SPIFFE trust domain of the fleet.
const TrustDomain = "fediversity"

// ServerID is the SPIFFE ID of the SPIRE server: the parent of every node alias entry.
const ServerID = "spiffe://" + TrustDomain + "/spire/server"

// Runner runs argv on the spire node. deploybody.Transport (SSH, Incus) satisfies it.
type Runner interface {
	Run(ctx context.Context, argv []string, opts deploybody.RunOptions) (deploybody.RunResult, error)
}

// Server is a spire-server reached through the CLI on its node.
type Server struct {
	Runner Runner
	// Node names the spire node in messages.
	Node string
	// Command is the spire-server binary on the node. Default "spire-server".
	Command string
	// SocketPath is the server's admin socket. Empty: the CLI's default.
	SocketPath string
	// Service is the systemd unit of the server, signalled to reload the k8s_psat
	// clusters. Default "spire-server.service".
	Service string
	// StateDir holds the hand-off's kubeconfigs, drop-files and the generated k8s_psat
	// clusters on the node. Default "/var/lib/spire/fediversity".
	StateDir string
}

func (s *Server) command() string {
	if s.Command != "" {
		return s.Command
	}
	return "spire-server"
}

func (s *Server) service() string {
	if s.Service != "" {
		return s.Service
	}
	return "spire-server.service"
}

// Dir is the node directory of the hand-off's files.
func (s *Server) Dir() string {
	if s.StateDir != "" {
		return strings.TrimRight(s.StateDir, "/")
	}
	return "/var/lib/spire/fediversity"
}

// cli runs `spire-server <args…> [-socketPath …]` and returns stdout. A non-zero exit is
// an error carrying stderr (the CLI never prints secrets there: tokens only go to stdout).
func (s *Server) cli(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	argv := append([]string{s.command()}, args...)
	if s.SocketPath != "" {
		argv = append(argv, "-socketPath", s.SocketPath)
	}
	res, err := s.Runner.Run(ctx, argv, deploybody.RunOptions{Stdin: stdin})
	if err != nil {
		return nil, fmt.Errorf("spire node %s: %s %s: %w", s.Node, s.command(), strings.Join(args[:min(2, len(args))], " "), err)
	}
	if res.ExitCode != 0 {
		return res.Stdout, fmt.Errorf("spire node %s: `%s %s` exited %d: %s", s.Node, s.command(), strings.Join(args[:min(2, len(args))], " "),
			res.ExitCode, firstLines(string(res.Stderr)+string(res.Stdout), 5))
	}
	return res.Stdout, nil
}

// sh runs a POSIX shell script on the node with positional arguments (quoted by the
// transport) and stdin.
func (s *Server) sh(ctx context.Context, stdin []byte, script string, args ...string) (deploybody.RunResult, error) {
	argv := append([]string{"sh", "-c", script, "sh"}, args...)
	res, err := s.Runner.Run(ctx, argv, deploybody.RunOptions{Stdin: stdin})
	if err != nil {
		return res, fmt.Errorf("spire node %s: %w", s.Node, err)
	}
	return res, nil
}

// Healthy runs `spire-server healthcheck`: an error says the node or the server does not
// answer, and what to check.
func (s *Server) Healthy(ctx context.Context) error {
	if _, err := s.cli(ctx, nil, "healthcheck"); err != nil {
		return fmt.Errorf("%w (is spire-server running on the spire node, and is its admin socket where the CLI looks?)", err)
	}
	return nil
}

// MachineID is the spire node's /etc/machine-id. A remade spire node has a new one.
func (s *Server) MachineID(ctx context.Context) (string, error) {
	res, err := s.sh(ctx, nil, "cat /etc/machine-id")
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 || id == "" {
		return "", fmt.Errorf("spire node %s: no /etc/machine-id: %s", s.Node, firstLines(string(res.Stderr), 3))
	}
	return id, nil
}

// Bundle is the server's X.509 trust bundle (PEM, every CA certificate the agents must
// trust, including a prepared but not yet active CA after a rotation starts).
func (s *Server) Bundle(ctx context.Context) (string, error) {
	out, err := s.cli(ctx, nil, "bundle", "show", "-format", "pem")
	if err != nil {
		return "", err
	}
	b := strings.TrimSpace(string(out))
	if !strings.Contains(b, "-----BEGIN CERTIFICATE-----") {
		return "", fmt.Errorf("spire node %s: `bundle show` gave no PEM certificate", s.Node)
	}
	return b + "\n", nil
}

// Entry is a registration entry as the provider manages it.
type Entry struct {
	ID        string
	SpiffeID  string
	ParentID  string
	Selectors []string // "type:value", sorted
}

func (e Entry) equal(o Entry) bool {
	if e.ID != o.ID || e.SpiffeID != o.SpiffeID || e.ParentID != o.ParentID || len(e.Selectors) != len(o.Selectors) {
		return false
	}
	for i := range e.Selectors {
		if e.Selectors[i] != o.Selectors[i] {
			return false
		}
	}
	return true
}

type jsonID struct {
	TrustDomain string `json:"trust_domain"`
	Path        string `json:"path"`
}

type jsonSelector struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

type shownEntry struct {
	ID        string         `json:"id"`
	SpiffeID  jsonID         `json:"spiffe_id"`
	ParentID  jsonID         `json:"parent_id"`
	Selectors []jsonSelector `json:"selectors"`
}

// registrationEntry is the CLI's input form (`entry create|update -data -`).
type registrationEntry struct {
	EntryID   string         `json:"entry_id,omitempty"`
	SpiffeID  string         `json:"spiffe_id"`
	ParentID  string         `json:"parent_id"`
	Selectors []jsonSelector `json:"selectors"`
}

type batchResult struct {
	Results []struct {
		Status struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"status"`
		ID    string `json:"id"`
		Entry *struct {
			ID string `json:"id"`
		} `json:"entry"`
	} `json:"results"`
}

// Entries lists every registration entry of the server.
func (s *Server) Entries(ctx context.Context) ([]Entry, error) {
	out, err := s.cli(ctx, nil, "entry", "show", "-output", "json")
	if err != nil {
		return nil, err
	}
	return parseEntries(out)
}

func parseEntries(out []byte) ([]Entry, error) {
	var resp struct {
		Entries []shownEntry `json:"entries"`
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		return nil, fmt.Errorf("read `entry show -output json`: %w", err)
	}
	entries := make([]Entry, 0, len(resp.Entries))
	for _, e := range resp.Entries {
		entries = append(entries, Entry{
			ID: e.ID, SpiffeID: idString(e.SpiffeID), ParentID: idString(e.ParentID), Selectors: selectorStrings(e.Selectors),
		})
	}
	return entries, nil
}

func idString(id jsonID) string {
	if id.TrustDomain == "" {
		return ""
	}
	return "spiffe://" + id.TrustDomain + id.Path
}

func selectorStrings(ss []jsonSelector) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		out = append(out, s.Type+":"+s.Value)
	}
	sort.Strings(out)
	return out
}

func toRegistration(es []Entry) ([]byte, error) {
	regs := make([]registrationEntry, 0, len(es))
	for _, e := range es {
		r := registrationEntry{EntryID: e.ID, SpiffeID: e.SpiffeID, ParentID: e.ParentID}
		for _, sel := range e.Selectors {
			t, v, ok := strings.Cut(sel, ":")
			if !ok {
				return nil, fmt.Errorf("entry %s: selector %q is not type:value", e.ID, sel)
			}
			r.Selectors = append(r.Selectors, jsonSelector{Type: t, Value: v})
		}
		regs = append(regs, r)
	}
	return json.Marshal(map[string]any{"entries": regs})
}

// batch runs `entry <verb> -data -` (or `-file -` for delete) and fails naming every
// entry the server refused.
func (s *Server) batch(ctx context.Context, verb string, stdin []byte, ids []string) error {
	flag := "-data"
	if verb == "delete" {
		flag = "-file"
	}
	out, err := s.cli(ctx, stdin, "entry", verb, flag, "-", "-output", "json")
	if err != nil && len(out) == 0 {
		return err
	}
	var res batchResult
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		if err != nil {
			return err
		}
		return fmt.Errorf("spire node %s: read `entry %s` result: %w", s.Node, verb, jerr)
	}
	var failed []string
	for i, r := range res.Results {
		if r.Status.Code == 0 {
			continue
		}
		if verb == "delete" && r.Status.Code == 5 { // NotFound: already gone
			continue
		}
		id := ""
		if i < len(ids) {
			id = ids[i]
		}
		failed = append(failed, fmt.Sprintf("%s: %s", id, r.Status.Message))
	}
	if len(failed) > 0 {
		return fmt.Errorf("spire node %s: entry %s refused: %s", s.Node, verb, strings.Join(failed, "; "))
	}
	return err
}

// Changes says what a Reconcile did.
type Changes struct {
	Created, Updated, Deleted []string // entry IDs
}

// Reconcile makes the server's entries whose ID starts with prefix equal to want: it
// creates the missing ones, updates the changed ones and deletes the rest. Entries of
// other prefixes are not touched. Every want ID must start with prefix.
func (s *Server) Reconcile(ctx context.Context, prefix string, want []Entry) (Changes, error) {
	var ch Changes
	for _, w := range want {
		if !strings.HasPrefix(w.ID, prefix) {
			return ch, fmt.Errorf("entry %s is outside %s (a bug)", w.ID, prefix)
		}
	}
	have, err := s.Entries(ctx)
	if err != nil {
		return ch, err
	}
	create, update, del := diffEntries(prefix, have, want)
	if len(del) > 0 {
		if err := s.DeleteEntries(ctx, del); err != nil {
			return ch, err
		}
		ch.Deleted = del
	}
	// Parents first: a host entry names its alias as parent (the server does not check,
	// but an agent only sees the host entry once the alias exists).
	if len(create) > 0 {
		data, err := toRegistration(create)
		if err != nil {
			return ch, err
		}
		if err := s.batch(ctx, "create", data, ids(create)); err != nil {
			return ch, err
		}
		ch.Created = ids(create)
	}
	if len(update) > 0 {
		data, err := toRegistration(update)
		if err != nil {
			return ch, err
		}
		if err := s.batch(ctx, "update", data, ids(update)); err != nil {
			return ch, err
		}
		ch.Updated = ids(update)
	}
	return ch, nil
}

// DeleteEntries deletes entries by ID; IDs that are already gone are fine.
func (s *Server) DeleteEntries(ctx context.Context, entryIDs []string) error {
	if len(entryIDs) == 0 {
		return nil
	}
	data, err := json.Marshal(map[string][]string{"ids": entryIDs})
	if err != nil {
		return err
	}
	return s.batch(ctx, "delete", data, entryIDs)
}

// OwnedEntries are the server's entries whose ID starts with prefix.
func (s *Server) OwnedEntries(ctx context.Context, prefix string) ([]Entry, error) {
	all, err := s.Entries(ctx)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, e := range all {
		if strings.HasPrefix(e.ID, prefix) {
			out = append(out, e)
		}
	}
	return out, nil
}

func diffEntries(prefix string, have, want []Entry) (create, update []Entry, del []string) {
	byID := map[string]Entry{}
	for _, h := range have {
		if strings.HasPrefix(h.ID, prefix) {
			byID[h.ID] = h
		}
	}
	wanted := map[string]bool{}
	for _, w := range want {
		w.Selectors = sortedCopy(w.Selectors)
		wanted[w.ID] = true
		h, ok := byID[w.ID]
		switch {
		case !ok:
			create = append(create, w)
		case !h.equal(w):
			update = append(update, w)
		}
	}
	for _, h := range have {
		if strings.HasPrefix(h.ID, prefix) && !wanted[h.ID] {
			del = append(del, h.ID)
		}
	}
	sort.Strings(del)
	return create, update, del
}

func sortedCopy(ss []string) []string {
	out := append([]string(nil), ss...)
	sort.Strings(out)
	return out
}

func ids(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// EvictAgent removes an attested agent, so it must attest again to get any SVID. An
// agent that is not (or no longer) known is fine.
func (s *Server) EvictAgent(ctx context.Context, agentID string) error {
	_, err := s.cli(ctx, nil, "agent", "evict", "-spiffeID", agentID)
	if err != nil && strings.Contains(strings.ToLower(err.Error()), "not found") {
		return nil
	}
	return err
}

// Agents lists the SPIFFE IDs of the attested agents.
func (s *Server) Agents(ctx context.Context) ([]string, error) {
	out, err := s.cli(ctx, nil, "agent", "list", "-output", "json")
	if err != nil {
		return nil, err
	}
	var resp struct {
		Agents []struct {
			ID jsonID `json:"id"`
		} `json:"agents"`
	}
	if len(bytes.TrimSpace(out)) > 0 {
		if err := json.Unmarshal(out, &resp); err != nil {
			return nil, fmt.Errorf("spire node %s: read `agent list -output json`: %w", s.Node, err)
		}
	}
	ids := make([]string, 0, len(resp.Agents))
	for _, a := range resp.Agents {
		ids = append(ids, idString(a.ID))
	}
	return ids, nil
}

// JoinToken makes a one-time join token valid for ttlSeconds. The token is returned to
// the caller's memory only: it was read from the CLI's stdout, never passed as an
// argument.
func (s *Server) JoinToken(ctx context.Context, ttlSeconds int) (string, error) {
	out, err := s.cli(ctx, nil, "token", "generate", "-ttl", fmt.Sprint(ttlSeconds), "-output", "json")
	if err != nil {
		return "", err
	}
	var tok struct {
		Value string `json:"value"`
	}
	if err := json.Unmarshal(out, &tok); err != nil || tok.Value == "" {
		return "", fmt.Errorf("spire node %s: `token generate` gave no token", s.Node)
	}
	return tok.Value, nil
}

// WriteFile writes content to path on the node through stdin (never argv), atomically
// (a temporary file, then rename), with mode, making the directory (0700) when missing.
func WriteFile(ctx context.Context, r Runner, node, path, mode string, content []byte) error {
	const script = `set -e; umask 077; mkdir -p "$(dirname "$1")"; cat >"$1.tmp"; chmod "$2" "$1.tmp"; mv -f "$1.tmp" "$1"`
	res, err := r.Run(ctx, []string{"sh", "-c", script, "sh", path, mode}, deploybody.RunOptions{Stdin: content})
	if err != nil {
		return fmt.Errorf("node %s: write %s: %w", node, path, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("node %s: write %s: exit %d: %s", node, path, res.ExitCode, firstLines(string(res.Stderr), 3))
	}
	return nil
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}
