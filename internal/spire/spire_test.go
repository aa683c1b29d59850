package spire

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// localRunner runs argv on this machine with a real sh: the hand-off's scripts are
// tested as they run on a spire node, against a temporary state directory.
type localRunner struct {
	env   []string
	calls [][]string
	stdin [][]byte
}

func (l *localRunner) Run(ctx context.Context, argv []string, opts deploybody.RunOptions) (deploybody.RunResult, error) {
	l.calls = append(l.calls, argv)
	l.stdin = append(l.stdin, opts.Stdin)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), l.env...)
	cmd.Stdin = bytes.NewReader(opts.Stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code, err = ee.ExitCode(), nil
	}
	return deploybody.RunResult{ExitCode: code, Stdout: out.Bytes(), Stderr: errb.Bytes()}, err
}

// fakeCLI answers the spire-server CLI from memory. It stands in for the server in the
// engine's unit tests only (the lab tests use the real one): it checks that the engine
// speaks the CLI's JSON forms and lets a test count what a reconcile changed.
type fakeCLI struct {
	entries map[string]registrationEntry
	argv    [][]string
}

func (f *fakeCLI) Run(_ context.Context, argv []string, opts deploybody.RunOptions) (deploybody.RunResult, error) {
	f.argv = append(f.argv, argv)
	if argv[0] != "spire-server" || argv[1] != "entry" {
		return deploybody.RunResult{ExitCode: 1, Stderr: []byte("unexpected " + strings.Join(argv, " "))}, nil
	}
	ok := func(v any) (deploybody.RunResult, error) {
		b, _ := json.Marshal(v)
		return deploybody.RunResult{Stdout: b}, nil
	}
	type status struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	type result struct {
		Status status `json:"status"`
	}
	switch argv[2] {
	case "show":
		var shown []map[string]any
		for _, e := range f.entries {
			sels := []map[string]string{}
			for _, s := range e.Selectors {
				sels = append(sels, map[string]string{"type": s.Type, "value": s.Value})
			}
			shown = append(shown, map[string]any{"id": e.EntryID, "spiffe_id": splitID(e.SpiffeID), "parent_id": splitID(e.ParentID), "selectors": sels})
		}
		return ok(map[string]any{"entries": shown})
	case "create", "update":
		var in struct {
			Entries []registrationEntry `json:"entries"`
		}
		if err := json.Unmarshal(opts.Stdin, &in); err != nil {
			return deploybody.RunResult{ExitCode: 1, Stderr: []byte(err.Error())}, nil
		}
		var rs []result
		for _, e := range in.Entries {
			_, exists := f.entries[e.EntryID]
			if argv[2] == "create" && exists {
				rs = append(rs, result{status{6, "similar entry already exists"}})
				continue
			}
			f.entries[e.EntryID] = e
			rs = append(rs, result{status{0, "OK"}})
		}
		return ok(map[string]any{"results": rs})
	case "delete":
		var in struct {
			IDs []string `json:"ids"`
		}
		if err := json.Unmarshal(opts.Stdin, &in); err != nil {
			return deploybody.RunResult{ExitCode: 1, Stderr: []byte(err.Error())}, nil
		}
		var rs []result
		for _, id := range in.IDs {
			delete(f.entries, id)
			rs = append(rs, result{status{0, "OK"}})
		}
		return ok(map[string]any{"results": rs})
	}
	return deploybody.RunResult{ExitCode: 1}, nil
}

func splitID(id string) map[string]string {
	rest := strings.TrimPrefix(id, "spiffe://")
	td, p, _ := strings.Cut(rest, "/")
	return map[string]string{"trust_domain": td, "path": "/" + p}
}

func TestHandOffEntries(t *testing.T) {
	got := HandOff{Namespace: "ops", Nodes: []string{"web", "db"}}.Entries()
	want := []Entry{
		{ID: "fediversity.k8s.ops.db.alias", SpiffeID: "spiffe://fediversity/k8s/ops/ops/node-db", ParentID: "spiffe://fediversity/spire/server",
			Selectors: []string{"k8s_psat:agent_ns:ops", "k8s_psat:agent_sa:node-db", "k8s_psat:cluster:ops.db"}},
		{ID: "fediversity.k8s.ops.db.host", SpiffeID: "spiffe://fediversity/host/ops-db", ParentID: "spiffe://fediversity/k8s/ops/ops/node-db", Selectors: []string{"unix:uid:0"}},
		{ID: "fediversity.k8s.ops.web.alias", SpiffeID: "spiffe://fediversity/k8s/ops/ops/node-web", ParentID: "spiffe://fediversity/spire/server",
			Selectors: []string{"k8s_psat:agent_ns:ops", "k8s_psat:agent_sa:node-web", "k8s_psat:cluster:ops.web"}},
		{ID: "fediversity.k8s.ops.web.host", SpiffeID: "spiffe://fediversity/host/ops-web", ParentID: "spiffe://fediversity/k8s/ops/ops/node-web", Selectors: []string{"unix:uid:0"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("entries:\n got %+v\nwant %+v", got, want)
	}
}

func TestReconcileIsIdempotentAndDeletesOnlyItsOwn(t *testing.T) {
	f := &fakeCLI{entries: map[string]registrationEntry{
		// someone else's entry, with a SPIFFE ID that a prefix match would catch
		"other": {EntryID: "other", SpiffeID: "spiffe://fediversity/host/ops-x", ParentID: ServerID, Selectors: []jsonSelector{{"unix", "uid:0"}}},
	}}
	s := &Server{Runner: f, Node: "spire"}
	ctx := context.Background()
	ch, err := s.Reconcile(ctx, K8sEntryPrefix("ops"), HandOff{Namespace: "ops", Nodes: []string{"a", "b"}}.Entries())
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Created) != 4 || len(ch.Updated)+len(ch.Deleted) != 0 {
		t.Fatalf("first reconcile: %+v", ch)
	}
	ch, err = s.Reconcile(ctx, K8sEntryPrefix("ops"), HandOff{Namespace: "ops", Nodes: []string{"a", "b"}}.Entries())
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Created)+len(ch.Updated)+len(ch.Deleted) != 0 {
		t.Fatalf("second reconcile changed something: %+v", ch)
	}
	ch, err = s.Reconcile(ctx, K8sEntryPrefix("ops"), HandOff{Namespace: "ops", Nodes: []string{"b"}}.Entries())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ch.Deleted, []string{"fediversity.k8s.ops.a.alias", "fediversity.k8s.ops.a.host"}) || len(ch.Created) != 0 {
		t.Fatalf("removing node a: %+v", ch)
	}
	if _, ok := f.entries["other"]; !ok {
		t.Fatal("the entry of someone else was deleted")
	}
	// A changed entry is updated in place, not made twice.
	f.entries["fediversity.k8s.ops.b.host"] = registrationEntry{EntryID: "fediversity.k8s.ops.b.host", SpiffeID: HostID("ops", "b"), ParentID: ServerID,
		Selectors: []jsonSelector{{"unix", "uid:1000"}}}
	ch, err = s.Reconcile(ctx, K8sEntryPrefix("ops"), HandOff{Namespace: "ops", Nodes: []string{"b"}}.Entries())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ch.Updated, []string{"fediversity.k8s.ops.b.host"}) {
		t.Fatalf("changed host entry: %+v", ch)
	}
	if got := f.entries["fediversity.k8s.ops.b.host"]; got.ParentID != AliasID("ops", "b") || got.Selectors[0].Value != "uid:0" {
		t.Fatalf("host entry after update: %+v", got)
	}
}

func TestCreateRefusalNamesTheEntry(t *testing.T) {
	f := &fakeCLI{entries: map[string]registrationEntry{}}
	s := &Server{Runner: f, Node: "spire"}
	data, _ := toRegistration([]Entry{{ID: "x", SpiffeID: HostID("g", "n"), ParentID: ServerID, Selectors: []string{HostSelector}}})
	if err := s.batch(context.Background(), "create", data, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	err := s.batch(context.Background(), "create", data, []string{"x"})
	if err == nil || !strings.Contains(err.Error(), "x: similar entry already exists") {
		t.Fatalf("want the refused entry named, got %v", err)
	}
}

func TestWriteFileKeepsContentOutOfArgv(t *testing.T) {
	dir := t.TempDir()
	r := &localRunner{}
	secret := "eyJhbGciOi.secret-token"
	target := filepath.Join(dir, "k8s", "ops", "kubeconfig")
	if err := WriteFile(context.Background(), r, "local", target, "0600", []byte("token: "+secret+"\n")); err != nil {
		t.Fatal(err)
	}
	for _, argv := range r.calls {
		if strings.Contains(strings.Join(argv, " "), secret) {
			t.Fatalf("the secret reached argv: %q", argv)
		}
	}
	b, err := os.ReadFile(target)
	if err != nil || !strings.Contains(string(b), secret) {
		t.Fatalf("file: %q, %v", b, err)
	}
	st, _ := os.Stat(target)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
}

// TestDropFilesMakeTheClusters runs the hand-off's node-side scripts with a real sh. The
// systemctl on PATH is a stub that records its arguments: the reload is proven against
// the real spire-server in the lab tests.
func TestDropFilesMakeTheClusters(t *testing.T) {
	dir := t.TempDir()
	bin := t.TempDir()
	signals := filepath.Join(dir, "signals")
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte("#!/bin/sh\necho \"$*\" >>"+signals+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &localRunner{env: []string{"PATH=" + bin + ":" + os.Getenv("PATH")}}
	s := &Server{Runner: r, Node: "local", StateDir: dir}
	ctx := context.Background()
	signalled := func() int {
		b, _ := os.ReadFile(signals)
		return strings.Count(string(b), "--signal=SIGUSR1 --kill-whom=main spire-server.service")
	}
	apply := func(ns string, nodes ...string) {
		t.Helper()
		if err := WriteFile(ctx, r, "local", s.KubeConfigPath(ns), "0600", []byte("kubeconfig")); err != nil {
			t.Fatal(err)
		}
		if err := s.writeDropFiles(ctx, HandOff{Namespace: ns, Nodes: nodes}); err != nil {
			t.Fatal(err)
		}
		if err := s.syncClusters(ctx); err != nil {
			t.Fatal(err)
		}
	}
	apply("ops", "web", "db")
	apply("shop", "n1")
	hcl, _ := os.ReadFile(filepath.Join(dir, "k8s_psat.hcl"))
	want := `clusters = {
  "ops.db" = {
    service_account_allow_list = ["ops:node-db"]
    audience = ["spire-server"]
    kube_config_file = "` + dir + `/k8s/ops/kubeconfig"
  }
  "ops.web" = {
    service_account_allow_list = ["ops:node-web"]
    audience = ["spire-server"]
    kube_config_file = "` + dir + `/k8s/ops/kubeconfig"
  }
  "shop.n1" = {
    service_account_allow_list = ["shop:node-n1"]
    audience = ["spire-server"]
    kube_config_file = "` + dir + `/k8s/shop/kubeconfig"
  }
}
`
	if string(hcl) != want {
		t.Fatalf("k8s_psat.hcl:\n%s\nwant:\n%s", hcl, want)
	}
	if n := signalled(); n != 2 {
		t.Fatalf("server signalled %d times, want 2 (one per change)", n)
	}
	apply("shop", "n1") // unchanged: no reload
	if n := signalled(); n != 2 {
		t.Fatalf("an unchanged apply reloaded the server (%d signals)", n)
	}
	apply("ops", "web") // node db left the group
	if _, err := os.Stat(filepath.Join(dir, "k8s", "ops", "nodes", "db.json")); !os.IsNotExist(err) {
		t.Fatalf("the drop-file of a removed node stayed: %v", err)
	}
	// ReadHandOff reads the files first, then asks the CLI (absent here) for the entries.
	st, _ := s.ReadHandOff(ctx, "ops")
	if !st.KubeConfig || !reflect.DeepEqual(st.Nodes, []string{"web"}) {
		t.Fatalf("read hand-off: %+v", st)
	}
	var drop dropFile
	b, _ := os.ReadFile(filepath.Join(dir, "k8s", "ops", "nodes", "web.json"))
	if err := json.Unmarshal(b, &drop); err != nil || drop.Host != "spiffe://fediversity/host/ops-web" || drop.ServiceAccount != "ops:node-web" {
		t.Fatalf("drop-file: %s (%v)", b, err)
	}
	// Retiring removes the namespace's files and its cluster.
	if _, err := r.Run(ctx, []string{"rm", "-rf", filepath.Join(dir, "k8s", "ops")}, deploybody.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.syncClusters(ctx); err != nil {
		t.Fatal(err)
	}
	hcl, _ = os.ReadFile(filepath.Join(dir, "k8s_psat.hcl"))
	if strings.Contains(string(hcl), `"ops.`) || !strings.Contains(string(hcl), `"shop.n1"`) {
		t.Fatalf("after retiring ops:\n%s", hcl)
	}
}

func TestParseEntries(t *testing.T) {
	out := []byte(`{"entries":[{"id":"fediversity.k8s.ops.a.host","spiffe_id":{"trust_domain":"fediversity","path":"/host/ops-a"},
	  "parent_id":{"trust_domain":"fediversity","path":"/k8s/ops/ops/node-a"},"selectors":[{"type":"unix","value":"uid:0"}],"x509_svid_ttl":0}],"next_page_token":""}`)
	es, err := parseEntries(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{{ID: "fediversity.k8s.ops.a.host", SpiffeID: "spiffe://fediversity/host/ops-a", ParentID: "spiffe://fediversity/k8s/ops/ops/node-a", Selectors: []string{"unix:uid:0"}}}
	if !reflect.DeepEqual(es, want) {
		t.Fatalf("got %+v", es)
	}
	if _, err := parseEntries([]byte("Found 0 entries")); err == nil {
		t.Fatal("pretty output must not parse as entries")
	}
}

func TestIncusEntries(t *testing.T) {
	es := IncusEntries("g", "n1", "tok")
	if es[0].ParentID != "spiffe://fediversity/spire/agent/join_token/tok" || es[0].SpiffeID != "spiffe://fediversity/incus/g/node-n1" ||
		es[1].SpiffeID != "spiffe://fediversity/host/g-n1" || es[1].ParentID != es[0].SpiffeID {
		t.Fatalf("%+v", es)
	}
}

func TestK8sAgentOfNamespace(t *testing.T) {
	for agent, want := range map[string]bool{
		K8sAgentID("ops", "web", "uid-1"):                        true,
		"spiffe://fediversity/spire/agent/k8s_psat/ops/uid-1":    true, // a hand-off's agent before one cluster per node
		K8sAgentID("ops2", "web", "uid-1"):                       false,
		"spiffe://fediversity/spire/agent/join_token/ops.web":    false,
		"spiffe://fediversity/spire/agent/k8s_psat/opsweb/uid-1": false,
	} {
		if got := IsK8sAgentOf(agent, "ops"); got != want {
			t.Errorf("IsK8sAgentOf(%s, ops) = %v, want %v", agent, got, want)
		}
	}
	if got := K8sAgentID("ops", "web", "uid-1"); got != "spiffe://fediversity/spire/agent/k8s_psat/ops.web/uid-1" {
		t.Errorf("K8sAgentID = %s", got)
	}
}
