package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// cliFlake is a flake of two node systems, the lab's good closure
// (lab/closures, reached through the path: input lab, as it reads lab/nixos too) seeded with each node's plan, so
// each node gets a system of its own only when its plan reaches the flake.
const cliFlake = `{
  inputs.fediversity-node-plan = { url = "path:./no-node-plan"; flake = false; };
  inputs.lab = { url = "path:LAB"; flake = false; };
  outputs = { self, fediversity-node-plan, lab }:
    let
      plan = builtins.readFile "${fediversity-node-plan}/node-plan.json";
      node = { config.system.build.toplevel = (import "${lab}/closures" { system = "x86_64-linux"; seed = "SEED " + plan; }).good; };
    in { nixosConfigurations = { NODE_A = node; NODE_B = node; }; };
}
`

// The fediversity command deploys a roster whose build is a flake (a relative
// reference, taken from the roster's directory): each node runs the system the flake
// gives for its node plan, and a second run with nothing changed runs no nix eval.
func TestLabCLIDeployFlake(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	evals := labtest.CountNixEvals(t)
	nodes := []labtest.Node{labtest.NewInstance(t, "cli-flake-a"), labtest.NewInstance(t, "cli-flake-b")}

	dir := t.TempDir()
	flake := filepath.Join(dir, "fleet")
	src := strings.NewReplacer("LAB", filepath.Join(labtest.RepoRoot(t), "lab"),
		"SEED", fmt.Sprintf("cli-flake-%d", time.Now().UnixNano()), "NODE_A", nodes[0].Name, "NODE_B", nodes[1].Name).Replace(cliFlake)
	for file, content := range map[string]string{"flake.nix": src, "no-node-plan/node-plan.json": "null"} {
		p := filepath.Join(flake, file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rn := map[string]any{}
	for _, n := range nodes {
		rn[n.Name] = map[string]any{"host": n.SSHHost, "port": n.SSHPort, "host_key": n.HostKey,
			"build": map[string]any{"flake": "./fleet#nixosConfigurations." + n.Name + ".config.system.build.toplevel"}}
	}
	rosterFile := writeFileJSON(t, dir, "roster.json", map[string]any{
		"timings": map[string]string{"settle": "1s", "watch": "3s", "sample_interval": "1s"},
		"nodes":   rn,
	})
	bakedFile := writeFileJSON(t, dir, "baked.json", map[string]any{
		"nodes": map[string]any{
			nodes[0].Name: map[string]any{"applications": []string{"mastodon"}},
			nodes[1].Name: map[string]any{"applications": []string{"pixelfed"}},
		},
		"applications": map[string]any{"mastodon": map[string]any{"enable": false}, "pixelfed": map[string]any{"enable": false}},
	})
	subFile := writeFileJSON(t, dir, "submission.json", map[string]any{"ssh": map[string]any{"applications": map[string]any{
		"mastodon": map[string]any{"enable": true}, "pixelfed": map[string]any{"enable": true},
	}}})
	args := []string{"deploy", "--json", "--roster", rosterFile, "--submission", subFile, "--baked", bakedFile, "--parallel", "2"}

	stdout, stderr, code := runCLI(t, bin, args...)
	if code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var out jsonSummary
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, stdout)
	}
	tops := map[string]string{}
	for _, n := range out.Nodes {
		if running := readlink(t, n.Node, "/run/current-system"); n.Toplevel == "" || running != n.Toplevel {
			t.Errorf("%s runs %s, the run says %q", n.Node, running, n.Toplevel)
		}
		tops[n.Node] = n.Toplevel
	}
	if len(tops) != 2 || tops[nodes[0].Name] == tops[nodes[1].Name] {
		t.Fatalf("toplevels %v: want one per node, different (each built from its own node plan)", tops)
	}
	if n := evals(); n != 2 {
		t.Errorf("a cold cache ran nix eval %d times for 2 nodes, want 2", n)
	}

	before := evals()
	if stdout, stderr, code := runCLI(t, bin, args...); code != exitOK {
		t.Fatalf("second run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if n := evals() - before; n != 0 {
		t.Errorf("a second run with nothing changed ran nix eval %d times, want 0", n)
	}
}

// closuresCopy copies lab/closures out of the repository and returns its default.nix.
// A build of a file in the repository is keyed on the whole repository's tree, which
// CI's release check (dist/) writes beside the tests: a test that counts evaluations
// evaluates a copy no other process writes.
func closuresCopy(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	// lab/closures reads lab/nixos (../nixos/default-commands): both are copied, side by side.
	for _, dir := range []string{"nixos", "closures"} {
		copyFlatDir(t, filepath.Join(labtest.RepoRoot(t), "lab", dir), filepath.Join(root, dir))
	}
	return filepath.Join(root, "closures", "default.nix")
}

// copyFlatDir copies the files of src (no subdirectories) into dst, content and mode.
func copyFlatDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		// The same content and mode: the same store paths as the repository's closures.
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}
