package incusapi

// The life cycle of an instance this provider owns (fediversity_incus_node): resolve
// its image, create and start it, read and replace its local configuration, wait for
// its systemd, stop and delete it.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Image is the part of an image the provider reads.
type Image struct {
	Fingerprint string `json:"fingerprint"`
	Type        string `json:"type"` // "container" or "virtual-machine"
	// Properties are the image's own, from its metadata.yaml.
	Properties map[string]string `json:"properties"`
	Aliases    []struct {
		Name string `json:"name"`
	} `json:"aliases"`
}

// AliasNames lists the image's aliases.
func (i *Image) AliasNames() []string {
	names := make([]string, 0, len(i.Aliases))
	for _, a := range i.Aliases {
		names = append(names, a.Name)
	}
	return names
}

// GetImage reads the image whose fingerprint is, or starts with, fp.
func (c *Client) GetImage(ctx context.Context, fp string) (*Image, error) {
	w := where{op: "get image " + fp}
	r, err := c.do(ctx, w, http.MethodGet, "/1.0/images/"+url.PathEscape(fp), nil, nil)
	if err != nil {
		return nil, err
	}
	var img Image
	if err := json.Unmarshal(r.Metadata, &img); err != nil {
		return nil, c.apiErr(w, 0, fmt.Sprintf("malformed image: %v", err))
	}
	return &img, nil
}

// ResolveImage finds the image ref names in the client's project: an alias first (as
// `incus launch` does), then a fingerprint or a unique prefix of one. A ref that is
// neither is an *APIError with StatusCode 404 whose text says so.
func (c *Client) ResolveImage(ctx context.Context, ref string) (*Image, error) {
	w := where{op: "resolve image " + ref}
	r, err := c.do(ctx, w, http.MethodGet, "/1.0/images/aliases/"+url.PathEscape(ref), nil, nil)
	switch {
	case err == nil:
		var alias struct {
			Target string `json:"target"`
		}
		if err := json.Unmarshal(r.Metadata, &alias); err != nil || alias.Target == "" {
			return nil, c.apiErr(w, 0, fmt.Sprintf("malformed image alias %q", ref))
		}
		return c.GetImage(ctx, alias.Target)
	case !IsNotFound(err):
		return nil, err
	}
	if !isHexPrefix(ref) {
		return nil, c.apiErr(w, http.StatusNotFound, fmt.Sprintf("no image alias %q (and it is not a fingerprint)", ref))
	}
	img, err := c.GetImage(ctx, ref)
	if IsNotFound(err) {
		return nil, c.apiErr(w, http.StatusNotFound, fmt.Sprintf("no image alias or fingerprint %q", ref))
	}
	return img, err
}

func isHexPrefix(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}

// InstanceConfig is an instance's own (not profile-expanded) configuration: the part
// that PUT /1.0/instances/<name> replaces.
type InstanceConfig struct {
	Name        string                       `json:"name,omitempty"`
	Type        string                       `json:"type,omitempty"`
	Project     string                       `json:"project,omitempty"`
	Status      string                       `json:"status,omitempty"`
	StatusCode  int                          `json:"status_code,omitempty"`
	Profiles    []string                     `json:"profiles"`
	Config      map[string]string            `json:"config"`
	Devices     map[string]map[string]string `json:"devices"`
	Ephemeral   bool                         `json:"ephemeral"`
	Stateful    bool                         `json:"stateful"`
	Description string                       `json:"description"`
	// Architecture is kept as read; a PUT with another one is refused by the daemon.
	Architecture string `json:"architecture,omitempty"`
}

// Running reports whether the instance is running.
func (i *InstanceConfig) Running() bool { return i.StatusCode == 103 || i.Status == "Running" }

// GetInstanceConfig reads instance name with its own config, devices and profiles. A
// missing instance is an *APIError with StatusCode 404 (see IsNotFound).
func (c *Client) GetInstanceConfig(ctx context.Context, name string) (*InstanceConfig, error) {
	w := where{op: "get instance", instance: name}
	r, err := c.do(ctx, w, http.MethodGet, instPath(name), nil, nil)
	if err != nil {
		return nil, err
	}
	var inst InstanceConfig
	if err := json.Unmarshal(r.Metadata, &inst); err != nil {
		return nil, c.apiErr(w, 0, fmt.Sprintf("malformed instance: %v", err))
	}
	return &inst, nil
}

// InstanceCreate is a new container made from a local image.
type InstanceCreate struct {
	Name string
	// Fingerprint is the full fingerprint of the image (see ResolveImage): creating from
	// a fingerprint, not an alias, means the image the plan resolved is the one used.
	Fingerprint string
	// Profiles are applied in order; nil means the daemon's default ("default"), an
	// empty slice means none.
	Profiles []string
	Config   map[string]string
	Devices  map[string]map[string]string
	// Start starts the container once it is created, in the same operation.
	Start bool
}

// CreateInstance creates (and, with Start, starts) a container and waits for it.
func (c *Client) CreateInstance(ctx context.Context, in InstanceCreate) error {
	w := where{op: "create instance", instance: in.Name}
	body := map[string]any{
		"name":     in.Name,
		"type":     "container",
		"source":   map[string]string{"type": "image", "fingerprint": in.Fingerprint},
		"config":   in.Config,
		"devices":  in.Devices,
		"start":    in.Start,
		"profiles": in.Profiles,
	}
	if in.Profiles == nil {
		delete(body, "profiles")
	}
	_, err := c.runAsync(ctx, w, http.MethodPost, "/1.0/instances", nil, body, opTimeout(ctx))
	return settleGone(ctx, err, func(ctx context.Context, gone *OperationGoneError) (bool, error) {
		inst, err := c.GetInstance(ctx, in.Name)
		if err != nil {
			return false, err
		}
		return !inst.CreatedAt.Before(gone.Created) && !gone.Created.IsZero() && (!in.Start || inst.Running()), nil
	})
}

// UpdateInstance replaces the instance's own config, devices, profiles and the other
// writable fields with cfg (PUT /1.0/instances/<name>) and waits for it. Keys cfg does
// not carry are removed: start from GetInstanceConfig to keep the daemon's volatile.*
// keys. Devices of a running container are added and removed live.
func (c *Client) UpdateInstance(ctx context.Context, name string, cfg InstanceConfig) error {
	w := where{op: "update instance", instance: name}
	body := map[string]any{
		"config":      cfg.Config,
		"devices":     cfg.Devices,
		"profiles":    cfg.Profiles,
		"ephemeral":   cfg.Ephemeral,
		"stateful":    cfg.Stateful,
		"description": cfg.Description,
	}
	if cfg.Architecture != "" {
		body["architecture"] = cfg.Architecture
	}
	_, err := c.runAsync(ctx, w, http.MethodPut, instPath(name), nil, body, opTimeout(ctx))
	return err
}

// DeleteInstance deletes a stopped instance and waits for it.
func (c *Client) DeleteInstance(ctx context.Context, name string) error {
	w := where{op: "delete instance", instance: name}
	_, err := c.runAsync(ctx, w, http.MethodDelete, instPath(name), nil, nil, opTimeout(ctx))
	return settleGone(ctx, err, goneAfterDelete(func(ctx context.Context) error {
		_, err := c.GetInstance(ctx, name)
		return err
	}))
}

// RemoveInstance stops instance name (cleanly within cleanStop, then by force) and
// deletes it. An instance that is already gone is not an error. ctx bounds it all.
func (c *Client) RemoveInstance(ctx context.Context, name string, cleanStop time.Duration) error {
	st, err := c.GetInstanceState(ctx, name)
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Running() || st.StatusCode == 110 /* frozen */ {
		secs := max(int(cleanStop/time.Second), 1)
		if err := c.Stop(ctx, name, false, secs); err != nil {
			if ctx.Err() != nil {
				return err
			}
			// The container did not shut down in time (or refused to): stop it by force.
			if err := c.Stop(ctx, name, true, 0); err != nil && !IsNotFound(err) {
				if st, serr := c.GetInstanceState(ctx, name); serr != nil || st.Running() {
					return err
				}
			}
		}
	}
	err = c.DeleteInstance(ctx, name)
	if IsNotFound(err) {
		return nil
	}
	return err
}

// SystemdWaitError says systemd in an instance did not come up within the wait.
type SystemdWaitError struct {
	Instance, Project string
	Wait              time.Duration
	// Last is what `systemctl is-system-running` last printed, or why it did not run.
	Last string
}

func (e *SystemdWaitError) Error() string {
	p := e.Project
	if p == "" {
		p = "default"
	}
	return fmt.Sprintf("instance %s (project %s): systemd did not answer running or degraded within %s (last answer: %s)",
		e.Instance, p, e.Wait, e.Last)
}

// NodePath is the PATH a command run in a node gets: incusd's default PATH has none of
// the directories where a NixOS system keeps its tools (incusd adds nothing for a
// container booted from a NixOS image), so they go first, then the default's.
const NodePath = "/run/wrappers/bin:/run/current-system/sw/bin:/nix/var/nix/profiles/default/bin:" +
	"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// WaitSystemd runs `systemctl is-system-running` in instance name every interval until
// it prints running or degraded (the system finished booting, with or without failed
// units), for at most wait. It returns that state. A container that is still booting
// answers starting, or the exec fails while its init is not up: both mean ask again.
func (c *Client) WaitSystemd(ctx context.Context, name string, wait, interval time.Duration) (string, error) {
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	last := "nothing yet"
	// Bounded by wctx; the count guards against an interval of almost nothing.
	for range 100000 {
		res, err := c.Exec(wctx, name, ExecRequest{Command: []string{"systemctl", "is-system-running"}, Environment: map[string]string{"PATH": NodePath}})
		switch {
		case err != nil && IsNotFound(err):
			return "", err
		case err != nil:
			if wctx.Err() == nil {
				last = err.Error()
			}
		default:
			state := strings.TrimSpace(string(res.Stdout))
			if state == "running" || state == "degraded" {
				return state, nil
			}
			if state == "" {
				state = fmt.Sprintf("exit %d, %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
			}
			last = state
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return "", c.transportErr(where{op: "wait for systemd", instance: name}, ctx.Err())
			}
			return "", &SystemdWaitError{Instance: name, Project: c.project, Wait: wait, Last: last}
		case <-time.After(interval):
		}
	}
	return "", &SystemdWaitError{Instance: name, Project: c.project, Wait: wait, Last: last}
}
