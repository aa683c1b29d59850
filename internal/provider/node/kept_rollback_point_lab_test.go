package node_test

// Lab acceptance test of the rollback point a deploy keeps, through the real binary;
// cmd/fediversity/kept_rollback_point_lab_test.go shows the same warning through the
// command: both front ends run the node through one engine (internal/noderun).

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// A node that runs a system its boot entry does not point at (here: deployed with a
// rollback point, then its system profile set back to the generation the rollback
// point was taken of) is not in a known good state. The next deploy keeps the rollback
// point of that generation instead of snapshotting the node over it, and the apply
// says so: "kept its earlier rollback point", naming the snapshot.
func TestAccNodeSwitchIncusKeepsEarlierRollbackPoint(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	node := labtest.NewInstance(t, "cli-keep")
	gen := profileGeneration(t, node)
	snap := "snapshot {\n    keep = 3\n  }"
	c := acctest.NewCLIDir(t)
	c.Write(buildConfig(node, incusBlock(node), `{}`, `{ seed = "cli-keep-a" }`, snap))
	c.MustApply("deploying a")
	point := fmt.Sprintf("fediversity-gen-%d", gen)
	before := ourSnapshots(t, node)
	if !slices.Contains(before, point) {
		t.Fatalf("the first deploy took %v: want %s, the rollback point of generation %d", before, point, gen)
	}
	nodeExec(t, node, fmt.Sprintf("nix-env --profile /nix/var/nix/profiles/system --switch-generation %d", gen))

	c.Write(buildConfig(node, incusBlock(node), `{}`, `{ seed = "cli-keep-b" }`, snap))
	out := strings.Join(strings.Fields(c.MustApply("deploying b over the node that does not run its boot entry")), " ")
	if !strings.Contains(out, "Deploy of "+node.Name+": kept its earlier rollback point") || !strings.Contains(out, "snapshot "+point+", taken before that deploy, was kept") {
		t.Fatalf("the apply does not warn that it kept the rollback point %s:\n%s", point, out)
	}
	if after := ourSnapshots(t, node); !slices.Equal(after, before) {
		t.Fatalf("snapshots before the deploy %v, after %v: want the rollback point kept, none taken", before, after)
	}
}

// profileGeneration is the generation the node's system profile points at.
func profileGeneration(t *testing.T, n labtest.Node) int {
	t.Helper()
	link := strings.TrimSpace(nodeExec(t, n, "readlink /nix/var/nix/profiles/system"))
	var gen int
	if _, err := fmt.Sscanf(link, "system-%d-link", &gen); err != nil {
		t.Fatalf("system profile of %s points at %q: %v", n.Name, link, err)
	}
	return gen
}
