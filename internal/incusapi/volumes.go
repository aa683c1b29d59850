package incusapi

// Custom storage volumes: what fediversity_incus_node makes to hold a node's data, so that
// the data is a member of the node's snapshot set (a host path disk is not).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// CustomVolumeOf reads a custom volume's pool and name from a used_by entry of the API
// ("/1.0/storage-pools/<pool>/volumes/custom/<name>", with an optional "?project=…");
// ok is false for any other entry (an instance, a profile, an image).
func CustomVolumeOf(usedBy string) (pool, volume string, ok bool) {
	p, _, _ := strings.Cut(usedBy, "?")
	rest, ok := strings.CutPrefix(p, "/1.0/storage-pools/")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 4 || parts[1] != "volumes" || parts[2] != "custom" {
		return "", "", false
	}
	pool, _ = url.PathUnescape(parts[0])
	volume, _ = url.PathUnescape(parts[3])
	return pool, volume, true
}

// Volume is a custom storage volume as the daemon reports it.
type Volume struct {
	Name        string            `json:"name"`
	Type        string            `json:"type"`
	ContentType string            `json:"content_type"`
	Config      map[string]string `json:"config"`
	CreatedAt   time.Time         `json:"created_at"`
	Description string            `json:"description"`
	// UsedBy lists the instances (and profiles) that attach the volume, as API paths.
	UsedBy []string `json:"used_by"`
}

// CreateVolume makes custom filesystem volume vol in pool with config (e.g. {"size":
// "10GiB"}; nil for none) and waits for it.
func (c *Client) CreateVolume(ctx context.Context, pool, vol, description string, config map[string]string) error {
	w := where{op: "volume create " + pool + "/" + vol}
	if config == nil {
		config = map[string]string{}
	}
	body := map[string]any{"name": vol, "type": "custom", "content_type": "filesystem", "config": config, "description": description}
	_, err := c.runAsync(ctx, w, http.MethodPost, "/1.0/storage-pools/"+url.PathEscape(pool)+"/volumes/custom", nil, body, opTimeout(ctx))
	return settleGone(ctx, err, madeByIt(func(ctx context.Context) (time.Time, error) {
		v, err := c.GetVolume(ctx, pool, vol)
		if err != nil {
			return time.Time{}, err
		}
		return v.CreatedAt, nil
	}))
}

// GetVolume reads custom volume vol of pool; a missing one is a not-found error
// (IsNotFound).
func (c *Client) GetVolume(ctx context.Context, pool, vol string) (*Volume, error) {
	w := where{op: "volume get " + pool + "/" + vol}
	r, err := c.do(ctx, w, http.MethodGet, volPath(pool, vol), nil, nil)
	if err != nil {
		return nil, err
	}
	var v Volume
	if err := json.Unmarshal(r.Metadata, &v); err != nil {
		return nil, c.apiErr(w, 0, fmt.Sprintf("malformed volume: %v", err))
	}
	return &v, nil
}

// PatchVolumeConfig sets config keys of custom volume vol of pool (PATCH: keys not
// named keep their values), e.g. {"size": "20GiB"} to grow it.
func (c *Client) PatchVolumeConfig(ctx context.Context, pool, vol string, config map[string]string) error {
	w := where{op: "volume update " + pool + "/" + vol}
	_, err := c.runAsync(ctx, w, http.MethodPatch, volPath(pool, vol), nil, map[string]any{"config": config}, opTimeout(ctx))
	return err
}

// DeleteVolume deletes custom volume vol of pool with its snapshots. The daemon refuses
// while an instance attaches it.
func (c *Client) DeleteVolume(ctx context.Context, pool, vol string) error {
	w := where{op: "volume delete " + pool + "/" + vol}
	_, err := c.runAsync(ctx, w, http.MethodDelete, volPath(pool, vol), nil, nil, opTimeout(ctx))
	return settleGone(ctx, err, goneAfterDelete(func(ctx context.Context) error {
		_, err := c.GetVolume(ctx, pool, vol)
		return err
	}))
}

// ProfileDevices reads the devices of profile name in the client's project.
func (c *Client) ProfileDevices(ctx context.Context, name string) (map[string]map[string]string, error) {
	w := where{op: "profile get " + name}
	r, err := c.do(ctx, w, http.MethodGet, "/1.0/profiles/"+url.PathEscape(name), nil, nil)
	if err != nil {
		return nil, err
	}
	var p struct {
		Devices map[string]map[string]string `json:"devices"`
	}
	if err := json.Unmarshal(r.Metadata, &p); err != nil {
		return nil, c.apiErr(w, 0, fmt.Sprintf("malformed profile: %v", err))
	}
	return p.Devices, nil
}
