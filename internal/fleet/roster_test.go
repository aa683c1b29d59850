package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad rosters are refused before anything runs, each problem naming the node and the
// field, so the operator knows what to fix.
func TestLoadRosterRefusesBadInput(t *testing.T) {
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKjvd1dvyJWrxXs0L6S3w1NpJdEekAq4v0Tj9O2MRbzA"
	cases := []struct {
		name, roster string
		want         []string
	}{
		{"truncated", `{"nodes": {"a": {"host": "h"`, []string{"not valid JSON", "offset"}},
		{"empty", ``, []string{"empty file"}},
		{"unknown field", `{"nodes": {"a": {"host": "h", "host_key": "` + key + `", "pasword": "x"}}}`, []string{`unknown field "pasword"`}},
		{"no nodes", `{"nodes": {}}`, []string{"nodes: no nodes"}},
		{"missing host", `{"nodes": {"a": {"host_key": "` + key + `"}}}`, []string{`node "a": host: missing`}},
		{"unpinned", `{"nodes": {"a": {"host": "h"}}}`, []string{`node "a": host_key: missing`}},
		{"bad key", `{"nodes": {"a": {"host": "h", "host_key": "AAAA"}}}`, []string{`node "a": host_key: "AAAA" is not in authorized_keys format`}},
		{"bad port", `{"nodes": {"a": {"host": "h", "port": 70000, "host_key": "` + key + `"}}}`, []string{`node "a": port: 70000`}},
		{"jump unpinned", `{"nodes": {"a": {"host": "h", "host_key": "` + key + `", "jump": {"host": "j"}}}}`, []string{`node "a": jump.host_key: missing`}},
		{"bad toplevel", `{"nodes": {"a": {"host": "h", "host_key": "` + key + `", "toplevel": "/tmp/x"}}}`, []string{`node "a": toplevel: "/tmp/x" is not a Nix store path`}},
		{"bad build", `{"build": {"attribute": "x"}, "nodes": {"a": {"host": "h", "host_key": "` + key + `"}}}`, []string{"build: give exactly one of file and expression"}},
		{"bad timing", `{"timings": {"watch": "0s", "wait": "1s"}, "nodes": {"a": {"host": "h", "host_key": "` + key + `"}}}`, []string{`timings.watch: "0s" is not a positive duration`, "timings.wait: unknown timing"}},
		{"check without argv", `{"checks": [{"name": "web"}], "nodes": {"a": {"host": "h", "host_key": "` + key + `"}}}`, []string{`node "a": checks:`}},
		{"probe bad pattern", `{"nodes": {"a": {"host": "h", "host_key": "` + key + `", "probes": [{"name": "p", "url": "http://127.0.0.1:1/", "body_pattern": "("}]}}}`, []string{`node "a": checks: probe "p": body_pattern`}},
		{"bad activation", `{"nodes": {"a": {"host": "h", "host_key": "` + key + `", "activation": "restart"}}}`, []string{`node "a": activation: "restart" is not an activation`}},
		{"wrong type", `{"nodes": {"a": {"host": "h", "port": "22"}}}`, []string{`node "a": field "port": want int`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "roster.json")
			if err := os.WriteFile(file, []byte(c.roster), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadRoster(file)
			if err == nil || !IsInputError(err) {
				t.Fatalf("LoadRoster = %v, want an input error", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if !strings.Contains(err.Error(), file) {
				t.Errorf("error does not name the roster file %s:\n%v", file, err)
			}
		})
	}
}

// A group whose submission enables a node the roster lacks, or that has nothing to
// build, or no credentials, is refused as a whole before any node is touched.
func TestGroupPlanRefusesBeforeRunning(t *testing.T) {
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKjvd1dvyJWrxXs0L6S3w1NpJdEekAq4v0Tj9O2MRbzA"
	file := filepath.Join(t.TempDir(), "roster.json")
	if err := os.WriteFile(file, []byte(`{"nodes": {"a": {"host": "h", "host_key": "`+key+`"}, "b": {"host": "h", "host_key": "`+key+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := LoadRoster(file)
	if err != nil {
		t.Fatal(err)
	}
	g := &Group{Roster: r, NodePlans: map[string]string{"a": "{}", "ghost": "{}"}}
	_, _, err = g.Plan()
	for _, w := range []string{`node "ghost": the submission enables it, but the roster has no entry`, `node "a": build: nothing to deploy`, "credentials: neither SSH_PRIVATE_KEY_FILE nor SSH_AUTH_SOCK"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Plan error lacks %q: %v", w, err)
		}
	}
	g = &Group{Roster: r, NodePlans: map[string]string{"a": "{}"}, VerdictOnly: true, Credentials: Credentials{AgentSocket: "/run/agent"}}
	run, disabled, err := g.Plan()
	if err != nil || strings.Join(run, ",") != "a" || strings.Join(disabled, ",") != "b" {
		t.Fatalf("Plan = %v %v %v, want run [a], disabled [b]", run, disabled, err)
	}
}

// A field of the wrong type is named as the roster spells it, whether it is one of the
// SSH settings or of the rest of the node's spec.
func TestRosterTypeErrorsNameTheKey(t *testing.T) {
	for key, value := range map[string]string{"port": `"22"`, "strict": `"yes"`, "snapshot": `{"keep": "2"}`} {
		file := filepath.Join(t.TempDir(), "roster.json")
		if err := os.WriteFile(file, []byte(`{"nodes": {"a": {"host": "h", "`+key+`": `+value+`}}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadRoster(file)
		want := `node "a": field "` + key
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error lacks %q: %v", key, want, err)
		}
	}
}
