// Package incusapi is a small REST client for the few Incus endpoints the provider
// needs: instances and their state, exec (with recorded output, or streamed over the
// operation's websockets), files, snapshots and operations. It speaks to incusd over
// its unix socket or over HTTPS with a client certificate and a pinned server
// certificate.
//
// It exists because the module github.com/lxc/incus is not available to this project.
// It uses only the standard library (its own small websocket client is in
// websocket.go), and it must not import the plugin framework or any transport package.
package incusapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// DefaultSocket is where incusd listens when INCUS_SOCKET is not set.
const DefaultSocket = "/var/lib/incus/unix.socket"

// Limits on what the client reads from the daemon. A response larger than these is an
// error rather than an unbounded allocation.
const (
	// MaxJSONResponse bounds one JSON response body.
	MaxJSONResponse = 8 << 20
	// DefaultMaxOutput bounds each of stdout and stderr of one exec.
	DefaultMaxOutput = 16 << 20
	// DefaultMaxFile bounds a file pulled with PullFile when no limit is given.
	DefaultMaxFile = 64 << 20
)

// Client talks to one Incus daemon. It is safe for concurrent use. The zero value is
// not usable: make one with NewUnix, NewFromEnv or NewHTTPS.
type Client struct {
	hc      *http.Client
	spares  *spareConns // accepted connections for websocket handshakes (spares.go)
	base    string      // scheme://host, no trailing slash
	project string      // "" means the daemon's default project
	// MaxOutput bounds each of an exec's stdout and stderr (DefaultMaxOutput when 0).
	MaxOutput int64
	// OnSlow, if set, hears of every retried call that took longer than SlowCall in
	// all (the daemon stalled); the provider logs it.
	OnSlow func(op string, took time.Duration)
}

// NewUnix returns a client for the daemon on the unix socket at path.
func NewUnix(path string) (*Client, error) {
	if path == "" {
		path = DefaultSocket
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("incus: socket %s: %w (is incusd running? set INCUS_SOCKET to its socket)", path, err)
	}
	tr := &http.Transport{
		// Lazily: a connection the Transport dials and then does not use must not hold
		// the daemon's accept loop (lazyconn.go).
		DialContext: dialUnixLazily(path),
		// Connections kept open for the next requests: a request on an open connection
		// is served while incusd's accept loop waits on another client's silent one.
		MaxIdleConns:          16,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 0, // operation waits hold the response; ctx bounds them
		DisableCompression:    true,
	}
	spares := newSpareConns("incus", func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	})
	return &Client{hc: &http.Client{Transport: tr}, base: "http://incus", spares: spares}, nil
}

// NewFromEnv returns a client for the unix socket named by INCUS_SOCKET, or
// DefaultSocket when it is not set.
func NewFromEnv() (*Client, error) {
	return NewUnix(os.Getenv("INCUS_SOCKET"))
}

// HTTPSConfig says how to reach a daemon over HTTPS.
type HTTPSConfig struct {
	// URL is the daemon's address, e.g. https://127.0.0.1:8443.
	URL string
	// ClientCertFile and ClientKeyFile are the PEM client certificate and key the
	// daemon trusts.
	ClientCertFile string
	ClientKeyFile  string
	// ServerCertFile is the daemon's own certificate (PEM). The connection is accepted
	// only when the server presents exactly this certificate; no CA is consulted.
	ServerCertFile string
}

// NewHTTPS returns a client for a daemon reached over HTTPS with a client certificate
// and a pinned server certificate.
func NewHTTPS(cfg HTTPSConfig) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("incus: remote URL %q: want https://host:port", cfg.URL)
	}
	if cfg.ClientCertFile == "" || cfg.ClientKeyFile == "" {
		return nil, errors.New("incus: HTTPS needs a client certificate and key file")
	}
	pair, err := tls.LoadX509KeyPair(cfg.ClientCertFile, cfg.ClientKeyFile)
	if err != nil {
		return nil, fmt.Errorf("incus: client certificate %s / key: %w", cfg.ClientCertFile, err)
	}
	pinned, err := readCertDER(cfg.ServerCertFile)
	if err != nil {
		return nil, err
	}
	tcfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pair},
		// Chain verification is replaced by an exact comparison with the pinned
		// certificate below; no system or other CA is ever consulted.
		InsecureSkipVerify: true, //nolint:gosec // see VerifyPeerCertificate
		RootCAs:            x509.NewCertPool(),
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyPinned(raw, pinned)
		},
	}
	tr := &http.Transport{
		TLSClientConfig:     tcfg,
		TLSHandshakeTimeout: 15 * time.Second,
		MaxIdleConns:        4,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		Proxy:               nil,
	}
	spares := newSpareConns(u.Host, func(ctx context.Context) (net.Conn, error) {
		d := tls.Dialer{Config: tcfg}
		return d.DialContext(ctx, "tcp", u.Host)
	})
	return &Client{hc: &http.Client{Transport: tr}, base: "https://" + u.Host, spares: spares}, nil
}

func readCertDER(path string) ([]byte, error) {
	if path == "" {
		return nil, errors.New("incus: HTTPS needs the server certificate file to pin")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("incus: server certificate: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("incus: server certificate %s: no PEM CERTIFICATE block", path)
	}
	if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
		return nil, fmt.Errorf("incus: server certificate %s: %w", path, err)
	}
	return blk.Bytes, nil
}

func verifyPinned(raw [][]byte, pinned []byte) error {
	if len(raw) == 0 {
		return errors.New("incus: server presented no certificate")
	}
	if !bytes.Equal(raw[0], pinned) {
		return errors.New("incus: server certificate does not match the pinned certificate (check the remote's server certificate)")
	}
	return nil
}

// WithProject returns a client that addresses project p (the daemon's default project
// when p is ""). The two clients share their connections.
func (c *Client) WithProject(p string) *Client {
	cp := *c
	cp.project = p
	return &cp
}

// Project is the project this client addresses ("" for the default).
func (c *Client) Project() string { return c.project }

// APIError is an error the daemon answered, or a failed operation, with what it was
// about.
type APIError struct {
	StatusCode int    // HTTP status, or the operation's status code
	Message    string // the daemon's own error text
	Instance   string // the instance concerned, if any
	Project    string // the project addressed ("" = default)
	Op         string // what the client was doing, e.g. "exec", "snapshot create"
}

func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString(subject(e.Op, e.Instance, e.Project))
	fmt.Fprintf(&b, ": %d", e.StatusCode)
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// IsNotFound reports whether err is the daemon saying the object does not exist.
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.StatusCode == http.StatusNotFound
}

// response is the envelope of every JSON answer.
type response struct {
	Type      string          `json:"type"`
	Operation string          `json:"operation"`
	ErrorCode int             `json:"error_code"`
	Error     string          `json:"error"`
	Metadata  json.RawMessage `json:"metadata"`
}

// where names what a request is about, for errors.
type where struct {
	op       string
	instance string
}

func (c *Client) url(path string, q url.Values) string {
	if q == nil {
		q = url.Values{}
	}
	if c.project != "" && q.Get("project") == "" {
		q.Set("project", c.project)
	}
	u := c.base + path
	if len(q) > 0 {
		if strings.Contains(path, "?") {
			u += "&" + q.Encode()
		} else {
			u += "?" + q.Encode()
		}
	}
	return u
}

func (c *Client) apiErr(w where, status int, msg string) *APIError {
	return &APIError{StatusCode: status, Message: msg, Instance: w.instance, Project: c.project, Op: w.op}
}

// do sends a JSON request and decodes the envelope. A daemon error becomes *APIError.
func (c *Client) do(ctx context.Context, w where, method, path string, q url.Values, body any) (*response, error) {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return nil, fmt.Errorf("incus %s: encode request: %w", w.op, err)
		}
	}
	attempt := func() (*response, error) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, c.url(path, q), rd)
		if err != nil {
			return nil, fmt.Errorf("incus %s: %w", w.op, err)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		return c.send(w, req)
	}
	if !idempotent(method) {
		return attempt()
	}
	var r *response
	tries := 0
	err := c.retry(ctx, w.op, func() (err error) {
		tries++
		r, err = attempt()
		if method == http.MethodDelete && tries > 1 && IsNotFound(err) {
			// The first DELETE failed in transit, but the daemon may have done it: a
			// later try that finds nothing is our own earlier delete, not a fault.
			r, err = &response{Type: "sync"}, nil
		}
		return err
	})
	return r, err
}

func (c *Client) send(w where, req *http.Request) (*response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportErr(w, err)
	}
	defer func() { _ = resp.Body.Close() }()
	return c.decode(w, resp)
}

// TransportError is a failure to talk to the daemon at all (socket gone, TLS refused,
// context ended).
type TransportError struct {
	Op       string
	Instance string
	Project  string
	Err      error
}

func (e *TransportError) Error() string {
	return subject(e.Op, e.Instance, e.Project) + ": cannot reach the daemon: " + e.Err.Error()
}

func (e *TransportError) Unwrap() error { return e.Err }

func (c *Client) transportErr(w where, err error) error {
	return &TransportError{Op: w.op, Instance: w.instance, Project: c.project, Err: err}
}

func (c *Client) decode(w where, resp *http.Response) (*response, error) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxJSONResponse+1))
	if err != nil {
		return nil, c.transportErr(w, err)
	}
	if len(b) > MaxJSONResponse {
		return nil, c.apiErr(w, resp.StatusCode, fmt.Sprintf("response larger than %d bytes", MaxJSONResponse))
	}
	var r response
	if err := json.Unmarshal(b, &r); err != nil {
		msg := fmt.Sprintf("malformed response (%v): %q", err, truncate(b, 200))
		return nil, c.apiErr(w, resp.StatusCode, msg)
	}
	if r.Type == "error" || resp.StatusCode >= 400 {
		code := r.ErrorCode
		if code == 0 {
			code = resp.StatusCode
		}
		msg := r.Error
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return nil, c.apiErr(w, code, msg)
	}
	return &r, nil
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// Operation is a background operation of the daemon.
type Operation struct {
	ID         string                     `json:"id"`
	Class      string                     `json:"class"`
	Status     string                     `json:"status"`
	StatusCode int                        `json:"status_code"`
	Err        string                     `json:"err"`
	CreatedAt  time.Time                  `json:"created_at"`
	MayCancel  bool                       `json:"may_cancel"`
	Metadata   map[string]json.RawMessage `json:"metadata"`
	Resources  map[string][]string        `json:"resources"`
}

// opSuccess is the status code of an operation that succeeded (Incus api.Success);
// codes from 200 up mean the operation is over (400 failure, 401 cancelled).
const opSuccess = 200

func (o *Operation) done() bool {
	return o.StatusCode >= opSuccess
}

// asyncOp reads the operation an async answer names.
func (c *Client) asyncOp(w where, r *response) (*Operation, error) {
	var op Operation
	if len(r.Metadata) > 0 && string(r.Metadata) != "null" {
		if err := json.Unmarshal(r.Metadata, &op); err != nil {
			return nil, c.apiErr(w, 0, fmt.Sprintf("malformed operation: %v", err))
		}
	}
	if op.ID == "" && r.Operation != "" {
		op.ID = r.Operation[strings.LastIndex(r.Operation, "/")+1:]
	}
	if op.ID == "" {
		return nil, c.apiErr(w, 0, "the daemon answered no operation for an asynchronous request")
	}
	return &op, nil
}

// waitHold is the longest one wait request asks the daemon to hold (a variable so a lab
// test can make an operation span several rounds).
var waitHold = 30 * time.Second

// waitSlack is how long past its hold one wait request may go unanswered before it is
// asked again (a variable so a test of a stalled daemon need not wait 10 s).
var waitSlack = 10 * time.Second

// DefaultOperationTimeout bounds an operation wait when the caller's context has no
// deadline.
const DefaultOperationTimeout = 10 * time.Minute

// WaitOperation waits until operation id is done, for at most timeout (or until ctx
// ends). It asks the daemon to hold each request for a bounded time
// (/1.0/operations/<id>/wait?timeout=N) and asks again while the operation runs.
// A failed or cancelled operation is an *APIError carrying the operation's error text.
func (c *Client) WaitOperation(ctx context.Context, id string, timeout time.Duration) (*Operation, error) {
	return c.waitOp(ctx, where{op: "operation wait"}, id, timeout)
}

func (c *Client) waitOp(ctx context.Context, w where, id string, timeout time.Duration) (*Operation, error) {
	if timeout <= 0 {
		timeout = DefaultOperationTimeout
	}
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// Bounded: each round holds for at most 30 s, and the loop ends at the deadline;
	// the count bound guards against a daemon that returns at once without progress.
	for range 100000 {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		hold := min(left, waitHold)
		secs := int(hold / time.Second)
		if secs < 1 {
			secs = 1
		}
		rctx, cancel := context.WithTimeout(ctx, hold+waitSlack)
		r, err := c.do(rctx, w, http.MethodGet, "/1.0/operations/"+url.PathEscape(id)+"/wait",
			url.Values{"timeout": {fmt.Sprint(secs)}}, nil)
		stalled := errors.Is(rctx.Err(), context.DeadlineExceeded)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, c.transportErr(w, ctx.Err())
		case err != nil && stalled:
			// The daemon did not answer this request within its own bound: a daemon
			// that is busy (CI saw incusd answer nothing for over 10 s while four
			// labs made instances), not one that is gone (that refuses the
			// connection). A wait asks nothing of the daemon, so it is asked again,
			// until the wait's deadline.
		case err != nil && !waitTimedOut(err):
			return nil, err
		case err != nil:
			// incusd answers its own wait timeout with an error ("context deadline
			// exceeded"): the operation is still running; ask again.
		default:
			var op Operation
			if err := json.Unmarshal(r.Metadata, &op); err != nil {
				return nil, c.apiErr(w, 0, fmt.Sprintf("malformed operation: %v", err))
			}
			if op.done() {
				if op.StatusCode == opSuccess {
					return &op, nil
				}
				msg := op.Err
				if msg == "" {
					msg = "operation " + op.Status
				}
				return &op, c.apiErr(w, op.StatusCode, msg)
			}
		}
		// A daemon that answered early without finishing: pause briefly before asking
		// again so a misbehaving server cannot make this a busy loop.
		select {
		case <-ctx.Done():
			return nil, c.transportErr(w, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, &OperationTimeoutError{ID: id, Op: w.op, Instance: w.instance, Project: c.project, Timeout: timeout}
}

// waitTimedOut reports whether err is incusd saying that the wait's own timeout passed
// before the operation ended (Incus 6.0 answers 500 "context deadline exceeded").
func waitTimedOut(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.StatusCode == http.StatusGatewayTimeout ||
		(ae.StatusCode == http.StatusInternalServerError && strings.Contains(ae.Message, "deadline exceeded"))
}

// OperationTimeoutError says an operation was still running when the wait ended.
type OperationTimeoutError struct {
	ID, Op, Instance, Project string
	Timeout                   time.Duration
}

func (e *OperationTimeoutError) Error() string {
	return fmt.Sprintf("%s: operation %s still running after %s; it may still finish on the daemon (see `incus operation show %s`)",
		subject(e.Op, e.Instance, e.Project), e.ID, e.Timeout, e.ID)
}

// subject is how an error names the call: "incus <op> [on instance <i>] (project <p>)".
func subject(op, instance, project string) string {
	if project == "" {
		project = "default"
	}
	s := "incus " + op
	if instance != "" {
		s += " on instance " + instance
	}
	return s + " (project " + project + ")"
}

// runAsync sends a request that answers an operation and waits for it.
func (c *Client) runAsync(ctx context.Context, w where, method, path string, q url.Values, body any, timeout time.Duration) (*Operation, error) {
	r, err := c.do(ctx, w, method, path, q, body)
	if err != nil {
		return nil, err
	}
	if r.Type == "sync" {
		return &Operation{StatusCode: opSuccess, Status: "Success"}, nil
	}
	op, err := c.asyncOp(w, r)
	if err != nil {
		return nil, err
	}
	pauseBeforeWait(op.ID)
	done, err := c.waitOp(ctx, w, op.ID, timeout)
	return done, c.forgotten(w, op, err)
}

// forgotten turns a not-found from the wait of operation op, which the daemon itself
// had just answered, into an OperationGoneError: the daemon forgot it, it did not fail
// to find the object. A wait for an operation named by anyone else (WaitOperation) keeps
// the not-found.
func (c *Client) forgotten(w where, op *Operation, err error) error {
	if !IsNotFound(err) {
		return err
	}
	return &OperationGoneError{ID: op.ID, Op: w.op, Instance: w.instance, Project: c.project, Created: op.CreatedAt}
}

// pauseBeforeWait runs between an asynchronous request and the wait for its operation
// (id): a lab test makes it outlast the daemon's memory of the ended operation (see
// OperationGoneError).
var pauseBeforeWait = func(id string) {}

func opTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d)
	}
	return DefaultOperationTimeout
}
