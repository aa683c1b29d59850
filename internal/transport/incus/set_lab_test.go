package incus

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// On the real incusd: a set holds the root disk and the attached custom volume, under a
// freeze that is over when TakeSet returns; rotation deletes whole sets (the instance
// snapshot, the volume's snapshot of the same name and the manifest), never one member,
// and never the bricked state kept aside.
func TestLabSetRotationDeletesWholeSets(t *testing.T) {
	labtest.Require(t)
	node, vol := labtest.NewInstanceWithDataVolume(t, "incus-sets")
	tr := labTransport(t, node)
	ctx := labCtx(t)

	bricked := BrickedSnapshotName(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if kept, err := tr.KeepAside(ctx, bricked, bricked); err != nil || len(kept) != 1 || kept[0].Volume != vol {
		t.Fatalf("KeepAside = %v, %v; want the volume %s kept aside too", kept, err, vol)
	}
	for gen := 1; gen <= 4; gen++ {
		set, err := tr.TakeSet(ctx, GenerationSnapshotName(gen), gen, "/nix/store/x-system", 2)
		if err != nil {
			t.Fatalf("set %d: %v", gen, err)
		}
		if len(set.Manifest.Volumes) != 1 || set.Manifest.FreezeWindow() <= 0 {
			t.Fatalf("set %d: manifest %+v, want the volume and a freeze window", gen, set.Manifest)
		}
		if st := strings.TrimSpace(labtest.Incus(t, "list", "^"+node.Instance+"$", "--format", "csv", "-c", "s")); st != "RUNNING" {
			t.Fatalf("after set %d the instance is %s, want it thawed (RUNNING)", gen, st)
		}
	}
	want := []string{bricked, GenerationSnapshotName(3), GenerationSnapshotName(4)}
	inst := strings.Fields(labtest.Incus(t, "snapshot", "list", node.Instance, "--format", "csv", "-c", "n"))
	vols := strings.Fields(labtest.Incus(t, "storage", "volume", "snapshot", "list", "lab", vol, "--format", "csv", "-c", "n"))
	slices.Sort(inst)
	slices.Sort(vols)
	slices.Sort(want)
	if !slices.Equal(inst, want) || !slices.Equal(vols, want) {
		t.Errorf("after 4 sets with keep 2: instance snapshots %v, volume snapshots %v; want both %v", inst, vols, want)
	}
	cfg := labtest.Incus(t, "config", "show", node.Instance)
	for gen, wantKey := range map[int]bool{1: false, 2: false, 3: true, 4: true} {
		key := ManifestPrefix + GenerationSnapshotName(gen) + ":"
		if strings.Contains(cfg, key) != wantKey {
			t.Errorf("manifest of set %d present = %v, want %v:\n%s", gen, !wantKey, wantKey, cfg)
		}
	}
}
