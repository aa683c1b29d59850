// Package image pushes node images to an OCI registry for the k8s method
// (docs/kubernetes.md#k8s) and checks that a pushed tag still exists.
//
// A node image is a docker-archive: the tarball `docker save` writes and that a Nix
// image builder (dockerTools.buildImage) produces. It is read with go-containerregistry's
// tarball package and written to <registry>/<namespace>/<node>:<tag>. The digest the
// registry holds for that tag is cross-checked with a HEAD after the push and returned, so
// the Deployment can name the image by digest and a later re-tag changes no pod.
//
// Credentials come from a containers auth JSON file (REGISTRY_AUTH_FILE, the format of
// podman/skopeo: {"auths":{"host":{"auth":"base64(user:pass)"}}}). They are parsed here,
// kept in memory only, and never logged, returned or put in an error message.
//
// The scheme the operator wrote is kept (see registry.go): `https://` means TLS only;
// plain HTTP is used only for a loopback registry or with Insecure set, and never when
// the auth file holds credentials for the registry.
//
// This package must not import the plugin framework.
package image

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// RegistryEnv is the environment variable that names the registry.
const RegistryEnv = "K8S_REGISTRY"

// ErrNoRegistry is returned when no registry address was given.
var ErrNoRegistry = errors.New("no registry is set: set " + RegistryEnv + " (or the provider's k8s_registry) to the registry host, e.g. registry.example.org or 127.0.0.1:5000")

// ErrNotFound is returned by Head when the registry does not hold the tag.
var ErrNotFound = errors.New("tag not found in the registry")

// Target says where an image goes.
type Target struct {
	Registry string // [https://|http://]host[:port][/prefix], as the operator wrote it
	// Insecure allows plain HTTP to a registry that is not on loopback (registry_insecure).
	Insecure  bool
	Namespace string
	Node      string
	Tag       string
}

// Repository is <registry>/<namespace>/<node>.
func (t Target) Repository() (string, error) {
	repo, _, err := t.repository()
	return repo, err
}

func (t Target) repository() (string, endpoint, error) {
	ep, err := parseRegistry(t.Registry, t.Insecure)
	if err != nil {
		return "", ep, err
	}
	if t.Namespace == "" || t.Node == "" {
		return "", ep, fmt.Errorf("namespace and node must both be set (got namespace %q, node %q)", t.Namespace, t.Node)
	}
	repo := ep.host + "/" + t.Namespace + "/" + t.Node
	if _, err := name.NewRepository(repo); err != nil {
		return "", ep, fmt.Errorf("invalid repository %q: %w", repo, err)
	}
	return repo, ep, nil
}

func (t Target) tagRef() (name.Tag, endpoint, error) {
	repo, ep, err := t.repository()
	if err != nil {
		return name.Tag{}, ep, err
	}
	if t.Tag == "" {
		return name.Tag{}, ep, errors.New("tag must be set")
	}
	var opts []name.Option
	if ep.plainHTTP {
		// Lets go-containerregistry try HTTP after HTTPS; the guard in remoteOptions
		// still decides whether an HTTP request may go out.
		opts = append(opts, name.Insecure)
	}
	tag, err := name.NewTag(repo+":"+t.Tag, opts...)
	return tag, ep, err
}

// Options are the per-run values of a push.
type Options struct {
	// AuthFile is a containers auth JSON file; empty means anonymous.
	AuthFile string
	// Transport overrides the HTTP transport (tests); nil means the default.
	Transport http.RoundTripper
}

// Result of a push.
type Result struct {
	Repository string // <registry>/<namespace>/<node>
	Digest     string // sha256:…
	ImageRef   string // <repository>@<digest>
}

// Push reads the docker-archive at archive and writes it to the target's tag. It returns
// the digest the registry holds for the tag after the push.
func Push(ctx context.Context, archive string, t Target, o Options) (Result, error) {
	img, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		return Result{}, fmt.Errorf("read docker-archive %s: %w (a docker-archive holding exactly one image is expected, as `docker save` or dockerTools.buildImage write it)", archive, err)
	}
	want, err := img.Digest()
	if err != nil {
		return Result{}, fmt.Errorf("compute the digest of %s: %w", archive, err)
	}
	return write(ctx, img, want, t, o)
}

// write pushes img (whose digest is want) to the target's tag and cross-checks it.
func write(ctx context.Context, img v1.Image, want v1.Hash, t Target, o Options) (Result, error) {
	ref, ep, err := t.tagRef()
	if err != nil {
		return Result{}, err
	}
	opts, err := remoteOptions(ctx, ref.Context(), ep, o)
	if err != nil {
		return Result{}, err
	}
	if err := remote.Write(ref, img, opts...); err != nil {
		return Result{}, fmt.Errorf("push %s: %w", ref.String(), describe(err))
	}
	desc, err := remote.Head(ref, opts...)
	if err != nil {
		return Result{}, fmt.Errorf("check %s after the push: %w", ref.String(), describe(err))
	}
	if desc.Digest != want {
		return Result{}, fmt.Errorf("registry holds %s for %s after the push, but the pushed image is %s: another writer raced this push", desc.Digest, ref.String(), want)
	}
	return result(ref, desc.Digest), nil
}

// Head returns the digest the registry holds for the target's tag, or ErrNotFound.
func Head(ctx context.Context, t Target, o Options) (Result, error) {
	ref, ep, err := t.tagRef()
	if err != nil {
		return Result{}, err
	}
	opts, err := remoteOptions(ctx, ref.Context(), ep, o)
	if err != nil {
		return Result{}, err
	}
	desc, err := remote.Head(ref, opts...)
	if err != nil {
		var terr *transport.Error
		if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
			return Result{}, ErrNotFound
		}
		return Result{}, fmt.Errorf("check %s: %w", ref.String(), describe(err))
	}
	return result(ref, desc.Digest), nil
}

func result(ref name.Tag, d v1.Hash) Result {
	repo := ref.Context().Name()
	return Result{Repository: repo, Digest: d.String(), ImageRef: repo + "@" + d.String()}
}

func remoteOptions(ctx context.Context, repo name.Repository, ep endpoint, o Options) ([]remote.Option, error) {
	auth := authn.Anonymous
	if o.AuthFile != "" {
		a, err := AuthFromFile(o.AuthFile, repo.Name())
		if err != nil {
			return nil, err
		}
		auth = a
	}
	g := &guard{next: o.Transport, plainHTTP: ep.plainHTTP}
	if g.next == nil {
		g.next = remote.DefaultTransport
	}
	if auth != authn.Anonymous {
		if ep.scheme == "http" {
			return nil, fmt.Errorf("%s asks for plain HTTP, but REGISTRY_AUTH_FILE holds credentials for %s, and credentials are only ever sent over TLS: serve the registry over HTTPS and write https:// (or no scheme), or remove its entry from the auth file", RegistryEnv, repo.RegistryStr())
		}
		g.plainHTTP, g.credentials = false, true
	}
	opts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuth(auth),
		remote.WithTransport(g),
		// A few quick retries: an unreachable registry must fail the push within seconds.
		remote.WithRetryBackoff(remote.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 3}),
	}
	return opts, nil
}

// describe adds what the operator can do to common transport failures, without echoing
// anything that could hold a credential.
func describe(err error) error {
	var herr *PlainHTTPError
	if errors.As(err, &herr) {
		return herr
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%w (the registry refused the credentials: check the entry for this registry in REGISTRY_AUTH_FILE)", err)
		}
		return err
	}
	msg := err.Error()
	if strings.Contains(msg, "connection refused") || strings.Contains(msg, "no such host") || strings.Contains(msg, "i/o timeout") {
		return fmt.Errorf("%w (the registry is not reachable from this machine: check K8S_REGISTRY)", err)
	}
	return err
}

// authFile is the containers auth JSON format (containers-auth.json(5)).
type authFile struct {
	Auths map[string]struct {
		Auth string `json:"auth"`
	} `json:"auths"`
}

// AuthFromFile returns the credentials for repository (host[:port][/path…], e.g.
// registry.example.org/ns/web01) from a containers auth JSON file. As
// containers-auth.json(5) says, the most specific entry wins: an entry is a host, or a
// host with a path that must be a prefix of the repository at a "/" boundary, and the
// longest that matches is taken (a scheme and a Docker-style "/v1/" or "/v2/" suffix
// are ignored). Entries that name the same place are taken in key order, so the choice
// never depends on map order. A file without an entry for the repository means
// anonymous access. Errors never hold the file's content.
func AuthFromFile(path, repository string) (authn.Authenticator, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read registry auth file (REGISTRY_AUTH_FILE) %s: %w", path, err)
	}
	var f authFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("registry auth file (REGISTRY_AUTH_FILE) %s is not containers auth JSON ({\"auths\":{\"host\":{\"auth\":\"base64(user:pass)\"}}})", path)
	}
	keys := make([]string, 0, len(f.Auths))
	for key := range f.Auths {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	best, bestLen := "", -1
	for _, key := range keys {
		place := authEntryPlace(key)
		if place == "" || (repository != place && !strings.HasPrefix(repository, place+"/")) {
			continue
		}
		if len(place) > bestLen {
			best, bestLen = key, len(place)
		}
	}
	if bestLen < 0 {
		return authn.Anonymous, nil
	}
	dec, err := base64.StdEncoding.DecodeString(f.Auths[best].Auth)
	if err != nil {
		return nil, fmt.Errorf("registry auth file %s: the entry for %s has an \"auth\" value that is not base64", path, best)
	}
	user, pass, ok := strings.Cut(string(dec), ":")
	if !ok || user == "" {
		return nil, fmt.Errorf("registry auth file %s: the entry for %s does not decode to user:password", path, best)
	}
	return &authn.Basic{Username: user, Password: pass}, nil
}

// authEntryPlace is what an auth file key names: host[:port][/path], without a scheme,
// a trailing "/" or a Docker-style API version suffix ("https://r.example/v2/" is the
// host r.example).
func authEntryPlace(key string) string {
	place := strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	place = strings.TrimRight(place, "/")
	if host, rest, ok := strings.Cut(place, "/"); ok && (rest == "v1" || rest == "v2") {
		place = host
	}
	return place
}
