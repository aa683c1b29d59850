package node_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// Incus: a rollback point is a set. The node keeps its data on a custom storage volume
// (at /var/lib/fediversity, as modules/tf-incus mounts it) holding a marker file. The
// set is the root disk and the volume, snapshotted under one freeze, with a manifest on
// the instance. A system that bricks the node and changes the marker is deployed: the
// restore puts back both the root disk and the volume (the old marker), and keeps the
// bricked volume aside as its own snapshot, holding the changed marker.
func TestAccNodeSwitchIncusRestoresDataVolume(t *testing.T) {
	acctest.Lab(t)
	node, vol := labtest.NewInstanceWithDataVolume(t, "acc-incus-set")
	nodeExec(t, node, "printf before > /var/lib/fediversity/marker && sync")
	snap := "snapshot {\n    keep = 3\n  }"
	var goodTop string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: buildConfig(node, incusBlock(node), `{}`, `{ seed = "acc-set" }`, snap),
				Check: func(s *terraform.State) error {
					goodTop = s.RootModule().Resources[addr].Primary.Attributes["toplevel"]
					return nil
				},
			},
			{
				Config: buildConfig(node, incusBlock(node), `{}`, `{ seed = "acc-set", brick = "1", marker = "after" }`, snap),
				// The restored system is judged on its own after the restore: the restored
				// root disk boots the previous system from the boot entry its `boot`
				// installed (the lab's stand-in firmware, as a NixOS node's boot loader).
				ExpectError: regexp.MustCompile(`(?s)unreachable\s+after\s+the\s+switch:\s+snapshot\s+fediversity-gen-\d+\s+restored.*restored\s+system\s+\(/nix/store/\S+-nixos-system-fedi-acc\)\s+was\s+judged\s+after\s+the\s+restore:\s+ok.*custom\s+volumes\s+\(` + regexp.QuoteMeta(vol) + `\)\s+were\s+restored`),
			},
		},
	})
	// The node runs again, on its previous system, with the volume as it was (the
	// restore returns once the node answers; its boot may still be finishing).
	if got := strings.TrimSpace(nodeExec(t, node, "timeout 60 systemctl is-system-running --wait; readlink -f /nix/var/nix/profiles/system; cat /var/lib/fediversity/marker")); got != "running\n"+goodTop+"\nbefore" {
		t.Errorf("after the restore the node says %q, want it running %s with the marker \"before\"", got, goodTop)
	}
	// The manifest of the set names its members, generation, toplevel and freeze window.
	var config map[string]string
	if err := json.Unmarshal([]byte(labtest.Incus(t, "query", "/1.0/instances/"+node.Instance)), &struct {
		Config *map[string]string `json:"config"`
	}{&config}); err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Name       string `json:"name"`
		Generation int    `json:"generation"`
		Toplevel   string `json:"toplevel"`
		Volumes    []struct {
			Volume string `json:"volume"`
		} `json:"volumes"`
		FrozeAt  string `json:"froze_at"`
		ThawedAt string `json:"thawed_at"`
		TookMS   int64  `json:"took_ms"`
	}
	var found bool
	for k, v := range config {
		if !strings.HasPrefix(k, "user.fediversity.set.") {
			continue
		}
		if err := json.Unmarshal([]byte(v), &manifest); err != nil {
			t.Fatalf("manifest %s: %v: %s", k, err, v)
		}
		if manifest.Toplevel == goodTop {
			found = true
			break
		}
	}
	if !found {
		t.Fatalf("no set manifest names the good system %s; config: %v", goodTop, config)
	}
	if len(manifest.Volumes) != 1 || manifest.Volumes[0].Volume != vol || manifest.FrozeAt == "" || manifest.ThawedAt == "" {
		t.Errorf("manifest %+v: want the volume %s and a freeze window", manifest, vol)
	}
	t.Logf("set %s (generation %d): frozen %s .. %s, taken in %d ms", manifest.Name, manifest.Generation, manifest.FrozeAt, manifest.ThawedAt, manifest.TookMS)
	// The bricked volume is kept aside as its own snapshot, with the changed marker.
	var bricked string
	for _, s := range strings.Fields(labtest.Incus(t, "storage", "volume", "snapshot", "list", "lab", vol, "--format", "csv", "-c", "n")) {
		if strings.HasPrefix(s, "fediversity-bricked-") {
			bricked = s
		}
	}
	if bricked == "" {
		t.Fatalf("the bricked state of volume %s was not kept aside", vol)
	}
	// The restore's time, as Incus recorded it: from the bricked state kept aside (its
	// first change, right after the space check) to the instance's start.
	var brickedAt, startedAt struct {
		CreatedAt  time.Time `json:"created_at"`
		LastUsedAt time.Time `json:"last_used_at"`
	}
	if json.Unmarshal([]byte(labtest.Incus(t, "query", "/1.0/instances/"+node.Instance+"/snapshots/"+bricked)), &brickedAt) == nil &&
		json.Unmarshal([]byte(labtest.Incus(t, "query", "/1.0/instances/"+node.Instance)), &startedAt) == nil {
		t.Logf("bricked state kept aside at %s, instance started at %s: %s from the first change to the start",
			brickedAt.CreatedAt.Format(time.RFC3339Nano), startedAt.LastUsedAt.Format(time.RFC3339Nano), startedAt.LastUsedAt.Sub(brickedAt.CreatedAt))
	}
	checkAsideMarker(t, node, vol, bricked, "after")
}

// checkAsideMarker copies the snapshot bricked of data volume vol out, as the restore's
// error tells the operator to, mounts the copy on the node and checks its marker file.
func checkAsideMarker(t *testing.T, node labtest.Node, vol, bricked, want string) {
	t.Helper()
	aside := vol + "-aside"
	_, _ = labtest.IncusErr("storage", "volume", "delete", "lab", aside)
	labtest.Incus(t, "storage", "volume", "copy", "lab/"+vol+"/"+bricked, "lab/"+aside)
	t.Cleanup(func() { _, _ = labtest.IncusErr("storage", "volume", "delete", "lab", aside) })
	labtest.Incus(t, "config", "device", "add", node.Instance, "aside", "disk", "pool=lab", "source="+aside, "path=/mnt/aside")
	if got := strings.TrimSpace(nodeExec(t, node, "cat /mnt/aside/marker")); got != want {
		t.Errorf("the bricked volume kept aside holds marker %q, want %q", got, want)
	}
	labtest.Incus(t, "config", "device", "remove", node.Instance, "aside")
}
