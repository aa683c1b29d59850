package incusapi

// Images the provider makes itself (fediversity_incus_image): upload a unified image
// tarball, name it with an alias, and delete both again.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// ErrImageExists is what ImportImage returns when the daemon already holds an image
// with the uploaded tarball's fingerprint (it reads the whole upload before it can
// tell).
var ErrImageExists = errors.New("the daemon already holds an image with this fingerprint")

// ImportImage uploads a unified image tarball (metadata.yaml and rootfs/ in one,
// compressed or not) as the body of POST /1.0/images and waits for the daemon to unpack
// it. It returns the fingerprint the daemon gave it. The body is streamed, and read
// once: the request is never retried. When fingerprint is not empty it is sent as the
// fingerprint the daemon must compute (X-Incus-fingerprint), and an image the daemon
// already holds with it is ErrImageExists.
func (c *Client) ImportImage(ctx context.Context, body io.Reader, fingerprint string) (string, error) {
	w := where{op: "image import"}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url("/1.0/images", nil), body)
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if fingerprint != "" {
		req.Header.Set("X-Incus-fingerprint", fingerprint)
	}
	r, err := c.send(w, req)
	if err != nil {
		return "", err
	}
	op, err := c.asyncOp(w, r)
	if err != nil {
		return "", err
	}
	done, err := c.waitOp(ctx, w, op.ID, opTimeout(ctx))
	if err != nil {
		var ae *APIError
		if errors.As(c.forgotten(w, op, err), &ae) && strings.Contains(ae.Message, "same fingerprint already exists") {
			return fingerprint, ErrImageExists
		}
		return "", c.forgotten(w, op, err)
	}
	var fp string
	if raw, ok := done.Metadata["fingerprint"]; ok {
		_ = json.Unmarshal(raw, &fp)
	}
	if fp == "" {
		return "", c.apiErr(w, 0, "the import finished without naming the image's fingerprint")
	}
	if fingerprint != "" && fp != fingerprint {
		return "", c.apiErr(w, 0, fmt.Sprintf("the daemon made image %s of an upload whose fingerprint is %s", fp, fingerprint))
	}
	return fp, nil
}

// ImageAlias is an alias of an image.
type ImageAlias struct {
	Name        string `json:"name"`
	Target      string `json:"target"` // the image's fingerprint
	Description string `json:"description"`
}

// GetImageAlias reads alias name (a not-found *APIError when there is none).
func (c *Client) GetImageAlias(ctx context.Context, name string) (*ImageAlias, error) {
	w := where{op: "get image alias " + name}
	r, err := c.do(ctx, w, http.MethodGet, "/1.0/images/aliases/"+url.PathEscape(name), nil, nil)
	if err != nil {
		return nil, err
	}
	var a ImageAlias
	if err := json.Unmarshal(r.Metadata, &a); err != nil || a.Target == "" {
		return nil, c.apiErr(w, 0, fmt.Sprintf("malformed image alias %q", name))
	}
	if a.Name == "" {
		a.Name = name
	}
	return &a, nil
}

// CreateImageAlias names the image whose fingerprint is target with alias name. An
// alias that exists already is a conflict *APIError, whatever it names.
func (c *Client) CreateImageAlias(ctx context.Context, name, target, description string) error {
	w := where{op: "create image alias " + name}
	_, err := c.do(ctx, w, http.MethodPost, "/1.0/images/aliases", nil, ImageAlias{Name: name, Target: target, Description: description})
	return err
}

// DeleteImageAlias deletes alias name; one that is gone already is not an error.
func (c *Client) DeleteImageAlias(ctx context.Context, name string) error {
	w := where{op: "delete image alias " + name}
	_, err := c.do(ctx, w, http.MethodDelete, "/1.0/images/aliases/"+url.PathEscape(name), nil, nil)
	if IsNotFound(err) {
		return nil
	}
	return err
}

// DeleteImage deletes the image with fingerprint fp (its aliases go with it); one that
// is gone already is not an error. Instances made from it keep running: their root
// file systems are their own.
func (c *Client) DeleteImage(ctx context.Context, fp string) error {
	w := where{op: "delete image " + fp}
	_, err := c.runAsync(ctx, w, http.MethodDelete, "/1.0/images/"+url.PathEscape(fp), nil, nil, opTimeout(ctx))
	if IsNotFound(err) {
		return nil
	}
	return err
}
