package incusapi

// A tenant's shared resources (fediversity_incus_tenant): its project, and the default
// profile of that project.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// Project is an Incus project as the provider reads and writes it.
type Project struct {
	Name        string            `json:"name,omitempty"`
	Description string            `json:"description"`
	Config      map[string]string `json:"config"`
	// UsedBy lists the URLs of what the project holds (instances, profiles, volumes,
	// images); read only.
	UsedBy []string `json:"used_by,omitempty"`
}

// CreateProject makes project p.
func (c *Client) CreateProject(ctx context.Context, p Project) error {
	w := where{op: "create project " + p.Name}
	_, err := c.do(ctx, w, http.MethodPost, "/1.0/projects", url.Values{"project": {"default"}}, Project{Name: p.Name, Description: p.Description, Config: p.Config})
	return err
}

// GetProject reads project name (a not-found *APIError when there is none).
func (c *Client) GetProject(ctx context.Context, name string) (*Project, error) {
	w := where{op: "get project " + name}
	r, err := c.do(ctx, w, http.MethodGet, "/1.0/projects/"+url.PathEscape(name), url.Values{"project": {"default"}}, nil)
	if err != nil {
		return nil, err
	}
	var p Project
	if err := json.Unmarshal(r.Metadata, &p); err != nil {
		return nil, c.apiErr(w, 0, fmt.Sprintf("malformed project: %v", err))
	}
	return &p, nil
}

// UpdateProject replaces the description and configuration of project name.
func (c *Client) UpdateProject(ctx context.Context, name string, p Project) error {
	w := where{op: "update project " + name}
	_, err := c.do(ctx, w, http.MethodPut, "/1.0/projects/"+url.PathEscape(name), url.Values{"project": {"default"}}, Project{Description: p.Description, Config: p.Config})
	return err
}

// DeleteProject deletes project name, which the daemon refuses while it holds anything
// but its default profile. One that is gone already is not an error.
func (c *Client) DeleteProject(ctx context.Context, name string) error {
	w := where{op: "delete project " + name}
	_, err := c.do(ctx, w, http.MethodDelete, "/1.0/projects/"+url.PathEscape(name), url.Values{"project": {"default"}}, nil)
	if IsNotFound(err) {
		return nil
	}
	return err
}

// Profile is an Incus profile of the client's project.
type Profile struct {
	Name        string                       `json:"name,omitempty"`
	Description string                       `json:"description"`
	Config      map[string]string            `json:"config"`
	Devices     map[string]map[string]string `json:"devices"`
}

// GetProfile reads profile name of the client's project.
func (c *Client) GetProfile(ctx context.Context, name string) (*Profile, error) {
	w := where{op: "get profile " + name}
	r, err := c.do(ctx, w, http.MethodGet, "/1.0/profiles/"+url.PathEscape(name), nil, nil)
	if err != nil {
		return nil, err
	}
	var p Profile
	if err := json.Unmarshal(r.Metadata, &p); err != nil {
		return nil, c.apiErr(w, 0, fmt.Sprintf("malformed profile: %v", err))
	}
	return &p, nil
}

// UpdateProfile replaces the description, configuration and devices of profile name
// of the client's project.
func (c *Client) UpdateProfile(ctx context.Context, name string, p Profile) error {
	w := where{op: "update profile " + name}
	if p.Config == nil {
		p.Config = map[string]string{}
	}
	if p.Devices == nil {
		p.Devices = map[string]map[string]string{}
	}
	_, err := c.do(ctx, w, http.MethodPut, "/1.0/profiles/"+url.PathEscape(name), nil, Profile{Description: p.Description, Config: p.Config, Devices: p.Devices})
	return err
}
