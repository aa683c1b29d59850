package incus

// A rollback point is a set: the instance's root disk and every custom storage volume
// attached to it, snapshotted under one freeze of the instance and thawed right after.
// A manifest on the instance (one config key per set, written in one request, so a
// reader sees all of it or none) names the members, the generation, the system the node
// ran and the freeze window. Disk devices that are host paths cannot be snapshotted:
// they are named in a warning.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
)

// ManifestPrefix starts the instance config key of each set's manifest:
// user.fediversity.set.<snapshot name>.
const ManifestPrefix = "user.fediversity.set."

// SetVolume is one custom volume of a set.
type SetVolume struct {
	Device string `json:"device"`
	Pool   string `json:"pool"`
	Volume string `json:"volume"`
}

// Manifest describes one set.
type Manifest struct {
	Name       string      `json:"name"`
	Generation int         `json:"generation"`
	Toplevel   string      `json:"toplevel,omitempty"`
	Root       string      `json:"root_pool"`
	Volumes    []SetVolume `json:"volumes"`
	// FrozeAt and ThawedAt bound the window the instance was frozen for the set
	// (both zero when it was not running, so nothing needed freezing).
	FrozeAt  time.Time `json:"froze_at,omitzero"`
	ThawedAt time.Time `json:"thawed_at,omitzero"`
	TookMS   int64     `json:"took_ms"`
}

// FreezeWindow is how long the instance was frozen for the set.
func (m Manifest) FreezeWindow() time.Duration {
	if m.FrozeAt.IsZero() || m.ThawedAt.IsZero() {
		return 0
	}
	return m.ThawedAt.Sub(m.FrozeAt)
}

// dataDisks splits the instance's disk devices other than the root: custom volumes of a
// storage pool (members of a set) and host paths (which cannot be snapshotted), named
// "device (source)".
func dataDisks(devices map[string]map[string]string) (vols []SetVolume, hostPaths []string) {
	names := make([]string, 0, len(devices))
	for n := range devices {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := devices[n]
		if d["type"] != "disk" || d["path"] == "/" {
			continue
		}
		switch {
		case d["pool"] != "" && d["source"] != "" && (d["source.type"] == "" || d["source.type"] == "custom"):
			vols = append(vols, SetVolume{Device: n, Pool: d["pool"], Volume: d["source"]})
		case strings.HasPrefix(d["source"], "/"):
			hostPaths = append(hostPaths, fmt.Sprintf("%s (%s at %s)", n, d["source"], d["path"]))
		}
	}
	return vols, hostPaths
}

// HostPathWarning says which disk devices a set cannot hold, and what to do.
func HostPathWarning(instance string, hostPaths []string) string {
	return fmt.Sprintf("instance %s has disk devices that are host paths, which Incus cannot snapshot: %s. Their data is not in the rollback point, "+
		"so a restore rolls the system back and leaves that data as it is. Put the data on a custom storage volume instead "+
		"(`incus storage volume create <pool> <volume>`, copy the data in, then `incus config device add %s <device> disk pool=<pool> source=<volume> path=<path>`).",
		instance, strings.Join(hostPaths, ", "), instance)
}

// SetTaken is what TakeSet did.
type SetTaken struct {
	Manifest  Manifest
	HostPaths []string
}

// TakeSet takes the set called name (a GenerationSnapshotName) of the instance: a
// snapshot of its root disk and of every custom volume attached to it, all of the same
// name, under one freeze when it runs; then it writes the set's manifest and rotates
// to the newest keep sets. An earlier set of the same name is replaced.
func (t *Transport) TakeSet(ctx context.Context, name string, gen int, toplevel string, keep int) (SetTaken, error) {
	const phase = "snapshot before switch"
	if err := validSnapshotName(name); err != nil {
		return SetTaken{}, t.errorf(phase, "%v", err)
	}
	if keep < 1 {
		keep = 1
	}
	inst, err := t.c.GetInstance(ctx, t.instance)
	if err != nil {
		return SetTaken{}, t.classify(ctx, phase, err)
	}
	_, root, _ := incusapi.RootDisk(inst.ExpandedDevices)
	vols, hostPaths := dataDisks(inst.ExpandedDevices)
	m := Manifest{Name: name, Generation: gen, Toplevel: toplevel, Root: root["pool"], Volumes: vols}
	// A set of the same name from an earlier attempt: the state before this switch is
	// the one worth keeping.
	if err := t.deleteSet(ctx, name, vols); err != nil {
		return SetTaken{}, t.classify(ctx, phase+": replace "+name, err)
	}
	start := time.Now()
	if err := t.snapshotFrozen(ctx, inst.Running(), name, vols, &m); err != nil {
		// Half a set is no rollback point: remove what was taken.
		_ = t.deleteSet(context.WithoutCancel(ctx), name, vols)
		return SetTaken{}, t.classify(ctx, phase+": create "+name, err)
	}
	m.TookMS = time.Since(start).Milliseconds()
	b, err := json.Marshal(m)
	if err != nil {
		return SetTaken{}, t.errorf(phase, "encode the manifest: %v", err)
	}
	if err := t.c.PatchInstanceConfig(ctx, t.instance, map[string]string{ManifestPrefix + name: string(b)}); err != nil {
		_ = t.deleteSet(context.WithoutCancel(ctx), name, vols)
		return SetTaken{}, t.classify(ctx, phase+": write the manifest of "+name, err)
	}
	return SetTaken{Manifest: m, HostPaths: hostPaths}, t.rotate(ctx, name, keep)
}

// snapshotFrozen freezes the instance (when it runs), snapshots the root disk and every
// volume, and thaws it, whatever happened: a node left frozen is worse than a set not
// taken. The freeze window goes into m.
func (t *Transport) snapshotFrozen(ctx context.Context, running bool, name string, vols []SetVolume, m *Manifest) (err error) {
	if running {
		m.FrozeAt = time.Now().UTC()
		if err := t.c.SetState(ctx, t.instance, incusapi.StateChange{Action: "freeze"}); err != nil {
			return fmt.Errorf("freeze: %w", err)
		}
		defer func() {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if terr := t.c.SetState(tctx, t.instance, incusapi.StateChange{Action: "unfreeze"}); terr != nil {
				err = errors.Join(err, fmt.Errorf("thaw (the instance may be left frozen: `incus start %s` thaws it): %w", t.instance, terr))
			}
			m.ThawedAt = time.Now().UTC()
		}()
	}
	if err := t.c.CreateSnapshot(ctx, t.instance, name); err != nil {
		return err
	}
	for _, v := range vols {
		if err := t.c.CreateVolumeSnapshot(ctx, v.Pool, v.Volume, name); err != nil {
			return err
		}
	}
	return nil
}

// deleteSet deletes the set called name: the instance snapshot, the volume snapshots of
// that name (those of its manifest, else of vols), and the manifest. Members already
// gone are skipped.
func (t *Transport) deleteSet(ctx context.Context, name string, vols []SetVolume) error {
	inst, err := t.c.GetInstance(ctx, t.instance)
	if err != nil {
		return err
	}
	if raw, ok := inst.Config[ManifestPrefix+name]; ok {
		var m Manifest
		if json.Unmarshal([]byte(raw), &m) == nil {
			vols = m.Volumes
		}
	}
	var errs []error
	for _, v := range vols {
		snaps, err := t.c.ListVolumeSnapshots(ctx, v.Pool, v.Volume)
		if err != nil {
			if !incusapi.IsNotFound(err) {
				errs = append(errs, err)
			}
			continue
		}
		for _, s := range snaps {
			if s == name {
				if err := t.c.DeleteVolumeSnapshot(ctx, v.Pool, v.Volume, name); err != nil && !incusapi.IsNotFound(err) {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := t.c.DeleteSnapshot(ctx, t.instance, name); err != nil && !incusapi.IsNotFound(err) {
		errs = append(errs, err)
	}
	if _, ok := inst.Config[ManifestPrefix+name]; ok {
		if err := t.c.PatchInstanceConfig(ctx, t.instance, map[string]string{ManifestPrefix + name: ""}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// manifests reads every set manifest on the instance config, by key.
func manifests(config map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range config {
		if strings.HasPrefix(k, ManifestPrefix) && v != "" {
			out[k] = v
		}
	}
	return out
}

// setManifest reads the manifest of set name (ok false for a set taken before sets had
// one: its only member is the root disk).
func setManifest(config map[string]string, name string) (Manifest, bool) {
	raw, ok := config[ManifestPrefix+name]
	if !ok || raw == "" {
		return Manifest{}, false
	}
	var m Manifest
	if json.Unmarshal([]byte(raw), &m) != nil {
		return Manifest{}, false
	}
	return m, true
}
