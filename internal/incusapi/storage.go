package incusapi

// Storage figures a restore checks before it changes anything: a storage pool's space,
// a project's disk quota, the size of a snapshot and the usage of a volume.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// PoolSpace is the space of a storage pool on one server, in bytes.
type PoolSpace struct {
	Total int64
	Used  int64
}

// Free is what is left: Total - Used (never below 0).
func (p PoolSpace) Free() int64 { return max(p.Total-p.Used, 0) }

// StoragePoolSpace reads the space of pool (GET /1.0/storage-pools/<pool>/resources) on
// cluster member target ("" or "none": the server the client talks to).
func (c *Client) StoragePoolSpace(ctx context.Context, pool, target string) (PoolSpace, error) {
	w := where{op: "storage pool resources " + pool}
	q := url.Values{}
	if target != "" && target != "none" {
		q.Set("target", target)
	}
	r, err := c.do(ctx, w, http.MethodGet, "/1.0/storage-pools/"+url.PathEscape(pool)+"/resources", q, nil)
	if err != nil {
		return PoolSpace{}, err
	}
	var res struct {
		Space struct {
			Total int64 `json:"total"`
			Used  int64 `json:"used"`
		} `json:"space"`
	}
	if err := json.Unmarshal(r.Metadata, &res); err != nil {
		return PoolSpace{}, c.apiErr(w, 0, fmt.Sprintf("malformed pool resources: %v", err))
	}
	return PoolSpace{Total: res.Space.Total, Used: res.Space.Used}, nil
}

// DiskQuota is a project's limits.disk and what its volumes count against it, in bytes.
// Limit is -1 when the project sets no limits.disk.
type DiskQuota struct {
	Limit int64
	Usage int64
}

// ProjectDiskQuota reads the disk quota of the client's project (GET
// /1.0/projects/<project>/state).
func (c *Client) ProjectDiskQuota(ctx context.Context) (DiskQuota, error) {
	p := c.project
	if p == "" {
		p = "default"
	}
	w := where{op: "project state " + p}
	r, err := c.do(ctx, w, http.MethodGet, "/1.0/projects/"+url.PathEscape(p)+"/state", url.Values{"project": {p}}, nil)
	if err != nil {
		return DiskQuota{}, err
	}
	var st struct {
		Resources map[string]struct {
			Limit int64 `json:"Limit"`
			Usage int64 `json:"Usage"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(r.Metadata, &st); err != nil {
		return DiskQuota{}, c.apiErr(w, 0, fmt.Sprintf("malformed project state: %v", err))
	}
	d, ok := st.Resources["disk"]
	if !ok {
		return DiskQuota{Limit: -1}, nil
	}
	return DiskQuota{Limit: d.Limit, Usage: d.Usage}, nil
}

// GetSnapshot reads snapshot snap of instance name; its Size is what the storage
// driver reports (-1 or 0 when the driver cannot tell).
func (c *Client) GetSnapshot(ctx context.Context, name, snap string) (*Snapshot, error) {
	w := where{op: "snapshot get " + snap, instance: name}
	r, err := c.do(ctx, w, http.MethodGet, instPath(name, "snapshots", url.PathEscape(snap)), nil, nil)
	if err != nil {
		return nil, err
	}
	var s Snapshot
	if err := json.Unmarshal(r.Metadata, &s); err != nil {
		return nil, c.apiErr(w, 0, fmt.Sprintf("malformed snapshot: %v", err))
	}
	return &s, nil
}

// VolumeUsage is the space custom volume vol of pool uses (GET
// /1.0/storage-pools/<pool>/volumes/custom/<vol>/state), -1 when the driver cannot tell.
func (c *Client) VolumeUsage(ctx context.Context, pool, vol string) (int64, error) {
	w := where{op: "volume state " + pool + "/" + vol}
	r, err := c.do(ctx, w, http.MethodGet, "/1.0/storage-pools/"+url.PathEscape(pool)+"/volumes/custom/"+url.PathEscape(vol)+"/state", nil, nil)
	if err != nil {
		return -1, err
	}
	var st struct {
		Usage *struct {
			Used int64 `json:"used"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(r.Metadata, &st); err != nil {
		return -1, c.apiErr(w, 0, fmt.Sprintf("malformed volume state: %v", err))
	}
	if st.Usage == nil {
		return -1, nil
	}
	return st.Usage.Used, nil
}

func volPath(pool, vol string, rest ...string) string {
	p := "/1.0/storage-pools/" + url.PathEscape(pool) + "/volumes/custom/" + url.PathEscape(vol)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// CreateVolumeSnapshot takes snapshot snap of custom volume vol of pool and waits for it.
func (c *Client) CreateVolumeSnapshot(ctx context.Context, pool, vol, snap string) error {
	w := where{op: "volume snapshot create " + pool + "/" + vol + "/" + snap}
	_, err := c.runAsync(ctx, w, http.MethodPost, volPath(pool, vol, "snapshots"), nil, map[string]any{"name": snap}, opTimeout(ctx))
	return settleGone(ctx, err, madeByIt(func(ctx context.Context) (time.Time, error) {
		return c.volumeSnapshotCreated(ctx, pool, vol, snap)
	}))
}

func (c *Client) volumeSnapshotCreated(ctx context.Context, pool, vol, snap string) (time.Time, error) {
	w := where{op: "volume snapshot get " + pool + "/" + vol + "/" + snap}
	r, err := c.do(ctx, w, http.MethodGet, volPath(pool, vol, "snapshots", url.PathEscape(snap)), nil, nil)
	if err != nil {
		return time.Time{}, err
	}
	var s struct {
		CreatedAt time.Time `json:"created_at"`
	}
	if err := json.Unmarshal(r.Metadata, &s); err != nil {
		return time.Time{}, c.apiErr(w, 0, fmt.Sprintf("malformed volume snapshot: %v", err))
	}
	return s.CreatedAt, nil
}

// ListVolumeSnapshots names the snapshots of custom volume vol of pool.
func (c *Client) ListVolumeSnapshots(ctx context.Context, pool, vol string) ([]string, error) {
	w := where{op: "volume snapshot list " + pool + "/" + vol}
	r, err := c.do(ctx, w, http.MethodGet, volPath(pool, vol, "snapshots"), nil, nil)
	if err != nil {
		return nil, err
	}
	var urls []string
	if err := json.Unmarshal(r.Metadata, &urls); err != nil {
		return nil, c.apiErr(w, 0, fmt.Sprintf("malformed volume snapshot list: %v", err))
	}
	names := make([]string, 0, len(urls))
	for _, u := range urls {
		if i := strings.LastIndexByte(u, '/'); i >= 0 {
			u = u[i+1:]
		}
		if n, err := url.PathUnescape(u); err == nil {
			u = n
		}
		names = append(names, u)
	}
	return names, nil
}

// DeleteVolumeSnapshot deletes snapshot snap of custom volume vol of pool.
func (c *Client) DeleteVolumeSnapshot(ctx context.Context, pool, vol, snap string) error {
	w := where{op: "volume snapshot delete " + pool + "/" + vol + "/" + snap}
	_, err := c.runAsync(ctx, w, http.MethodDelete, volPath(pool, vol, "snapshots", url.PathEscape(snap)), nil, nil, opTimeout(ctx))
	return settleGone(ctx, err, goneAfterDelete(func(ctx context.Context) error {
		_, err := c.volumeSnapshotCreated(ctx, pool, vol, snap)
		return err
	}))
}

// RestoreVolume rolls custom volume vol of pool back to its snapshot snap (PUT the volume
// with {"restore": snap}); the volume must not be in use by a running instance.
func (c *Client) RestoreVolume(ctx context.Context, pool, vol, snap string) error {
	w := where{op: "volume restore " + pool + "/" + vol + " to " + snap}
	_, err := c.runAsync(ctx, w, http.MethodPut, volPath(pool, vol), nil, map[string]any{"restore": snap}, opTimeout(ctx))
	return err
}

// PatchInstanceConfig sets the config keys of instance name in one request (PATCH
// /1.0/instances/<name>): the daemon writes them in one transaction, so a reader sees
// all of them or none. An empty value removes the key.
func (c *Client) PatchInstanceConfig(ctx context.Context, name string, config map[string]string) error {
	w := where{op: "patch instance config", instance: name}
	_, err := c.runAsync(ctx, w, http.MethodPatch, instPath(name), nil, map[string]any{"config": config}, opTimeout(ctx))
	return err
}
