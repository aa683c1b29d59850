package incus

// The space check of a restore: before anything changes, the storage pool of every
// member of the rollback point must have room for a copy of it, and the project's disk
// quota (limits.disk, when set) must allow those copies. Otherwise the restore is
// refused with the figures, and the node is left exactly as the failed run left it.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
)

// setMember is one volume of a rollback point, as a restore copies it.
type setMember struct {
	// Device is the instance's disk device ("root" for the root disk).
	Device string
	// Pool is the storage pool the volume lives on; Volume is the custom volume's name
	// ("" for the root disk).
	Pool   string
	Volume string
	// Size is what a copy of the member takes on its pool, in bytes (the snapshot's
	// size as the driver reports it, else the volume's current usage); -1 when the
	// driver cannot tell.
	Size int64
	// Quota is what a copy counts against the project's limits.disk: its configured
	// size ("size" on the device or volume), else Size.
	Quota int64
}

func (m setMember) label() string {
	if m.Volume == "" {
		return "the root disk"
	}
	return fmt.Sprintf("custom volume %s (device %s)", m.Volume, m.Device)
}

// PoolShortfall is a pool without room for the copies of the members on it.
type PoolShortfall struct {
	Pool    string
	Needed  int64
	Free    int64
	Members []string
}

// QuotaShortfall is a project whose limits.disk does not allow the copies.
type QuotaShortfall struct {
	Project string
	Needed  int64
	Usage   int64
	Limit   int64
}

// SpaceError refuses a restore for lack of space, with the figures. Nothing was changed
// on the instance, its volumes or its snapshots.
type SpaceError struct {
	Instance string
	// Location is the cluster member the instance is on ("" or "none" outside a
	// cluster: the server the provider talks to).
	Location string
	Snapshot string
	Pools    []PoolShortfall
	Quota    *QuotaShortfall
}

func (e *SpaceError) Error() string {
	node := e.Location
	if node == "" || node == "none" {
		node = "the Incus server"
	} else {
		node = "cluster member " + node
	}
	var parts []string
	for _, p := range e.Pools {
		parts = append(parts, fmt.Sprintf("storage pool %s on %s has %s free, and a copy of %s needs %s",
			p.Pool, node, bytesText(p.Free), strings.Join(p.Members, " and "), bytesText(p.Needed)))
	}
	if q := e.Quota; q != nil {
		parts = append(parts, fmt.Sprintf("project %s's limits.disk is %s, of which %s is used, and the copies need %s more",
			q.Project, bytesText(q.Limit), bytesText(q.Usage), bytesText(q.Needed)))
	}
	return fmt.Sprintf("not enough space to restore instance %s from snapshot %s: %s; the restore was refused before anything changed "+
		"(the instance, its volumes and its snapshots are as the failed run left them): free space on the pool or raise the quota, "+
		"then restore by hand (`incus snapshot restore %s %s`, then `incus start %s`)",
		e.Instance, e.Snapshot, strings.Join(parts, "; "), e.Instance, e.Snapshot, e.Instance)
}

// checkSpace compares the copies of members with the free space of their pools and with
// the project's quota. A member whose size the driver cannot tell counts 0 (it is named
// in unknown): refusing a restore because a size is unknown would leave a node down that
// may well fit.
func checkSpace(members []setMember, free map[string]int64, quota incusapi.DiskQuota, project string) (pools []PoolShortfall, q *QuotaShortfall, unknown []string) {
	need := map[string]int64{}
	names := map[string][]string{}
	var quotaNeed int64
	for _, m := range members {
		if m.Size < 0 {
			unknown = append(unknown, m.label())
		} else {
			need[m.Pool] += m.Size
		}
		names[m.Pool] = append(names[m.Pool], m.label())
		switch {
		case m.Quota >= 0:
			quotaNeed += m.Quota
		case m.Size >= 0:
			quotaNeed += m.Size
		}
	}
	keys := make([]string, 0, len(need))
	for p := range need {
		keys = append(keys, p)
	}
	sort.Strings(keys)
	for _, p := range keys {
		if need[p] > free[p] {
			pools = append(pools, PoolShortfall{Pool: p, Needed: need[p], Free: free[p], Members: names[p]})
		}
	}
	if quota.Limit >= 0 && quota.Usage+quotaNeed > quota.Limit {
		if project == "" {
			project = "default"
		}
		q = &QuotaShortfall{Project: project, Needed: quotaNeed, Usage: quota.Usage, Limit: quota.Limit}
	}
	return pools, q, unknown
}

// restoreMembers lists the members of the rollback point snap of inst with their
// sizes: the root disk and the custom volumes its manifest names.
func (t *Transport) restoreMembers(ctx context.Context, inst *incusapi.Instance, snap string) ([]setMember, error) {
	dev, root, ok := incusapi.RootDisk(inst.ExpandedDevices)
	if !ok || root["pool"] == "" {
		return nil, fmt.Errorf("instance %s has no root disk on a storage pool (no disk device with path / and a pool)", t.instance)
	}
	m := setMember{Device: dev, Pool: root["pool"], Size: -1, Quota: parseSize(root["size"])}
	if s, err := t.c.GetSnapshot(ctx, t.instance, snap); err != nil {
		return nil, err
	} else if s.Size > 0 {
		m.Size = s.Size
	}
	if m.Size < 0 {
		// The driver tells no snapshot size: the root disk's usage now is the next
		// best figure (a dir pool without project quotas tells neither).
		if st, err := t.stateSettled(ctx); err == nil {
			if d, ok := st.Disk[dev]; ok && d.Usage > 0 {
				m.Size = d.Usage
			}
		}
	}
	members := []setMember{m}
	if man, ok := setManifest(inst.Config, snap); ok {
		for _, v := range man.Volumes {
			vm := setMember{Device: v.Device, Pool: v.Pool, Volume: v.Volume, Size: -1, Quota: -1}
			// A volume snapshot's size is not published: the volume's usage now is
			// the figure.
			if used, err := t.c.VolumeUsage(ctx, v.Pool, v.Volume); err == nil && used > 0 {
				vm.Size = used
			}
			if d, ok := inst.ExpandedDevices[v.Device]; ok {
				vm.Quota = parseSize(d["size"])
			}
			members = append(members, vm)
		}
	}
	return members, nil
}

// RestoreSpace checks, before a restore of snapshot snap changes anything, that every
// member's pool has room for a copy of it and that the project's limits.disk allows
// the copies. It returns a *SpaceError with the figures when either would be exceeded,
// and names the members whose size the driver could not tell (they were counted as 0).
func (t *Transport) RestoreSpace(ctx context.Context, snap string) (unknown []string, err error) {
	const phase = "check space before restore"
	inst, err := t.c.GetInstance(ctx, t.instance)
	if err != nil {
		return nil, t.classify(ctx, phase, err)
	}
	members, err := t.restoreMembers(ctx, inst, snap)
	if err != nil {
		return nil, t.errorf(phase, "%w", err)
	}
	free := map[string]int64{}
	for _, m := range members {
		if _, ok := free[m.Pool]; ok {
			continue
		}
		sp, err := t.c.StoragePoolSpace(ctx, m.Pool, inst.Location)
		if err != nil {
			return nil, t.classify(ctx, phase+": pool "+m.Pool, err)
		}
		free[m.Pool] = sp.Free()
	}
	quota, err := t.c.ProjectDiskQuota(ctx)
	if err != nil {
		return nil, t.classify(ctx, phase+": project quota", err)
	}
	pools, q, unknown := checkSpace(members, free, quota, t.project)
	if pools != nil || q != nil {
		return unknown, &SpaceError{Instance: t.instance, Location: inst.Location, Snapshot: snap, Pools: pools, Quota: q}
	}
	return unknown, nil
}

// IsSpaceError tells whether err is a restore refused for lack of space.
func IsSpaceError(err error) bool {
	var se *SpaceError
	return errors.As(err, &se)
}

// parseSize reads an Incus size ("10GiB", "500MB", "1073741824"); -1 when s is empty or
// not a size.
func parseSize(s string) int64 {
	s = strings.TrimSpace(s)
	if s == "" {
		return -1
	}
	units := []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"PiB", 1 << 50},
		{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"PB", 1e15}, {"B", 1},
	}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n < 0 {
		return -1
	}
	return int64(n * float64(mult))
}

// bytesText is a size for people, with the exact figure: "1.5 GiB (1610612736 bytes)".
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	f, i := float64(n), 0
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s (%d bytes)", f, []string{"B", "KiB", "MiB", "GiB", "TiB"}[i], n)
}
