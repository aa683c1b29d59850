package incusapi

// The websockets of an exec operation: their opening handshake, on a spare connection
// (spares.go) or over the client's own HTTP transport (unix socket or HTTPS, so the
// pinned certificate still applies). The frames are internal/websocket's.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/websocket"
)

// DialWebsocket opens a websocket to path (with query q) on the daemon, over the
// client's own transport. ctx bounds the handshake only; the websocket outlives it.
func (c *Client) DialWebsocket(ctx context.Context, path string, q url.Values) (*websocket.Conn, error) {
	return c.dialWebsocket(ctx, where{op: "websocket " + path}, path, q)
}

// handshakeTimeout bounds one websocket handshake (a variable so that a test of a daemon
// that never answers one need not wait it out). An exec's handshakes answered later than
// this are of an exec the daemon has already failed: incusd waits 5 s for them (Incus
// 6.0; 10 s in later releases) and then fails the exec, so waiting longer only delays
// the exec opened in its place (OpenExec). It was 30 s, the length of the stalls behind
// a silent connection (lazyconn.go), which hid where they came from.
var handshakeTimeout = 10 * time.Second

func (c *Client) dialWebsocket(ctx context.Context, w where, path string, q url.Values) (*websocket.Conn, error) {
	key, err := websocket.NewKey()
	if err != nil {
		return nil, fmt.Errorf("incus %s: %w", w.op, err)
	}
	if sc, ok := c.spares.take(); ok {
		c.spares.refill()
		ws, err := c.handshakeOn(ctx, w, sc, path, q, key)
		var ae *APIError
		if err == nil || errors.As(err, &ae) {
			return ws, err
		}
		// The spare broke (the daemon closed it, or restarted): the handshake goes on a
		// connection of the client's Transport.
	}
	// The handshake's own deadline: a context that is not cancelled when the caller's
	// ends, so the connection stays open once upgraded (net/http watches the request's
	// context only until the response arrives, but this does not rely on it).
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handshakeTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel) // a caller that gives up ends the handshake too
	defer stop()
	req, err := http.NewRequestWithContext(hctx, http.MethodGet, c.url(path, q), nil)
	if err != nil {
		return nil, fmt.Errorf("incus %s: %w", w.op, err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", key)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportErr(w, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode >= 400 {
			_, derr := c.decode(w, resp)
			return nil, derr
		}
		return nil, c.apiErr(w, resp.StatusCode, "the daemon did not switch to the websocket protocol")
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		_ = resp.Body.Close()
		return nil, c.apiErr(w, resp.StatusCode, "the upgraded connection is not writable")
	}
	if !websocket.AnswerValid(resp.Header, key) {
		_ = rwc.Close()
		return nil, c.apiErr(w, resp.StatusCode, "the daemon's websocket handshake answer is invalid (Upgrade, Connection or Sec-WebSocket-Accept)")
	}
	return websocket.New(rwc, nil), nil
}

// handshakeOn opens the websocket at path on a spare connection (spares.go): the same
// request as dialWebsocket's, written by hand on a connection the daemon has accepted.
// A failure to talk is a *TransportError (the caller then dials); the daemon's refusal
// is its *APIError.
func (c *Client) handshakeOn(ctx context.Context, w where, sc spareConn, path string, q url.Values, key string) (*websocket.Conn, error) {
	deadline := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = sc.conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = sc.conn.SetDeadline(time.Unix(1, 0)) }) // a caller that gives up
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(path, q), nil)
	if err != nil {
		_ = sc.conn.Close()
		return nil, fmt.Errorf("incus %s: %w", w.op, err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", key)
	if err := req.Write(sc.conn); err != nil {
		_ = sc.conn.Close()
		return nil, c.transportErr(w, err)
	}
	resp, err := http.ReadResponse(sc.br, req)
	if err != nil {
		_ = sc.conn.Close()
		return nil, c.transportErr(w, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer func() { _ = sc.conn.Close() }()
		if resp.StatusCode >= 400 {
			_, derr := c.decode(w, resp)
			return nil, derr
		}
		return nil, c.apiErr(w, resp.StatusCode, "the daemon did not switch to the websocket protocol")
	}
	if !websocket.AnswerValid(resp.Header, key) {
		_ = sc.conn.Close()
		return nil, c.apiErr(w, resp.StatusCode, "the daemon's websocket handshake answer is invalid (Upgrade, Connection or Sec-WebSocket-Accept)")
	}
	if !stop() {
		_ = sc.conn.Close() // the caller gave up as the answer came
		return nil, c.transportErr(w, ctx.Err())
	}
	_ = sc.conn.SetDeadline(time.Time{})
	// Frames the daemon sent right behind its answer are in sc.br already.
	return websocket.New(sc.conn, sc.br), nil
}
