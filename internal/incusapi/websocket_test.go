package incusapi

// Unit tests of the websocket client against a tiny websocket server written here, on
// 127.0.0.1 (httptest) or over net.Pipe. A server of our own is used because the
// faults tested (a wrong accept key, fragmented and interleaved frames, reserved bits,
// oversized frames, a peer that hangs up mid-frame) are ones incusd cannot be made to
// show on demand; the healthy path is also tested against the real incusd in
// lab_test.go (TestLabExecStream…).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// srvConn is the server end of a websocket in these tests: it writes unmasked frames
// and reads (and checks the masking of) the client's frames.
type srvConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func (s *srvConn) writeFrame(fin bool, op byte, p []byte) {
	s.t.Helper()
	s.writeRaw(frameBytes(fin, op, p, false))
}

func (s *srvConn) writeRaw(b []byte) {
	s.t.Helper()
	if _, err := s.c.Write(b); err != nil {
		s.t.Errorf("server write: %v", err)
	}
}

// frameBytes encodes a frame as a server sends it (unmasked unless masked).
func frameBytes(fin bool, op byte, p []byte, masked bool) []byte {
	var b bytes.Buffer
	h0 := op
	if fin {
		h0 |= 0x80
	}
	b.WriteByte(h0)
	mbit := byte(0)
	if masked {
		mbit = 0x80
	}
	switch l := len(p); {
	case l < 126:
		b.WriteByte(mbit | byte(l))
	case l <= 0xFFFF:
		b.WriteByte(mbit | 126)
		_ = binary.Write(&b, binary.BigEndian, uint16(l))
	default:
		b.WriteByte(mbit | 127)
		_ = binary.Write(&b, binary.BigEndian, uint64(l))
	}
	if masked {
		key := []byte{1, 2, 3, 4}
		b.Write(key)
		for i, c := range p {
			b.WriteByte(c ^ key[i&3])
		}
	} else {
		b.Write(p)
	}
	return b.Bytes()
}

// readFrame reads one client frame; a client frame that is not masked fails the test.
func (s *srvConn) readFrame() (fin bool, op byte, p []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(s.br, h[:]); err != nil {
		return
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0F
	if h[1]&0x80 == 0 {
		s.t.Errorf("client frame (opcode %#x) is not masked", op)
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		_, err = io.ReadFull(s.br, b[:])
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		_, err = io.ReadFull(s.br, b[:])
		n = binary.BigEndian.Uint64(b[:])
	}
	if err != nil {
		return
	}
	var key [4]byte
	if _, err = io.ReadFull(s.br, key[:]); err != nil {
		return
	}
	p = make([]byte, n)
	if _, err = io.ReadFull(s.br, p); err != nil {
		return
	}
	for i := range p {
		p[i] ^= key[i&3]
	}
	return
}

// readMessage reassembles one client message.
func (s *srvConn) readMessage() (byte, []byte, error) {
	var op byte
	var msg []byte
	for {
		fin, fop, p, err := s.readFrame()
		if err != nil {
			return 0, nil, err
		}
		if fop != opContinuation {
			op = fop
		}
		msg = append(msg, p...)
		if fin {
			return op, msg, nil
		}
	}
}

// wsServer starts an httptest server whose handler completes the handshake (with the
// accept value accept returns, the correct one unless a test says otherwise) and
// hands the connection to serve.
func wsServer(t *testing.T, accept func(key string) string, serve func(s *srvConn)) *Client {
	t.Helper()
	done := make(chan struct{})
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		if r.Header.Get("Upgrade") != "websocket" || r.Header.Get("Sec-WebSocket-Version") != "13" || !headerHasToken(r.Header, "Connection", "upgrade") {
			t.Errorf("handshake request headers: %v", r.Header)
		}
		if got := r.URL.Query().Get("secret"); got != "s3cret" {
			t.Errorf("secret = %q", got)
		}
		key := r.Header.Get("Sec-WebSocket-Key")
		if raw, err := decodeKey(key); err != nil || len(raw) != 16 {
			t.Errorf("Sec-WebSocket-Key %q is not 16 random bytes in base64", key)
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept(key) + "\r\n\r\n")
		_ = brw.Flush()
		serve(&srvConn{t: t, c: conn, br: brw.Reader})
	})
	t.Cleanup(func() {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("server handler did not finish")
		}
	})
	return c
}

func decodeKey(k string) ([]byte, error) {
	return base64.StdEncoding.DecodeString(k)
}

func dialTest(t *testing.T, c *Client) *Websocket {
	t.Helper()
	// The context ends as soon as dialTest returns: the websocket must outlive it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, err := c.DialWebsocket(ctx, "/1.0/operations/op-1/websocket", map[string][]string{"secret": {"s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}

func TestAcceptKeyMatchesRFC6455Example(t *testing.T) {
	// The example of RFC 6455 section 1.3.
	if got := acceptKey("dGhlIHNhbXBsZSBub25jZQ=="); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("acceptKey = %q", got)
	}
}

func TestWebsocketEchoesBothWaysWithFragmentsPingsAndClose(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320000 bytes: 64-bit length, several frames
	mid := bytes.Repeat([]byte("m"), 300)                  // 16-bit length
	c := wsServer(t, acceptKey, func(s *srvConn) {
		// The client's messages, as the server reassembles them.
		for _, want := range [][]byte{[]byte("hello"), mid, big} {
			op, got, err := s.readMessage()
			if err != nil || op != OpBinary || !bytes.Equal(got, want) {
				t.Errorf("server got op %#x, %d bytes, err %v; want %d bytes", op, len(got), err, len(want))
				return
			}
		}
		// A message in three fragments with a ping between them; the client must
		// answer the ping with its payload while it reassembles.
		s.writeFrame(false, OpBinary, []byte("frag-"))
		s.writeFrame(true, OpPing, []byte("are you there"))
		s.writeFrame(false, opContinuation, []byte("ment"))
		s.writeFrame(true, opContinuation, []byte("ed"))
		s.writeFrame(true, OpPong, []byte("unsolicited")) // skipped
		s.writeFrame(true, OpBinary, mid)
		s.writeFrame(true, OpBinary, big)
		s.writeFrame(true, OpText, nil) // incusd's end-of-stream barrier
		_, op, p, err := s.readFrame()
		if err != nil || op != OpPong || string(p) != "are you there" {
			t.Errorf("after the ping the server got op %#x %q err %v, want the pong", op, p, err)
		}
		s.writeFrame(true, OpClose, []byte{0x03, 0xE8, 'b', 'y', 'e'})
		_, op, p, err = s.readFrame()
		if err != nil || op != OpClose || !bytes.Equal(p, []byte{0x03, 0xE8}) {
			t.Errorf("the client answered the close with op %#x %v err %v, want a close echoing 1000", op, p, err)
		}
	})
	ws := dialTest(t, c)
	ws.frameLimit = 100_000 // so big goes out in four frames
	for _, m := range [][]byte{[]byte("hello"), mid, big} {
		if err := ws.WriteMessage(OpBinary, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []struct {
		op byte
		p  []byte
	}{{OpBinary, []byte("frag-mented")}, {OpBinary, mid}, {OpBinary, big}, {OpText, []byte{}}} {
		op, p, err := ws.ReadMessage()
		if err != nil || op != want.op || !bytes.Equal(p, want.p) {
			t.Fatalf("read op %#x, %d bytes (%.20q), err %v; want op %#x, %d bytes", op, len(p), p, err, want.op, len(want.p))
		}
	}
	if _, _, err := ws.ReadMessage(); !errors.Is(err, ErrWebsocketClosed) {
		t.Fatalf("after the server's close: %v, want ErrWebsocketClosed", err)
	}
	if err := ws.WriteMessage(OpBinary, []byte("late")); err == nil {
		t.Fatal("a write after the close succeeded")
	}
}

func TestWebsocketRefusesAWrongAcceptKey(t *testing.T) {
	c := wsServer(t, func(string) string { return acceptKey("some other key") }, func(*srvConn) {})
	_, err := c.DialWebsocket(context.Background(), "/1.0/operations/op-1/websocket", map[string][]string{"secret": {"s3cret"}})
	if err == nil || !strings.Contains(err.Error(), "Sec-WebSocket-Accept") {
		t.Fatalf("err = %v, want the handshake refused naming Sec-WebSocket-Accept", err)
	}
}

func TestWebsocketHandshakeErrorCarriesDaemonText(t *testing.T) {
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		reply(t, w, `{"type":"error","error":"permission denied","error_code":403,"metadata":null}`)
	})
	_, err := c.DialWebsocket(context.Background(), "/1.0/operations/op-1/websocket", nil)
	var ae *APIError
	if !errors.As(err, &ae) || ae.StatusCode != 403 || ae.Message != "permission denied" {
		t.Fatalf("err = %v, want the daemon's 403 text", err)
	}
}

// pipeWebsocket is a client websocket over net.Pipe, with the server end.
func pipeWebsocket(t *testing.T) (*Websocket, *srvConn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return newWebsocket(a), &srvConn{t: t, c: b, br: bufio.NewReader(b)}
}

func TestWebsocketProtocolFaultsAreErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"reserved bits", append([]byte{0x80 | 0x40 | OpBinary, 1}, 'x'), "reserved bits"},
		{"unknown opcode", []byte{0x80 | 0x3, 0}, "unknown opcode"},
		{"continuation outside a message", []byte{0x80 | opContinuation, 0}, "continuation"},
		{"message inside a message", append(frameBytes(false, OpBinary, []byte("a"), false), frameBytes(true, OpText, []byte("b"), false)...), "inside a fragmented"},
		{"fragmented ping", frameBytes(false, OpPing, []byte("p"), false), "control frame"},
		{"oversized frame", []byte{0x80 | OpBinary, 127, 0, 0, 0, 0, 0x7F, 0, 0, 0}, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, s := pipeWebsocket(t)
			go s.writeRaw(tc.raw)
			_, _, err := ws.ReadMessage()
			var we *WebsocketError
			if !errors.As(err, &we) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a WebsocketError about %q", err, tc.want)
			}
		})
	}
}

func TestWebsocketFragmentedMessageOverLimitIsRefused(t *testing.T) {
	ws, s := pipeWebsocket(t)
	chunk := make([]byte, 1<<20)
	go func() {
		s.writeFrame(false, OpBinary, chunk)
		for range MaxWebsocketMessage / len(chunk) {
			s.writeFrame(false, opContinuation, chunk)
		}
	}()
	_, _, err := ws.ReadMessage()
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v, want the message refused as too large", err)
	}
}

func TestWebsocketPeerHangingUpMidFrameIsUnexpectedEOF(t *testing.T) {
	ws, s := pipeWebsocket(t)
	go func() {
		s.writeRaw([]byte{0x80 | OpBinary, 10, 'a', 'b'})
		_ = s.c.Close()
	}()
	if _, _, err := ws.ReadMessage(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	ws2, s2 := pipeWebsocket(t)
	go func() { _ = s2.c.Close() }()
	if _, _, err := ws2.ReadMessage(); !errors.Is(err, io.EOF) {
		t.Fatalf("a hang-up between frames: %v, want io.EOF", err)
	}
}

func TestWebsocketUnmasksAMaskedServerFrame(t *testing.T) {
	// A server must not mask, but a client that meets it loses nothing by unmasking.
	ws, s := pipeWebsocket(t)
	go s.writeRaw(frameBytes(true, OpBinary, []byte("masked anyway"), true))
	if _, p, err := ws.ReadMessage(); err != nil || string(p) != "masked anyway" {
		t.Fatalf("got %q, %v", p, err)
	}
}

func TestWebsocketConcurrentWritesStayWholeFrames(t *testing.T) {
	ws, s := pipeWebsocket(t)
	ws.frameLimit = 7
	const writers, each = 4, 50
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			msg := bytes.Repeat([]byte{byte('a' + w)}, 30)
			for range each {
				if err := ws.WriteMessage(OpBinary, msg); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers * each {
		op, msg, err := s.readMessage()
		if err != nil || op != OpBinary || len(msg) != 30 || bytes.Count(msg, msg[:1]) != 30 {
			t.Fatalf("message op %#x %q err %v: frames of two writers interleaved", op, msg, err)
		}
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// A peer that stops reading leaves a writer stuck in its write (net.Pipe writes block
// until read; incusd cannot be made to stall on demand). Close must not wait behind
// it: it ends the connection, and with it the stuck write.
func TestWebsocketCloseDoesNotWaitBehindAStuckWriter(t *testing.T) {
	ws, _ := pipeWebsocket(t) // the server end never reads
	wrote := make(chan error, 1)
	go func() { wrote <- ws.WriteMessage(OpBinary, []byte("nobody reads this")) }()
	for ws.wmu.TryLock() { // wait until the writer holds the write lock
		ws.wmu.Unlock()
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { _ = ws.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(closeFrameLimit / 2):
		t.Fatal("Close waited behind a stuck writer")
	}
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("the stuck write reported success after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stuck write did not end when Close closed the connection")
	}
}

// Without a writer, Close sends its close frame, but a peer that does not read gets
// closeFrameLimit, no more.
func TestWebsocketCloseBoundsItsCloseFrame(t *testing.T) {
	ws, _ := pipeWebsocket(t)
	start := time.Now()
	_ = ws.Close()
	if d := time.Since(start); d > closeFrameLimit+2*time.Second {
		t.Fatalf("Close took %s with a peer that does not read, want about %s", d, closeFrameLimit)
	}
	if err := ws.WriteMessage(OpBinary, []byte("x")); err == nil {
		t.Fatal("a write after Close succeeded")
	}
}

func TestMaskBytesIsRFC6455Masking(t *testing.T) {
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	for n := range 21 {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*7 + 1)
		}
		want := make([]byte, n)
		for i, b := range src {
			want[i] = b ^ key[i%4] // RFC 6455 section 5.3
		}
		got := make([]byte, n)
		maskBytes(got, src, key)
		if !bytes.Equal(got, want) {
			t.Fatalf("length %d: got %x, want %x", n, got, want)
		}
		maskBytes(src, src, key) // in place, as a read unmasks
		if !bytes.Equal(src, want) {
			t.Fatalf("length %d in place: got %x, want %x", n, src, want)
		}
	}
}
