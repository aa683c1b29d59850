package image

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
)

// endpoint is a registry address as the operator wrote it, and how it may be spoken to.
//
// go-containerregistry, left alone, falls back from HTTPS to plain HTTP for loopback
// and private addresses, and it would send basic credentials over that HTTP. The rules
// here are stricter, and the guard below enforces them on every request, the ping and
// the token exchange included:
//   - `https://host` means TLS only, whatever the address;
//   - `http://host` is allowed only for a loopback host, or with registry_insecure;
//   - no scheme: TLS, with plain HTTP after it only for a loopback host or with
//     registry_insecure;
//   - credentials from REGISTRY_AUTH_FILE are never sent over plain HTTP: a registry
//     they are configured for is spoken to over TLS only.
type endpoint struct {
	host      string // host[:port][/prefix], no scheme
	scheme    string // "https", "http" or "" as written
	plainHTTP bool   // plain HTTP may be used for requests without credentials
}

func parseRegistry(s string, insecure bool) (endpoint, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return endpoint{}, ErrNoRegistry
	}
	var ep endpoint
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		switch scheme {
		case "https", "http":
			ep.scheme, s = scheme, rest
		default:
			return endpoint{}, fmt.Errorf("%s %q: the scheme %q is not one a registry speaks; write https://host, or host[:port] with no scheme", RegistryEnv, s, scheme)
		}
	}
	ep.host = strings.TrimSuffix(s, "/")
	if ep.host == "" {
		return endpoint{}, ErrNoRegistry
	}
	loopback := isLoopback(ep.host)
	switch ep.scheme {
	case "https":
		ep.plainHTTP = false
	case "http":
		if !loopback && !insecure {
			return endpoint{}, fmt.Errorf("%s %q asks for plain HTTP to a registry that is not on loopback: set registry_insecure = true in the provider block to allow that, or use https://", RegistryEnv, "http://"+ep.host)
		}
		ep.plainHTTP = true
	default:
		ep.plainHTTP = loopback || insecure
	}
	return ep, nil
}

// isLoopback: localhost, or an IP address in 127.0.0.0/8 or ::1, with or without a port.
func isLoopback(hostPath string) bool {
	host := strings.SplitN(hostPath, "/", 2)[0]
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// PlainHTTPError is a request the rules above do not allow over plain HTTP. It never
// holds a credential.
type PlainHTTPError struct {
	Host        string
	Credentials bool  // refused because the auth file holds credentials for the registry
	TLSErr      error // why HTTPS failed, when a TLS request was tried first
}

func (e *PlainHTTPError) Error() string {
	why := "HTTPS to it failed"
	if e.TLSErr != nil {
		why += " (" + e.TLSErr.Error() + ")"
	}
	if e.Credentials {
		return fmt.Sprintf("refused to speak plain HTTP to the registry %s: REGISTRY_AUTH_FILE holds credentials for it, and they are only ever sent over TLS. "+
			"%s; serve it over HTTPS with a certificate this machine trusts, or remove its entry from the auth file", e.Host, why)
	}
	return fmt.Sprintf("refused to speak plain HTTP to the registry %s: plain HTTP is allowed only for a loopback registry written without https://, or with registry_insecure = true. "+
		"%s; check that the registry serves TLS with a certificate this machine trusts", e.Host, why)
}

// guard is the HTTP transport of every registry call: it refuses the requests the rules
// do not allow before they leave the machine.
type guard struct {
	next        http.RoundTripper
	plainHTTP   bool
	credentials bool

	mu     sync.Mutex
	tlsErr error // the last failure of a TLS request, for the refusal's message
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		if !g.plainHTTP || req.Header.Get("Authorization") != "" {
			g.mu.Lock()
			defer g.mu.Unlock()
			return nil, &PlainHTTPError{Host: req.URL.Host, Credentials: g.credentials || req.Header.Get("Authorization") != "", TLSErr: g.tlsErr}
		}
		return g.next.RoundTrip(req)
	}
	resp, err := g.next.RoundTrip(req)
	if err != nil {
		g.mu.Lock()
		g.tlsErr = err
		g.mu.Unlock()
	}
	return resp, err
}
