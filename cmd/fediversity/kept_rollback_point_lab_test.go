package main

// The rollback point a deploy keeps, through the command's binary;
// internal/provider/node/kept_rollback_point_lab_test.go shows the same warning through
// the provider: both front ends run the node through one engine (internal/noderun).

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// A node that runs a system its boot entry does not point at (here: deployed with a
// rollback point, then its system profile set back to the generation the rollback
// point was taken of) is not in a known good state. The next deploy keeps the rollback
// point of that generation instead of snapshotting the node over it, and the command
// says so: "kept its earlier rollback point", naming the snapshot.
func TestLabCLIKeepsEarlierRollbackPoint(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	node := labtest.NewInstance(t, "cli-keep-cmd")
	dir := t.TempDir()
	exec := func(script string) string {
		return labtest.Incus(t, "exec", node.Instance, "--project", node.Project, "--", "sh", "-c", script)
	}
	link := strings.TrimSpace(exec("readlink /nix/var/nix/profiles/system"))
	var gen int
	if _, err := fmt.Sscanf(link, "system-%d-link", &gen); err != nil {
		t.Fatalf("system profile points at %q: %v", link, err)
	}
	snapshots := func() []string {
		var out []string
		for _, l := range strings.Split(labtest.Incus(t, "snapshot", "list", node.Instance, "--project", node.Project, "--format", "csv", "-c", "n"), "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "fediversity-") {
				out = append(out, l)
			}
		}
		return out
	}
	deploy := func(seed string) (stdout string) {
		t.Helper()
		roster := writeFileJSON(t, dir, seed+".json", map[string]any{
			"timings": map[string]string{"settle": "2s", "watch": "6s", "sample_interval": "1s"},
			"nodes": map[string]any{node.Name: map[string]any{
				"incus":    map[string]any{"instance": node.Instance, "project": node.Project},
				"snapshot": map[string]any{"keep": 3},
				"toplevel": labtest.BuildClosureSeed(t, "good", seed),
			}},
		})
		stdout, stderr, code := runCLI(t, bin, "deploy", "--roster", roster)
		if code != 0 {
			t.Fatalf("deploy %s exited %d:\n%s\nstderr:\n%s", seed, code, stdout, stderr)
		}
		return stdout
	}

	deploy("cli-keep-cmd-a")
	point := fmt.Sprintf("fediversity-gen-%d", gen)
	before := snapshots()
	if !slices.Contains(before, point) {
		t.Fatalf("the first deploy took %v: want %s, the rollback point of generation %d", before, point, gen)
	}
	exec(fmt.Sprintf("nix-env --profile /nix/var/nix/profiles/system --switch-generation %d", gen))

	out := strings.Join(strings.Fields(deploy("cli-keep-cmd-b")), " ")
	if !strings.Contains(out, node.Name+": warning: kept its earlier rollback point") || !strings.Contains(out, "snapshot "+point+", taken before that deploy, was kept") {
		t.Fatalf("the command does not warn that it kept the rollback point %s:\n%s", point, out)
	}
	if after := snapshots(); !slices.Equal(after, before) {
		t.Fatalf("snapshots before the deploy %v, after %v: want the rollback point kept, none taken", before, after)
	}
}
