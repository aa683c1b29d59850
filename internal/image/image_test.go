package image

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// writeArchive writes a random one-layer image as a docker-archive, the same format a
// Nix-built node image has, and returns its path and image.
func writeArchive(t *testing.T) (string, v1.Image) {
	t.Helper()
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "node.tar")
	tag, _ := name.NewTag("fediversity.local/node:build")
	if err := tarball.WriteToFile(p, tag, img); err != nil {
		t.Fatal(err)
	}
	return p, img
}

// startRegistry serves a real in-memory OCI registry on 127.0.0.1 over plain HTTP. When
// user is set, every request must carry HTTP basic credentials user:pass.
func startRegistry(t *testing.T, user, pass string) (host string, requests *atomic.Int64) {
	t.Helper()
	r := serveRegistry(t, user, pass, false)
	return r.host, &r.requests
}

type testRegistry struct {
	host string
	// requests counts every request; withAuth those that carried an Authorization header.
	requests, withAuth atomic.Int64
	// client trusts the TLS registry's certificate (nil for plain HTTP).
	client http.RoundTripper
}

func serveRegistry(t *testing.T, user, pass string, useTLS bool) *testRegistry {
	t.Helper()
	r := &testRegistry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	wrapped := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		if req.Header.Get("Authorization") != "" {
			r.withAuth.Add(1)
		}
		if user != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, req)
	})
	var srv *httptest.Server
	if useTLS {
		srv = httptest.NewTLSServer(wrapped)
		r.client = srv.Client().Transport
	} else {
		srv = httptest.NewServer(wrapped)
	}
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(strings.TrimPrefix(srv.URL, "http://"), "https://")
	return r
}

func TestPushNamesRepositoryAndDigest(t *testing.T) {
	host, _ := startRegistry(t, "", "")
	archive, img := writeArchive(t)
	want, _ := img.Digest()

	res, err := Push(context.Background(), archive, Target{Registry: host, Namespace: "fediversity", Node: "web01", Tag: "v1"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Repository != host+"/fediversity/web01" {
		t.Errorf("repository = %q, want %q", res.Repository, host+"/fediversity/web01")
	}
	if res.Digest != want.String() {
		t.Errorf("digest = %s, want %s", res.Digest, want)
	}
	if res.ImageRef != res.Repository+"@"+want.String() {
		t.Errorf("image_ref = %s", res.ImageRef)
	}
	got, err := Head(context.Background(), Target{Registry: host, Namespace: "fediversity", Node: "web01", Tag: "v1"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != want.String() {
		t.Errorf("HEAD digest = %s, want %s", got.Digest, want)
	}
}

func TestHeadMissingTag(t *testing.T) {
	host, _ := startRegistry(t, "", "")
	_, err := Head(context.Background(), Target{Registry: host, Namespace: "ns", Node: "n", Tag: "nope"}, Options{})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

// Credentials go over TLS, and a registry that wants them refuses anonymous and wrong ones.
func TestPushWithAuthFileOverTLS(t *testing.T) {
	reg := serveRegistry(t, "robot", "s3cret", true)
	archive, _ := writeArchive(t)
	tgt := Target{Registry: reg.host, Namespace: "ns", Node: "n1", Tag: "t"}
	o := Options{Transport: reg.client}

	if _, err := Push(context.Background(), archive, tgt, o); err == nil {
		t.Fatal("anonymous push to a registry that wants credentials succeeded")
	}

	o.AuthFile = writeAuth(t, reg.host, "robot:wrong")
	_, err := Push(context.Background(), archive, tgt, o)
	if err == nil {
		t.Fatal("push with wrong credentials succeeded")
	}
	if strings.Contains(err.Error(), "wrong") || strings.Contains(err.Error(), base64.StdEncoding.EncodeToString([]byte("robot:wrong"))) {
		t.Errorf("error leaks the credential: %v", err)
	}

	o.AuthFile = writeAuth(t, "https://"+reg.host, "robot:s3cret")
	if _, err := Push(context.Background(), archive, tgt, o); err != nil {
		t.Fatalf("push with credentials: %v", err)
	}
	tgt.Registry = "https://" + reg.host
	if _, err := Push(context.Background(), archive, tgt, o); err != nil {
		t.Fatalf("push with credentials to https://%s: %v", reg.host, err)
	}
}

// A push with credentials to a registry whose HTTPS fails (a plain-HTTP registry on
// loopback, where go-containerregistry would fall back to HTTP) is refused: no request
// with the credentials, and no plain-HTTP request at all, reaches the registry.
func TestPushWithCredentialsNeverDowngrades(t *testing.T) {
	reg := serveRegistry(t, "robot", "s3cret", false)
	archive, _ := writeArchive(t)
	auth := writeAuth(t, reg.host, "robot:s3cret")
	for _, written := range []string{reg.host, "https://" + reg.host} {
		for _, insecure := range []bool{false, true} {
			_, err := Push(context.Background(), archive, Target{Registry: written, Insecure: insecure, Namespace: "ns", Node: "n", Tag: "t"}, Options{AuthFile: auth})
			var herr *PlainHTTPError
			if !errors.As(err, &herr) || !herr.Credentials || !strings.Contains(err.Error(), "only ever sent over TLS") {
				t.Fatalf("registry %q insecure=%v: err = %v, want a refusal of plain HTTP for credentials", written, insecure, err)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), base64.StdEncoding.EncodeToString([]byte("robot:s3cret"))) {
				t.Errorf("error leaks the credential: %v", err)
			}
		}
	}
	_, err := Push(context.Background(), archive, Target{Registry: "http://" + reg.host, Namespace: "ns", Node: "n", Tag: "t"}, Options{AuthFile: auth})
	if err == nil || !strings.Contains(err.Error(), "only ever sent over TLS") {
		t.Fatalf("http:// with credentials: err = %v", err)
	}
	if n := reg.requests.Load(); n != 0 {
		t.Fatalf("the plain-HTTP registry saw %d requests (%d with credentials); want none", n, reg.withAuth.Load())
	}
}

// https:// means TLS only, also for a loopback registry without credentials.
func TestHTTPSMeansTLSOnly(t *testing.T) {
	reg := serveRegistry(t, "", "", false)
	archive, _ := writeArchive(t)
	_, err := Push(context.Background(), archive, Target{Registry: "https://" + reg.host, Namespace: "ns", Node: "n", Tag: "t"}, Options{})
	var herr *PlainHTTPError
	if !errors.As(err, &herr) || herr.Credentials {
		t.Fatalf("err = %v, want a refusal of plain HTTP", err)
	}
	if n := reg.requests.Load(); n != 0 {
		t.Fatalf("the plain-HTTP registry saw %d requests", n)
	}
	// Without a scheme, a loopback registry may be plain HTTP (the lab's and the tests').
	if _, err := Push(context.Background(), archive, Target{Registry: reg.host, Namespace: "ns", Node: "n", Tag: "t"}, Options{}); err != nil {
		t.Fatalf("anonymous push to a loopback registry over HTTP: %v", err)
	}
}

func TestParseRegistry(t *testing.T) {
	cases := []struct {
		in        string
		insecure  bool
		host      string
		plainHTTP bool
		err       string
	}{
		{"registry.example.org", false, "registry.example.org", false, ""},
		{"https://registry.example.org/prefix/", false, "registry.example.org/prefix", false, ""},
		{"10.0.0.5:5000", false, "10.0.0.5:5000", false, ""}, // private is not loopback: TLS
		{"10.0.0.5:5000", true, "10.0.0.5:5000", true, ""},
		{"http://10.0.0.5:5000", false, "", false, "registry_insecure"},
		{"http://10.0.0.5:5000", true, "10.0.0.5:5000", true, ""},
		{"127.0.0.1:5000", false, "127.0.0.1:5000", true, ""},
		{"localhost:5000/x", false, "localhost:5000/x", true, ""},
		{"[::1]:5000", false, "[::1]:5000", true, ""},
		{"http://127.0.0.1:5000", false, "127.0.0.1:5000", true, ""},
		{"https://127.0.0.1:5000", true, "127.0.0.1:5000", false, ""},
		{"ftp://r", false, "", false, "scheme"},
		{"", false, "", false, "K8S_REGISTRY"},
	}
	for _, c := range cases {
		ep, err := parseRegistry(c.in, c.insecure)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err = %v, want one with %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || ep.host != c.host || ep.plainHTTP != c.plainHTTP {
			t.Errorf("%q insecure=%v: got %+v, %v; want host %q plainHTTP %v", c.in, c.insecure, ep, err, c.host, c.plainHTTP)
		}
	}
}

func writeAuth(t *testing.T, host, userpass string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "auth.json")
	body := `{"auths":{"` + host + `":{"auth":"` + base64.StdEncoding.EncodeToString([]byte(userpass)) + `"}}}`
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPushUnreachableRegistryFails(t *testing.T) {
	// A closed loopback port: listen, note the address, close.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	archive, _ := writeArchive(t)
	_, err = Push(context.Background(), archive, Target{Registry: addr, Namespace: "ns", Node: "n", Tag: "t"}, Options{})
	if err == nil {
		t.Fatal("push to a closed port succeeded")
	}
	if !strings.Contains(err.Error(), "K8S_REGISTRY") {
		t.Errorf("error does not tell what to check: %v", err)
	}
}

func TestNoRegistryNamesEnv(t *testing.T) {
	archive, _ := writeArchive(t)
	_, err := Push(context.Background(), archive, Target{Namespace: "ns", Node: "n", Tag: "t"}, Options{})
	if !errors.Is(err, ErrNoRegistry) || !strings.Contains(err.Error(), "K8S_REGISTRY") {
		t.Fatalf("err = %v, want one naming K8S_REGISTRY", err)
	}
}

func TestPushRejectsNonArchive(t *testing.T) {
	host, n := startRegistry(t, "", "")
	p := filepath.Join(t.TempDir(), "not.tar")
	if err := os.WriteFile(p, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Push(context.Background(), p, Target{Registry: host, Namespace: "ns", Node: "n", Tag: "t"}, Options{})
	if err == nil || !strings.Contains(err.Error(), "docker-archive") {
		t.Fatalf("err = %v", err)
	}
	if n.Load() != 0 {
		t.Errorf("registry saw %d requests for an unreadable archive", n.Load())
	}
}

func TestAuthFromFile(t *testing.T) {
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	nested := `{"auths":{"r.example/ns":{"auth":"` + enc("ns:2") + `"},"https://r.example":{"auth":"` + enc("host:1") +
		`"},"r.example/ns/web01":{"auth":"` + enc("node:3") + `"}}}`
	cases := []struct {
		name, body, registry string
		wantUser, wantPass   string
		wantErr              bool
	}{
		{"exact host", `{"auths":{"r.example:5000":{"auth":"` + enc("u:p") + `"}}}`, "r.example:5000", "u", "p", false},
		{"scheme and path", `{"auths":{"https://r.example/v2/":{"auth":"` + enc("u:p:q") + `"}}}`, "r.example", "u", "p:q", false},
		{"other host is anonymous", `{"auths":{"other":{"auth":"` + enc("u:p") + `"}}}`, "r.example", "", "", false},
		{"not json", `nope`, "r", "", "", true},
		{"bad base64", `{"auths":{"r":{"auth":"%%%"}}}`, "r", "", "", true},
		{"no colon", `{"auths":{"r":{"auth":"` + enc("user") + `"}}}`, "r", "", "", true},
		{"longest path prefix wins", nested, "r.example/ns/web01", "node", "3", false},
		{"namespace entry", nested, "r.example/ns/web02", "ns", "2", false},
		{"host entry for the rest", nested, "r.example/other/web01", "host", "1", false},
		{"a path matches at a / only", `{"auths":{"r.example/n":{"auth":"` + enc("u:p") + `"}}}`, "r.example/ns/web01", "", "", false},
		{"an entry for another path of the host", `{"auths":{"r.example/team-b":{"auth":"` + enc("u:p") + `"}}}`, "r.example/team-a/web01", "", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "a.json")
			if err := os.WriteFile(p, []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
			a, err := AuthFromFile(p, c.registry)
			if c.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				if strings.Contains(err.Error(), "auths") && strings.Contains(err.Error(), enc("user")) {
					t.Errorf("error leaks content: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg, _ := a.Authorization()
			if cfg.Username != c.wantUser || cfg.Password != c.wantPass {
				t.Errorf("got %q/%q", cfg.Username, cfg.Password)
			}
		})
	}
}

// Two entries naming the same registry (with and without a scheme): the one sent must
// not depend on Go's map order. Many reads must all pick the same.
func TestAuthFromFileIsDeterministic(t *testing.T) {
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	p := filepath.Join(t.TempDir(), "a.json")
	body := `{"auths":{"r.example":{"auth":"` + enc("plain:1") + `"},"https://r.example":{"auth":"` + enc("scheme:2") +
		`"},"http://r.example/":{"auth":"` + enc("http:3") + `"},"r.example/v2/":{"auth":"` + enc("v2:4") + `"}}}`
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 200 {
		a, err := AuthFromFile(p, "r.example/ns/web01")
		if err != nil {
			t.Fatal(err)
		}
		cfg, _ := a.Authorization()
		seen[cfg.Username] = true
	}
	if len(seen) != 1 {
		t.Fatalf("200 reads of one auth file sent the credentials of %d different entries: %v", len(seen), seen)
	}
}

func FuzzAuthFromFile(f *testing.F) {
	f.Add([]byte(`{"auths":{"r":{"auth":"dTpw"}}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p := filepath.Join(t.TempDir(), "a.json")
		if err := os.WriteFile(p, body, 0o600); err != nil {
			t.Fatal(err)
		}
		_, _ = AuthFromFile(p, "r")
	})
}
