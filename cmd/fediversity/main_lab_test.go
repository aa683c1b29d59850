package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// The `ssh` method end to end: the real binary deploys three real lab nodes (sshd,
// systemd, nix) in parallel from a submission, with a strict failed unit on one.
func TestLabCLIDeployGroup(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	// The command's own evaluation cache, and its nix-instantiate runs counted.
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	evaluations := labtest.CountNixInstantiate(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	labtest.BuildClosure(t, labtest.ClosureFailedUnit)
	nodes := []labtest.Node{
		labtest.NewInstance(t, "cli-a"), labtest.NewInstance(t, "cli-b"), labtest.NewInstance(t, "cli-c"),
	}
	dir := t.TempDir()
	closures := filepath.Join(labtest.RepoRoot(t), "lab", "closures", "default.nix")
	roster := map[string]any{
		"build":   map[string]any{"file": closures, "attribute": labtest.ClosureGood},
		"timings": map[string]string{"settle": "1s", "watch": "3s", "sample_interval": "1s"},
		"checks":  []map[string]any{{"name": "web-active", "argv": []string{"systemctl", "is-active", "fedi-web.service"}, "timeout": "10s"}},
		"nodes":   map[string]any{},
	}
	rn := roster["nodes"].(map[string]any)
	for _, n := range nodes {
		rn[n.Name] = map[string]any{"host": n.SSHHost, "port": n.SSHPort, "host_key": n.HostKey}
	}
	broken := nodes[2].Name
	rn[broken].(map[string]any)["build"] = map[string]any{"file": closures, "attribute": labtest.ClosureFailedUnit}
	// A node the submission leaves without an application: it must not be touched
	// (its address answers nothing, so any attempt would fail the run).
	rn["idle"] = map[string]any{"host": "127.0.0.1", "port": 9, "host_key": nodes[0].HostKey}
	rosterFile := writeFileJSON(t, dir, "roster.json", roster)

	baked := map[string]any{
		"nodes": map[string]any{
			nodes[0].Name: map[string]any{"applications": []string{"mastodon"}},
			nodes[1].Name: map[string]any{"applications": []string{"pixelfed"}},
			nodes[2].Name: map[string]any{"applications": []string{"peertube"}},
			"idle":        map[string]any{"applications": []string{"lemmy"}},
		},
		"applications": map[string]any{
			"mastodon": map[string]any{"enable": false}, "pixelfed": map[string]any{"enable": false},
			"peertube": map[string]any{"enable": false}, "lemmy": map[string]any{"enable": false},
		},
	}
	sub := map[string]any{"ssh": map[string]any{"applications": map[string]any{
		"mastodon": map[string]any{"enable": true}, "pixelfed": map[string]any{"enable": true},
		"peertube": map[string]any{"enable": true},
	}}}
	bakedFile := writeFileJSON(t, dir, "baked.json", baked)
	subFile := writeFileJSON(t, dir, "submission.json", sub)
	args := []string{"--roster", rosterFile, "--submission", subFile, "--baked", bakedFile, "--parallel", "3"}

	t.Run("strict failed unit on one node: exit 1, the others deployed", func(t *testing.T) {
		stdout, stderr, code := runCLI(t, bin, append([]string{"deploy", "--json"}, args...)...)
		if code != exitFailed {
			t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitFailed, stdout, stderr)
		}
		for _, key := range []string{`"failed_units"`, `"system_state"`, `"paths_copied"`, `"phases"`} {
			if !strings.Contains(stdout, key) {
				t.Errorf("--json output lacks %s", key)
			}
		}
		var out jsonSummary
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatalf("--json output is not JSON: %v\n%s", err, stdout)
		}
		if strings.Join(out.OK, ",") != nodes[0].Name+","+nodes[1].Name || strings.Join(out.Failed, ",") != broken ||
			strings.Join(out.Disabled, ",") != "idle" {
			t.Fatalf("ok=%v failed=%v disabled=%v", out.OK, out.Failed, out.Disabled)
		}
		for _, n := range out.Nodes {
			switch n.Node {
			case nodes[0].Name, nodes[1].Name:
				if n.Toplevel != good || n.Generation < 1 {
					t.Errorf("%s: toplevel %q generation %d, want %s", n.Node, n.Toplevel, n.Generation, good)
				}
				if running := readlink(t, n.Node, "/run/current-system"); running != good {
					t.Errorf("%s runs %s, want %s", n.Node, running, good)
				}
				if len(n.Checks) != 1 || n.Checks[0].Name != "web-active" || !n.Checks[0].OK {
					t.Errorf("%s: checks %+v, want web-active passed", n.Node, n.Checks)
				}
				if n.Changes == nil || n.Changes.PathsCopied == 0 {
					t.Errorf("%s: changes %+v, want the paths a first deploy copies", n.Node, n.Changes)
				}
			case broken:
				if n.Verdict == nil || !strings.Contains(strings.Join(n.Verdict.Reasons, " "), "fedi-broken.service") {
					t.Errorf("%s: verdict reasons do not name fedi-broken.service: %+v", n.Node, n.Verdict)
				}
			}
		}
		for _, want := range []string{nodes[0].Name + ": ", "switch", "done: ok", broken + ": ", "done: FAILED"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("progress on a pipe lacks %q:\n%s", want, stderr)
			}
		}
		if key := labtest.KeyFile(); strings.Contains(stdout+stderr, key) {
			t.Errorf("the output names the key file %s", key)
		}
		if n := evaluations(); n != 3 {
			t.Errorf("a cold cache ran nix-instantiate %d times for 3 nodes, want 3", n)
		}
	})

	t.Run("table, lenient: exit 0", func(t *testing.T) {
		before := evaluations()
		stdout, stderr, code := runCLI(t, bin, append([]string{"deploy", "--lenient"}, args...)...)
		if code != exitOK {
			t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if n := evaluations() - before; n != 0 {
			t.Errorf("a second run with nothing changed ran nix-instantiate %d times, want 0 (the evaluation cache)", n)
		}
		for _, want := range []string{"NODE", "RESULT", nodes[0].Name + ": 0 paths copied", "ok (warnings)", "fedi-broken.service", "idle", "disabled", "3 ok, 0 failed, 1 disabled"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("table lacks %q:\n%s", want, stdout)
			}
		}
	})

	t.Run("verdict pass", func(t *testing.T) {
		stdout, stderr, code := runCLI(t, bin, "verdict", "--roster", rosterFile, "--submission", subFile, "--baked", bakedFile, "--lenient")
		if code != exitOK || !strings.Contains(stdout, nodes[0].Name) {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	})

	t.Run("bad roster: exit 2 naming the node and field, nothing done", func(t *testing.T) {
		bad := map[string]any{"nodes": map[string]any{nodes[0].Name: map[string]any{"host": nodes[0].SSHHost, "port": nodes[0].SSHPort}}}
		badFile := writeFileJSON(t, dir, "bad-roster.json", bad)
		before := readlink(t, nodes[0].Name, "/nix/var/nix/profiles/system")
		_, stderr, code := runCLI(t, bin, "deploy", "--roster", badFile)
		if code != exitBadInput || !strings.Contains(stderr, `node "`+nodes[0].Name+`": host_key`) {
			t.Fatalf("exit %d, want 2 naming host_key of %s:\n%s", code, nodes[0].Name, stderr)
		}
		if after := readlink(t, nodes[0].Name, "/nix/var/nix/profiles/system"); after != before {
			t.Errorf("profile changed %s -> %s on bad input", before, after)
		}
	})
}

func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fediversity")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func runCLI(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SSH_PRIVATE_KEY_FILE="+labtest.KeyFile(), "SSH_AUTH_SOCK=")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s: %v", bin, err)
	}
	return o.String(), e.String(), 0
}

func writeFileJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func readlink(t *testing.T, instance, p string) string {
	t.Helper()
	return strings.TrimSpace(labtest.Incus(t, "exec", instance, "--", "readlink", "-f", p))
}
