package incusapi

// A minimal RFC 6455 websocket client, for the websockets of an exec operation. It
// exists because the project takes no websocket dependency. It does what incusd's exec
// websockets need and no more: the opening handshake over the client's own HTTP
// transport (unix socket or HTTPS, so the pinned certificate still applies), masked
// client frames, binary, text, close, ping and pong frames, and messages fragmented
// into several frames. No extensions and no subprotocols are negotiated.

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // RFC 6455 fixes SHA-1 for the handshake; it secures nothing
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Websocket opcodes (RFC 6455 section 5.2).
const (
	opContinuation = 0x0
	OpText         = 0x1
	OpBinary       = 0x2
	OpClose        = 0x8
	OpPing         = 0x9
	OpPong         = 0xA
)

// wsGUID is the constant RFC 6455 appends to the client's key to compute the accept
// value.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// Limits of what a websocket reads: a message or a control frame larger than these is
// a protocol error, never an unbounded allocation.
const (
	// MaxWebsocketMessage bounds one reassembled message.
	MaxWebsocketMessage = 16 << 20
	maxControlPayload   = 125
	// wsWriteFrame is the largest frame a message is written in; a longer message is
	// sent fragmented.
	wsWriteFrame = 64 << 10
)

// ErrWebsocketClosed is returned by reads after the peer closed the websocket with a
// close frame (a clean end of the stream).
var ErrWebsocketClosed = errors.New("websocket closed by the peer")

// Websocket is the client end of one websocket. Reads must come from one goroutine;
// writes may come from several (they are serialised). Pings are answered by the
// reader, so a connection whose peer pings must be read.
type Websocket struct {
	rwc io.ReadWriteCloser
	br  *bufio.Reader

	wmu        sync.Mutex
	closeSent  bool
	frameLimit int // largest frame written (wsWriteFrame unless a test sets it)

	closeOnce sync.Once
	closeErr  error
}

// WebsocketError is a protocol fault of the peer (a bad frame, an oversized message).
type WebsocketError struct{ Msg string }

func (e *WebsocketError) Error() string { return "websocket: " + e.Msg }

func wsErr(format string, a ...any) error { return &WebsocketError{Msg: fmt.Sprintf(format, a...)} }

// DialWebsocket opens a websocket to path (with query q) on the daemon, over the
// client's own transport. ctx bounds the handshake only; the websocket outlives it.
func (c *Client) DialWebsocket(ctx context.Context, path string, q url.Values) (*Websocket, error) {
	return c.dialWebsocket(ctx, where{op: "websocket " + path}, path, q)
}

// handshakeTimeout bounds one websocket handshake (a variable so that a test of a daemon
// that never answers one need not wait it out). An exec's handshakes answered later than
// this are of an exec the daemon has already failed: incusd waits 5 s for them (Incus
// 6.0; 10 s in later releases) and then fails the exec, so waiting longer only delays
// the exec opened in its place (OpenExec). It was 30 s, the length of the stalls behind
// a silent connection (lazyconn.go), which hid where they came from.
var handshakeTimeout = 10 * time.Second

func (c *Client) dialWebsocket(ctx context.Context, w where, path string, q url.Values) (*Websocket, error) {
	var k [16]byte
	if _, err := rand.Read(k[:]); err != nil {
		return nil, fmt.Errorf("incus %s: websocket key: %w", w.op, err)
	}
	key := base64.StdEncoding.EncodeToString(k[:])
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
	if !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") ||
		!headerHasToken(resp.Header, "Connection", "upgrade") ||
		resp.Header.Get("Sec-WebSocket-Accept") != acceptKey(key) {
		_ = rwc.Close()
		return nil, c.apiErr(w, resp.StatusCode, "the daemon's websocket handshake answer is invalid (Upgrade, Connection or Sec-WebSocket-Accept)")
	}
	return newWebsocket(rwc), nil
}

func newWebsocket(rwc io.ReadWriteCloser) *Websocket {
	return &Websocket{rwc: rwc, br: bufio.NewReaderSize(rwc, 32<<10), frameLimit: wsWriteFrame}
}

// handshakeOn opens the websocket at path on a spare connection (spares.go): the same
// request as dialWebsocket's, written by hand on a connection the daemon has accepted.
// A failure to talk is a *TransportError (the caller then dials); the daemon's refusal
// is its *APIError.
func (c *Client) handshakeOn(ctx context.Context, w where, sc spareConn, path string, q url.Values, key string) (*Websocket, error) {
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
	if !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") ||
		!headerHasToken(resp.Header, "Connection", "upgrade") ||
		resp.Header.Get("Sec-WebSocket-Accept") != acceptKey(key) {
		_ = sc.conn.Close()
		return nil, c.apiErr(w, resp.StatusCode, "the daemon's websocket handshake answer is invalid (Upgrade, Connection or Sec-WebSocket-Accept)")
	}
	if !stop() {
		_ = sc.conn.Close() // the caller gave up as the answer came
		return nil, c.transportErr(w, ctx.Err())
	}
	_ = sc.conn.SetDeadline(time.Time{})
	// Frames the daemon sent right behind its answer are in sc.br already.
	return &Websocket{rwc: sc.conn, br: sc.br, frameLimit: wsWriteFrame}, nil
}

// acceptKey is the Sec-WebSocket-Accept value a server must answer to key.
func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + wsGUID)) //nolint:gosec // fixed by RFC 6455
	return base64.StdEncoding.EncodeToString(h[:])
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// WriteMessage sends one message of opcode op (OpBinary or OpText), fragmented into
// frames of at most the frame limit. Every frame is masked with a fresh key, as a
// client must.
func (ws *Websocket) WriteMessage(op byte, p []byte) error {
	if op != OpBinary && op != OpText {
		return wsErr("cannot send a message of opcode %#x", op)
	}
	ws.wmu.Lock()
	defer ws.wmu.Unlock()
	if ws.closeSent {
		return wsErr("write after close")
	}
	first := true
	for {
		n := min(len(p), ws.frameLimit)
		code := byte(opContinuation)
		if first {
			code = op
		}
		if err := ws.writeFrame(code, p[:n], n == len(p)); err != nil {
			return err
		}
		p, first = p[n:], false
		if len(p) == 0 {
			return nil
		}
	}
}

// writeFrame writes one masked frame. The caller holds wmu.
func (ws *Websocket) writeFrame(op byte, payload []byte, fin bool) error {
	var hdr [14]byte
	hdr[0] = op
	if fin {
		hdr[0] |= 0x80
	}
	n := 2
	switch l := len(payload); {
	case l < 126:
		hdr[1] = byte(l)
	case l <= 0xFFFF:
		hdr[1] = 126
		binary.BigEndian.PutUint16(hdr[2:], uint16(l))
		n = 4
	default:
		hdr[1] = 127
		binary.BigEndian.PutUint64(hdr[2:], uint64(l))
		n = 10
	}
	hdr[1] |= 0x80 // masked
	var mask [4]byte
	if _, err := rand.Read(mask[:]); err != nil {
		return err
	}
	copy(hdr[n:], mask[:])
	n += 4
	buf := make([]byte, n+len(payload))
	copy(buf, hdr[:n])
	maskBytes(buf[n:], payload, mask)
	_, err := ws.rwc.Write(buf)
	return err
}

// writeControl sends a control frame (close, ping, pong).
func (ws *Websocket) writeControl(op byte, payload []byte) error {
	if len(payload) > maxControlPayload {
		return wsErr("control frame payload of %d bytes", len(payload))
	}
	ws.wmu.Lock()
	defer ws.wmu.Unlock()
	if ws.closeSent {
		return nil
	}
	if op == OpClose {
		ws.closeSent = true
	}
	return ws.writeFrame(op, payload, true)
}

// Ping sends a ping with payload p (at most 125 bytes).
func (ws *Websocket) Ping(p []byte) error { return ws.writeControl(OpPing, p) }

// ReadMessage reads the next data message (OpBinary or OpText) with its frames
// reassembled. It answers pings on the way, skips pongs, and answers a close frame with
// one of its own and then returns ErrWebsocketClosed. A connection that ends without a
// close frame returns io.EOF or the read error.
func (ws *Websocket) ReadMessage() (byte, []byte, error) {
	var (
		msgOp byte
		msg   []byte
		inMsg bool
	)
	for {
		fin, op, payload, err := ws.readFrame()
		if err != nil {
			return 0, nil, err
		}
		switch op {
		case OpPing:
			if err := ws.writeControl(OpPong, payload); err != nil {
				return 0, nil, err
			}
			continue
		case OpPong:
			continue
		case OpClose:
			// Echo the status code, as RFC 6455 section 5.5.1 asks.
			var echo []byte
			if len(payload) >= 2 {
				echo = payload[:2]
			}
			_ = ws.writeControl(OpClose, echo)
			return 0, nil, ErrWebsocketClosed
		case OpText, OpBinary:
			if inMsg {
				return 0, nil, wsErr("a new message began inside a fragmented one")
			}
			msgOp, msg, inMsg = op, payload, true
		case opContinuation:
			if !inMsg {
				return 0, nil, wsErr("a continuation frame outside a message")
			}
			if len(msg)+len(payload) > MaxWebsocketMessage {
				return 0, nil, wsErr("message larger than %d bytes", MaxWebsocketMessage)
			}
			msg = append(msg, payload...)
		default:
			return 0, nil, wsErr("unknown opcode %#x", op)
		}
		if fin {
			if msg == nil {
				msg = []byte{}
			}
			return msgOp, msg, nil
		}
	}
}

// readFrame reads one frame and unmasks it if the peer masked it (a server must not,
// but unmasking costs nothing).
func (ws *Websocket) readFrame() (fin bool, op byte, payload []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(ws.br, h[:]); err != nil {
		return false, 0, nil, err
	}
	fin = h[0]&0x80 != 0
	if h[0]&0x70 != 0 {
		return false, 0, nil, wsErr("reserved bits set without a negotiated extension")
	}
	op = h[0] & 0x0F
	masked := h[1]&0x80 != 0
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(ws.br, b[:]); err != nil {
			return false, 0, nil, unexpected(err)
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(ws.br, b[:]); err != nil {
			return false, 0, nil, unexpected(err)
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if op >= OpClose {
		if n > maxControlPayload || !fin {
			return false, 0, nil, wsErr("control frame %#x fragmented or longer than %d bytes", op, maxControlPayload)
		}
	} else if n > MaxWebsocketMessage {
		return false, 0, nil, wsErr("frame of %d bytes is larger than %d", n, MaxWebsocketMessage)
	}
	var mask [4]byte
	if masked {
		if _, err := io.ReadFull(ws.br, mask[:]); err != nil {
			return false, 0, nil, unexpected(err)
		}
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(ws.br, payload); err != nil {
		return false, 0, nil, unexpected(err)
	}
	if masked {
		maskBytes(payload, payload, mask)
	}
	return fin, op, payload, nil
}

// maskBytes writes src XOR the repeated key into dst (which may be src), eight bytes
// at a time: a closure streamed into an exec's stdin is masked byte by byte otherwise,
// at about half the speed, on the cores the node's import needs.
func maskBytes(dst, src []byte, key [4]byte) {
	k := uint64(binary.LittleEndian.Uint32(key[:]))
	k |= k << 32
	i := 0
	for ; i+8 <= len(src); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], binary.LittleEndian.Uint64(src[i:])^k)
	}
	for ; i < len(src); i++ {
		dst[i] = src[i] ^ key[i&3]
	}
}

// unexpected turns an EOF inside a frame into io.ErrUnexpectedEOF: only an EOF between
// frames is a plain end of the connection.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// CloseWrite sends a close frame (status 1000, normal closure) and keeps the connection
// open for reading the peer's answer.
func (ws *Websocket) CloseWrite() error {
	return ws.writeControl(OpClose, []byte{0x03, 0xE8})
}

// closeFrameLimit bounds the write of Close's close frame: a peer that stopped reading
// must not hold Close.
const closeFrameLimit = time.Second

// Close sends a close frame if none was sent yet and closes the connection. It never
// waits behind a stuck writer: when a write is in progress the connection is closed at
// once (which ends that write with an error) and no close frame is sent; otherwise the
// close frame gets closeFrameLimit before the connection is closed under it.
func (ws *Websocket) Close() error {
	ws.closeOnce.Do(func() {
		closeConn := sync.OnceValue(ws.rwc.Close)
		if ws.wmu.TryLock() {
			guard := time.AfterFunc(closeFrameLimit, func() { _ = closeConn() })
			if !ws.closeSent {
				ws.closeSent = true
				_ = ws.writeFrame(OpClose, []byte{0x03, 0xE8}, true)
			}
			guard.Stop()
			ws.wmu.Unlock()
		}
		ws.closeErr = closeConn()
	})
	return ws.closeErr
}
