package incus

// The inspection copy of a bricked state. A restore keeps the state that stopped
// answering aside as snapshots (fediversity-bricked-<time>) of the root disk and of
// every custom volume. `incus copy <instance>/<snapshot> <new>` copies the root disk
// only: the copy's disk devices still name the node's live custom volumes, so started
// for inspection it would mount the running node's current data beside it (and a
// destroy of the node with delete_on_destroy then fails: "the storage volume is still
// in use"). InspectCopy makes the copy whole instead: its custom volumes are new
// volumes copied from the bricked volume snapshots, and nothing of the live node is
// left in it (its host-path disks and proxy devices are masked: the first are the
// live node's files, the second listen on the live node's addresses).

import (
	"context"
	"fmt"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
)

// InspectCopyCommand is the command that makes an inspection copy of a bricked state:
// both front ends name it in their errors, and the docs give it.
func InspectCopyCommand(instance, snapshot string) string {
	return fmt.Sprintf("fediversity incus inspect-copy %s %s <new-name>", instance, snapshot)
}

// KeptAsideText says where the state that stopped answering is kept and how to inspect
// or remove it, in both front ends' errors: bricked is the instance snapshot, vols the
// custom volumes kept aside under the same name.
func KeptAsideText(instance, bricked string, vols []SetVolume) string {
	what := fmt.Sprintf("snapshot %s of %s", bricked, instance)
	if len(vols) > 0 {
		names := make([]string, 0, len(vols))
		for _, v := range vols {
			names = append(names, v.Pool+"/"+v.Volume)
		}
		what += " and of its custom volumes " + strings.Join(names, ", ")
	}
	text := fmt.Sprintf("The state that stopped answering is kept as %s; it is never rotated. Inspect it in a copy of its own, whose volumes are copies of those snapshots and nothing of the live node: `%s` (not `incus copy`, whose copy would mount the node's live volumes). Remove it with `incus snapshot delete %s %s`",
		what, InspectCopyCommand(instance, bricked), instance, bricked)
	for _, v := range vols {
		text += fmt.Sprintf(" and `incus storage volume snapshot delete %s %s %s`", v.Pool, v.Volume, bricked)
	}
	return text + "."
}

// AsideText is what became of the state that stopped answering in the restore this
// guard ran, for both front ends' errors: kept (KeptAsideText), kept only in part, or
// not kept; "" when no restore ran.
func (g *SnapshotGuard) AsideText() string {
	switch {
	case g.bricked != "":
		return KeptAsideText(g.instance, g.bricked, g.brickedVols)
	case g.brickedErr == nil:
		return ""
	}
	text := fmt.Sprintf("Keeping the state that stopped answering aside failed (%v), so the restore went on without its journal: had it been cut off, the next deploy would not have known to finish it.", g.brickedErr)
	for _, v := range g.brickedVols {
		text += fmt.Sprintf(" Custom volume %s/%s was kept aside before the failure, as its snapshot %s (`incus storage volume copy %s/%s/%s %s/<new-name>` to look at it; `incus storage volume snapshot delete %s %s %s` to remove it: it is never rotated).",
			v.Pool, v.Volume, g.brickedName, v.Pool, v.Volume, g.brickedName, v.Pool, v.Pool, v.Volume, g.brickedName)
	}
	return text
}

// InspectCopyResult is what InspectCopy made.
type InspectCopyResult struct {
	// Instance is the copy (stopped).
	Instance string
	// Volumes are the custom volumes made for it, by device: copies of the bricked
	// volume snapshots, in the same pools.
	Volumes map[string]SetVolume
	// Masked are the devices left out of the copy ("device (why)"): host paths and
	// proxies are the live node's.
	Masked []string
}

// InspectCopy makes instance name, a stopped copy of instance's state kept aside as
// snapshot (a bricked state, or a restore's journal): its root disk from the snapshot,
// and each custom volume a new volume <name>-<device> copied from the volume's snapshot
// of the same name (for a journal, the bricked name its volumes have). Nothing of the
// live node is left: a custom volume without that snapshot refuses the copy (nothing
// is made), host-path disks and proxy devices are masked. A failure removes what it
// made.
func InspectCopy(ctx context.Context, c *incusapi.Client, instance, snapshot, name string) (InspectCopyResult, error) {
	res := InspectCopyResult{Instance: name, Volumes: map[string]SetVolume{}}
	if err := validSnapshotName(snapshot); err != nil {
		return res, fmt.Errorf("inspect-copy: %w: give a snapshot the restore kept aside (fediversity-bricked-…)", err)
	}
	if name == "" || strings.ContainsAny(name, "/ ") {
		return res, fmt.Errorf("inspect-copy: new name %q: give a plain instance name", name)
	}
	if _, err := c.GetInstance(ctx, name); err == nil {
		return res, fmt.Errorf("inspect-copy: an instance %s exists already: choose another name", name)
	} else if !incusapi.IsNotFound(err) {
		return res, err
	}
	snap, err := c.GetSnapshotConfig(ctx, instance, snapshot)
	if err != nil {
		return res, fmt.Errorf("inspect-copy: snapshot %s of %s: %w", snapshot, instance, err)
	}
	volSnap := snapshot
	if p, ok := parsePendingRestore(incusapi.Snapshot{Name: snapshot}); ok {
		volSnap = p.Bricked
	}
	vols, _ := dataDisks(snap.ExpandedDevices)
	for _, v := range vols {
		snaps, err := c.ListVolumeSnapshots(ctx, v.Pool, v.Volume)
		if err != nil {
			return res, fmt.Errorf("inspect-copy: volume %s/%s: %w", v.Pool, v.Volume, err)
		}
		found := false
		for _, s := range snaps {
			found = found || s == volSnap
		}
		if !found {
			return res, fmt.Errorf("inspect-copy: custom volume %s/%s (device %s) has no snapshot %s, so a copy could only mount the live volume: nothing was made", v.Pool, v.Volume, v.Device, volSnap)
		}
	}
	devices := map[string]map[string]string{}
	for dev, d := range snap.ExpandedDevices {
		switch {
		case d["type"] == "proxy":
			devices[dev] = map[string]string{"type": "none"}
			res.Masked = append(res.Masked, dev+" (a proxy listening on the live node's address)")
		case d["type"] == "disk" && d["path"] != "/" && strings.HasPrefix(d["source"], "/"):
			devices[dev] = map[string]string{"type": "none"}
			res.Masked = append(res.Masked, dev+" (a host path: the live node's files)")
		}
	}
	undo := func() {
		cctx := context.WithoutCancel(ctx)
		for _, v := range res.Volumes {
			_ = c.DeleteVolume(cctx, v.Pool, v.Volume)
		}
	}
	for _, v := range vols {
		copyName := name + "-" + v.Device
		if err := c.CopyVolumeSnapshot(ctx, v.Pool, v.Volume, volSnap, copyName); err != nil {
			undo()
			return res, fmt.Errorf("inspect-copy: copying %s/%s/%s: %w", v.Pool, v.Volume, volSnap, err)
		}
		res.Volumes[v.Device] = SetVolume{Device: v.Device, Pool: v.Pool, Volume: copyName}
		d := map[string]string{}
		for k, val := range snap.ExpandedDevices[v.Device] {
			d[k] = val
		}
		d["source"] = copyName
		devices[v.Device] = d
	}
	config := map[string]string{"boot.autostart": "false", "user.fediversity.inspect-copy-of": instance + "/" + snapshot}
	if err := c.CopyInstance(ctx, incusapi.InstanceCopy{Name: name, Source: instance + "/" + snapshot, Config: config, Devices: devices}); err != nil {
		undo()
		return res, fmt.Errorf("inspect-copy: copying %s/%s to %s: %w", instance, snapshot, name, err)
	}
	return res, nil
}
