package incusapi

// Storage figures a restore checks before it changes anything: a storage pool's space,
// a project's disk quota, the size of a snapshot and the usage of a volume.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
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
