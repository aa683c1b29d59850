// Package websocket is a minimal RFC 6455 websocket client for the websockets of an
// Incus exec operation (internal/incusapi opens them). It does what incusd's exec
// websockets need and no more: masked client frames; binary, text, close, ping and pong
// frames; messages fragmented into several frames; bounded reads. No extensions and no
// subprotocols. The opening handshake is the caller's (it chooses the connection:
// incusapi's spare connections, or its HTTP transport, so that the unix socket and the
// pinned certificate apply); this package makes its key and checks the answer.
//
// It is written here rather than taken from a websocket library: docs/design.md ("The
// Incus exec session") says why. FuzzReadMessage and FuzzWriteThenRead hold it to the
// RFC's framing on any input.
package websocket

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // RFC 6455 fixes SHA-1 for the handshake; it secures nothing
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Websocket opcodes (RFC 6455 section 5.2).
const (
	OpContinuation = 0x0
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
	// MaxMessage bounds one reassembled message.
	MaxMessage        = 16 << 20
	maxControlPayload = 125
	// writeFrameLimit is the largest frame a message is written in; a longer message is
	// sent fragmented.
	writeFrameLimit = 64 << 10
)

// ErrClosed is returned by reads after the peer closed the websocket with a close
// frame (a clean end of the stream).
var ErrClosed = errors.New("websocket closed by the peer")

// Conn is the client end of one websocket. Reads must come from one goroutine;
// writes may come from several (they are serialised). Pings are answered by the
// reader, so a connection whose peer pings must be read.
type Conn struct {
	rwc io.ReadWriteCloser
	br  *bufio.Reader

	wmu        sync.Mutex
	closeSent  bool
	frameLimit int // largest frame written (writeFrameLimit unless a test sets it)

	closeOnce sync.Once
	closeErr  error
}

// ProtocolError is a protocol fault of the peer (a bad frame, an oversized message).
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "websocket: " + e.Msg }

func wsErr(format string, a ...any) error { return &ProtocolError{Msg: fmt.Sprintf(format, a...)} }

// New is the client end of a websocket whose handshake is done on rwc. br is a reader
// of rwc that may hold frames read with the handshake's answer (nil: a new one).
func New(rwc io.ReadWriteCloser, br *bufio.Reader) *Conn {
	if br == nil {
		br = bufio.NewReaderSize(rwc, 32<<10)
	}
	return &Conn{rwc: rwc, br: br, frameLimit: writeFrameLimit}
}

// NewKey is a fresh Sec-WebSocket-Key: 16 random bytes in base64.
func NewKey() (string, error) {
	var k [16]byte
	if _, err := rand.Read(k[:]); err != nil {
		return "", fmt.Errorf("websocket key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(k[:]), nil
}

// AnswerValid tells whether the headers h of a 101 answer accept the handshake made
// with key (Upgrade, Connection and Sec-WebSocket-Accept, RFC 6455 section 4.1).
func AnswerValid(h http.Header, key string) bool {
	return strings.EqualFold(h.Get("Upgrade"), "websocket") && HeaderHasToken(h, "Connection", "upgrade") &&
		h.Get("Sec-WebSocket-Accept") == AcceptKey(key)
}

// AcceptKey is the Sec-WebSocket-Accept value a server must answer to key.
func AcceptKey(key string) string {
	h := sha1.Sum([]byte(key + wsGUID)) //nolint:gosec // fixed by RFC 6455
	return base64.StdEncoding.EncodeToString(h[:])
}

// HeaderHasToken tells whether the comma-separated header name of h holds token.
func HeaderHasToken(h http.Header, name, token string) bool {
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
func (ws *Conn) WriteMessage(op byte, p []byte) error {
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
		code := byte(OpContinuation)
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
func (ws *Conn) writeFrame(op byte, payload []byte, fin bool) error {
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
func (ws *Conn) writeControl(op byte, payload []byte) error {
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
func (ws *Conn) Ping(p []byte) error { return ws.writeControl(OpPing, p) }

// ReadMessage reads the next data message (OpBinary or OpText) with its frames
// reassembled. It answers pings on the way, skips pongs, and answers a close frame with
// one of its own and then returns ErrClosed. A connection that ends without a
// close frame returns io.EOF or the read error.
func (ws *Conn) ReadMessage() (byte, []byte, error) {
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
			return 0, nil, ErrClosed
		case OpText, OpBinary:
			if inMsg {
				return 0, nil, wsErr("a new message began inside a fragmented one")
			}
			msgOp, msg, inMsg = op, payload, true
		case OpContinuation:
			if !inMsg {
				return 0, nil, wsErr("a continuation frame outside a message")
			}
			if len(msg)+len(payload) > MaxMessage {
				return 0, nil, wsErr("message larger than %d bytes", MaxMessage)
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
func (ws *Conn) readFrame() (fin bool, op byte, payload []byte, err error) {
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
	} else if n > MaxMessage {
		return false, 0, nil, wsErr("frame of %d bytes is larger than %d", n, MaxMessage)
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
func (ws *Conn) CloseWrite() error {
	return ws.writeControl(OpClose, []byte{0x03, 0xE8})
}

// closeFrameLimit bounds the write of Close's close frame: a peer that stopped reading
// must not hold Close.
const closeFrameLimit = time.Second

// Close sends a close frame if none was sent yet and closes the connection. It never
// waits behind a stuck writer: when a write is in progress the connection is closed at
// once (which ends that write with an error) and no close frame is sent; otherwise the
// close frame gets closeFrameLimit before the connection is closed under it.
func (ws *Conn) Close() error {
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
