package incus

import (
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
)

// A pool without room for the copies of its members refuses the restore, with the
// figures; a pool with room does not; a member of unknown size is named and counts 0.
func TestCheckSpacePools(t *testing.T) {
	members := []setMember{
		{Device: "root", Pool: "fast", Size: 800, Quota: -1},
		{Device: "data", Pool: "fast", Volume: "web01-data", Size: 300, Quota: -1},
		{Device: "media", Pool: "big", Volume: "web01-media", Size: -1, Quota: -1},
	}
	noQuota := incusapi.DiskQuota{Limit: -1}
	pools, q, unknown := checkSpace(members, map[string]int64{"fast": 1000, "big": 0}, noQuota, "")
	if q != nil {
		t.Errorf("no limits.disk set, yet the quota refused: %+v", q)
	}
	if len(pools) != 1 || pools[0].Pool != "fast" || pools[0].Needed != 1100 || pools[0].Free != 1000 || len(pools[0].Members) != 2 {
		t.Fatalf("pools = %+v, want fast short: needed 1100, free 1000, two members", pools)
	}
	if len(unknown) != 1 || !strings.Contains(unknown[0], "web01-media") {
		t.Errorf("unknown = %v, want the media volume", unknown)
	}
	if pools, _, _ := checkSpace(members, map[string]int64{"fast": 1100}, noQuota, ""); pools != nil {
		t.Errorf("a pool with exactly the room needed refused: %+v", pools)
	}
}

// limits.disk counts the configured size of a copy, else its measured size.
func TestCheckSpaceQuota(t *testing.T) {
	members := []setMember{
		{Device: "root", Pool: "p", Size: 100, Quota: 1000},
		{Device: "data", Pool: "p", Volume: "v", Size: 50, Quota: -1},
	}
	free := map[string]int64{"p": 1 << 30}
	if _, q, _ := checkSpace(members, free, incusapi.DiskQuota{Limit: 2000, Usage: 951}, "tenant"); q == nil ||
		q.Needed != 1050 || q.Usage != 951 || q.Limit != 2000 || q.Project != "tenant" {
		t.Fatalf("quota = %+v, want tenant short: needed 1050, used 951, limit 2000", q)
	}
	if _, q, _ := checkSpace(members, free, incusapi.DiskQuota{Limit: 2000, Usage: 950}, "tenant"); q != nil {
		t.Errorf("a quota with exactly the room needed refused: %+v", q)
	}
}

// The refusal names the instance, the snapshot, the pool, the node, both figures, and
// says that nothing changed and what to do.
func TestSpaceErrorText(t *testing.T) {
	e := &SpaceError{Instance: "web01", Location: "host2", Snapshot: "fediversity-gen-4",
		Pools: []PoolShortfall{{Pool: "small", Needed: 3 << 30, Free: 1 << 30, Members: []string{"the root disk"}}},
		Quota: &QuotaShortfall{Project: "tenant", Needed: 3 << 30, Usage: 9 << 30, Limit: 10 << 30}}
	msg := e.Error()
	for _, want := range []string{"web01", "fediversity-gen-4", "storage pool small on cluster member host2", "1.0 GiB (1073741824 bytes) free",
		"needs 3.0 GiB (3221225472 bytes)", "project tenant's limits.disk is 10.0 GiB", "before anything changed", "incus snapshot restore web01 fediversity-gen-4"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if !strings.Contains((&SpaceError{Instance: "a", Location: "none", Pools: e.Pools}).Error(), "on the Incus server") {
		t.Error("a server outside a cluster is not named as the Incus server")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"": -1, "10GiB": 10 << 30, "500MB": 500e6, "1073741824": 1 << 30, "1.5KiB": 1536, "x": -1, "20 GiB": 20 << 30} {
		if got := parseSize(in); got != want {
			t.Errorf("parseSize(%q) = %d, want %d", in, got, want)
		}
	}
}

// A set holds the custom volumes attached to the instance; host paths cannot be
// snapshotted and are named; the root disk and other devices are neither.
func TestDataDisks(t *testing.T) {
	vols, host := dataDisks(map[string]map[string]string{
		"root":  {"type": "disk", "path": "/", "pool": "lab"},
		"data":  {"type": "disk", "path": "/var/lib/fediversity", "pool": "lab", "source": "web01-data"},
		"media": {"type": "disk", "path": "/srv/media", "pool": "big", "source": "web01-media", "source.type": "custom"},
		"srv":   {"type": "disk", "path": "/var/lib/x", "source": "/srv/fediversity/web01"},
		"eth0":  {"type": "nic", "network": "lab"},
	})
	if len(vols) != 2 || vols[0] != (SetVolume{Device: "data", Pool: "lab", Volume: "web01-data"}) || vols[1].Volume != "web01-media" {
		t.Errorf("volumes = %+v, want data and media", vols)
	}
	if len(host) != 1 || !strings.Contains(host[0], "srv (/srv/fediversity/web01 at /var/lib/x)") {
		t.Errorf("host paths = %v, want the srv device", host)
	}
	if w := HostPathWarning("web01", host); !strings.Contains(w, "custom storage volume") || !strings.Contains(w, "/srv/fediversity/web01") {
		t.Errorf("warning does not name the path and the way out: %s", w)
	}
}
