package node_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// Incus: a node bricked by its switch whose storage pool has no room for a copy of the
// rollback point is not restored: the restore is refused before anything changes, and
// the error gives the figures (pool, node, free, needed). The pool is a real btrfs pool
// on a small loop file, made for this test; the node's root disk has a size, so the
// pool counts each volume's and snapshot's usage. A 1.6 GiB ballast file is written
// before the bricking deploy and removed by its switch: its blocks then belong to the
// rollback point's snapshot alone, which the driver reports as the snapshot's size,
// while the pool has about 1 GiB free.
func TestAccNodeSwitchIncusRestoreRefusedWithoutSpace(t *testing.T) {
	acctest.Lab(t)
	pool := labtest.Prefix() + "-t-small"
	_, _ = labtest.IncusErr("storage", "delete", pool)
	labtest.Incus(t, "storage", "create", pool, "btrfs", "size=3GiB")
	t.Cleanup(func() { _, _ = labtest.IncusErr("storage", "delete", pool) })
	node := labtest.NewInstanceOn(t, "acc-incus-space", pool, "3GiB")
	const ballast = "/var/fedi-acc-ballast"
	snap := "snapshot {\n    keep = 3\n  }"
	var before []string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: buildConfig(node, incusBlock(node), `{}`, `{ seed = "acc-space" }`, snap)},
			{
				PreConfig: func() {
					nodeExec(t, node, "fallocate -l 1600M "+ballast+" && sync")
					before = ourSnapshots(t, node)
				},
				Config: buildConfig(node, incusBlock(node), `{}`, `{ seed = "acc-space", brick = "1", drop = "`+ballast+`" }`, snap),
				ExpectError: regexp.MustCompile(`(?s)no space to restore snapshot fediversity-gen-\d+.*storage\s+pool\s+` + regexp.QuoteMeta(pool) +
					`\s+on\s+the\s+Incus\s+server\s+has\s+\S+\s+\S+\s+\(\d+\s+bytes\)\s+free,\s+and\s+a\s+copy\s+of\s+the\s+root\s+disk\s+needs\s+\S+\s+\S+\s+\(\d+\s+bytes\).*before\s+anything\s+changed`),
			},
		},
	})
	// Nothing changed: the instance is still as the bricking switch left it (stopped,
	// the ballast gone: a restore would have brought it back and started the node), and
	// its snapshots are the rollback points the deploys took, with no bricked state kept
	// aside (that is the restore's first change).
	if st := instanceStatus(t, node.Instance); st != "Stopped" {
		t.Errorf("after the refused restore the instance is %q, want Stopped (as the bricking switch left it)", st)
	}
	var entries []string
	if err := json.Unmarshal([]byte(labtest.Incus(t, "query", "/1.0/instances/"+node.Instance+"/files?path=/var")), &entries); err != nil {
		t.Fatalf("list /var of the stopped instance: %v", err)
	}
	for _, e := range entries {
		if e == strings.TrimPrefix(ballast, "/var/") {
			t.Errorf("the ballast removed by the bricking switch is back: the root disk was restored")
		}
	}
	after := ourSnapshots(t, node)
	if len(after) > 0 {
		t.Logf("rollback point %s: %s; pool %s: %s", after[len(after)-1],
			strings.Join(strings.Fields(labtest.Incus(t, "query", "/1.0/instances/"+node.Instance+"/snapshots/"+after[len(after)-1])), " "),
			pool, strings.Join(strings.Fields(labtest.Incus(t, "query", "/1.0/storage-pools/"+pool+"/resources")), " "))
	}
	for _, s := range after {
		if strings.HasPrefix(s, "fediversity-bricked-") {
			t.Errorf("the refused restore kept a bricked state aside (%s): it changed something", s)
		}
	}
	if len(after) != len(before)+1 {
		t.Errorf("snapshots before the bricking deploy %v, after %v: want exactly the one rollback point it took added", before, after)
	}
}

// instanceStatus is what Incus says of the instance (Running, Stopped, ...), read for up
// to 30 s while it is still changing state (the bricked node powers off).
func instanceStatus(t *testing.T, inst string) string {
	t.Helper()
	var st string
	for i := 0; i < 30; i++ {
		st = strings.TrimSpace(labtest.Incus(t, "list", "^"+inst+"$", "--format", "csv", "-c", "s"))
		if st == "STOPPED" || st == "RUNNING" {
			break
		}
		time.Sleep(time.Second)
	}
	switch st {
	case "STOPPED":
		return "Stopped"
	case "RUNNING":
		return "Running"
	}
	return st
}
