package incusapi

import (
	"fmt"
	"testing"
	"time"
)

// labRootPool is the pool of the default profile's root disk: where the lab's
// containers, and so their data volumes, live.
func labRootPool(t *testing.T, c *Client) string {
	t.Helper()
	devs, err := c.ProfileDevices(labCtx(t), "default")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d["type"] == "disk" && d["path"] == "/" && d["pool"] != "" {
			return d["pool"]
		}
	}
	t.Fatalf("the lab's default profile has no root disk with a pool: %v", devs)
	return ""
}

func TestLabVolumeLifecycle(t *testing.T) {
	c := labClient(t)
	ctx := labCtx(t)
	pool := labRootPool(t, c)
	vol := fmt.Sprintf("fedi-apitest-vol-%d", time.Now().UnixNano()%1_000_000)
	t.Cleanup(func() { _ = c.DeleteVolume(labCtx(t), pool, vol) })

	if err := c.CreateVolume(ctx, pool, vol, "incusapi lab test", map[string]string{"size": "64MiB"}); err != nil {
		t.Fatal(err)
	}
	v, err := c.GetVolume(ctx, pool, vol)
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != vol || v.Config["size"] != "64MiB" || v.ContentType != "filesystem" || len(v.UsedBy) != 0 {
		t.Fatalf("created volume reads back as %+v", v)
	}
	if err := c.CreateVolume(ctx, pool, vol, "", nil); err == nil {
		t.Fatal("creating the same volume twice succeeded")
	}

	if err := c.PatchVolumeConfig(ctx, pool, vol, map[string]string{"size": "128MiB"}); err != nil {
		t.Fatal(err)
	}
	if v, err = c.GetVolume(ctx, pool, vol); err != nil || v.Config["size"] != "128MiB" {
		t.Fatalf("after the size change: %v, %+v", err, v)
	}
	if err := c.CreateVolumeSnapshot(ctx, pool, vol, "s1"); err != nil {
		t.Fatal(err)
	}

	// Delete takes the snapshots with it.
	if err := c.DeleteVolume(ctx, pool, vol); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetVolume(ctx, pool, vol); !IsNotFound(err) {
		t.Fatalf("deleted volume: want not found, got %v", err)
	}
	if err := c.DeleteVolume(ctx, pool, vol); !IsNotFound(err) {
		t.Fatalf("deleting a missing volume: want not found, got %v", err)
	}
	if _, err := c.ProfileDevices(ctx, "fedi-no-such-profile"); !IsNotFound(err) {
		t.Fatalf("missing profile: want not found, got %v", err)
	}
}
