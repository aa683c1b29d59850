package incusapi

// Copies made from snapshots: an instance from an instance snapshot, a custom volume
// from a volume snapshot. The inspection copy of a bricked state is made of them
// (transport/incus's InspectCopy).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// SnapshotConfig is an instance snapshot's configuration: what the instance was when
// the snapshot was taken.
type SnapshotConfig struct {
	Name            string                       `json:"name"`
	Config          map[string]string            `json:"config"`
	Devices         map[string]map[string]string `json:"devices"`
	ExpandedDevices map[string]map[string]string `json:"expanded_devices"`
	Profiles        []string                     `json:"profiles"`
}

// GetSnapshotConfig reads the configuration of snapshot snap of instance name.
func (c *Client) GetSnapshotConfig(ctx context.Context, name, snap string) (*SnapshotConfig, error) {
	w := where{op: "snapshot get " + snap, instance: name}
	r, err := c.do(ctx, w, http.MethodGet, instPath(name, "snapshots", url.PathEscape(snap)), nil, nil)
	if err != nil {
		return nil, err
	}
	var s SnapshotConfig
	if err := json.Unmarshal(r.Metadata, &s); err != nil {
		return nil, c.apiErr(w, 0, fmt.Sprintf("malformed snapshot: %v", err))
	}
	return &s, nil
}

// InstanceCopy is a new instance made as a copy of an instance snapshot.
type InstanceCopy struct {
	Name string
	// Source is "<instance>/<snapshot>".
	Source string
	// Config and Devices override the source's, key by key (a device of type "none"
	// masks the source's device of that name); the rest is the source's.
	Config  map[string]string
	Devices map[string]map[string]string
}

// CopyInstance makes the instance in as a copy of its source (stopped) and waits for it.
func (c *Client) CopyInstance(ctx context.Context, in InstanceCopy) error {
	w := where{op: "copy instance " + in.Source, instance: in.Name}
	body := map[string]any{
		"name":    in.Name,
		"source":  map[string]any{"type": "copy", "source": in.Source, "instance_only": true},
		"config":  in.Config,
		"devices": in.Devices,
	}
	_, err := c.runAsync(ctx, w, http.MethodPost, "/1.0/instances", nil, body, opTimeout(ctx))
	return settleGone(ctx, err, madeByIt(func(ctx context.Context) (time.Time, error) {
		inst, err := c.GetInstance(ctx, in.Name)
		if err != nil {
			return time.Time{}, err
		}
		return inst.CreatedAt, nil
	}))
}

// CopyVolumeSnapshot makes custom volume vol in pool as a copy of snapshot snap of
// custom volume source in the same pool, and waits for it.
func (c *Client) CopyVolumeSnapshot(ctx context.Context, pool, source, snap, vol string) error {
	w := where{op: "volume copy " + pool + "/" + source + "/" + snap + " to " + vol}
	body := map[string]any{"name": vol, "type": "custom", "content_type": "filesystem",
		"source": map[string]any{"type": "copy", "pool": pool, "name": source + "/" + snap, "volume_only": true}}
	_, err := c.runAsync(ctx, w, http.MethodPost, "/1.0/storage-pools/"+url.PathEscape(pool)+"/volumes/custom", nil, body, opTimeout(ctx))
	return settleGone(ctx, err, madeByIt(func(ctx context.Context) (time.Time, error) {
		v, err := c.GetVolume(ctx, pool, vol)
		if err != nil {
			return time.Time{}, err
		}
		return v.CreatedAt, nil
	}))
}
