package incusapi

// Unit tests of the exec websockets' handshake against a tiny websocket server on
// 127.0.0.1 (httptest; the server end is internal/websocket/wstest). A server of our
// own is used because the faults tested (a wrong accept key, a refused handshake) are
// ones incusd cannot be made to show on demand; the healthy path is also tested against
// the real incusd in lab_test.go (TestLabExecStream…). The frames are tested in
// internal/websocket.

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/websocket"
	"github.com/fediversity/terraform-provider-fediversity/internal/websocket/wstest"
)

// wsServer starts an httptest server whose handler completes the handshake (with the
// accept value accept returns, the correct one unless a test says otherwise) and
// hands the connection to serve.
func wsServer(t *testing.T, accept func(key string) string, serve func(s *wstest.Conn)) *Client {
	t.Helper()
	done := make(chan struct{})
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		if r.Header.Get("Upgrade") != "websocket" || r.Header.Get("Sec-WebSocket-Version") != "13" || !websocket.HeaderHasToken(r.Header, "Connection", "upgrade") {
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
		serve(&wstest.Conn{T: t, C: conn, BR: brw.Reader})
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

func dialTest(t *testing.T, c *Client) *websocket.Conn {
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

func TestWebsocketEchoesBothWaysWithFragmentsPingsAndClose(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320000 bytes: 64-bit length, five frames of 64 KiB
	mid := bytes.Repeat([]byte("m"), 300)                  // 16-bit length
	c := wsServer(t, websocket.AcceptKey, func(s *wstest.Conn) {
		// The client's messages, as the server reassembles them.
		for _, want := range [][]byte{[]byte("hello"), mid, big} {
			op, got, err := s.ReadMessage()
			if err != nil || op != websocket.OpBinary || !bytes.Equal(got, want) {
				t.Errorf("server got op %#x, %d bytes, err %v; want %d bytes", op, len(got), err, len(want))
				return
			}
		}
		// A message in three fragments with a ping between them; the client must
		// answer the ping with its payload while it reassembles.
		s.WriteFrame(false, websocket.OpBinary, []byte("frag-"))
		s.WriteFrame(true, websocket.OpPing, []byte("are you there"))
		s.WriteFrame(false, websocket.OpContinuation, []byte("ment"))
		s.WriteFrame(true, websocket.OpContinuation, []byte("ed"))
		s.WriteFrame(true, websocket.OpPong, []byte("unsolicited")) // skipped
		s.WriteFrame(true, websocket.OpBinary, mid)
		s.WriteFrame(true, websocket.OpBinary, big)
		s.WriteFrame(true, websocket.OpText, nil) // incusd's end-of-stream barrier
		_, op, p, err := s.ReadFrame()
		if err != nil || op != websocket.OpPong || string(p) != "are you there" {
			t.Errorf("after the ping the server got op %#x %q err %v, want the pong", op, p, err)
		}
		s.WriteFrame(true, websocket.OpClose, []byte{0x03, 0xE8, 'b', 'y', 'e'})
		_, op, p, err = s.ReadFrame()
		if err != nil || op != websocket.OpClose || !bytes.Equal(p, []byte{0x03, 0xE8}) {
			t.Errorf("the client answered the close with op %#x %v err %v, want a close echoing 1000", op, p, err)
		}
	})
	ws := dialTest(t, c)
	for _, m := range [][]byte{[]byte("hello"), mid, big} {
		if err := ws.WriteMessage(websocket.OpBinary, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []struct {
		op byte
		p  []byte
	}{{websocket.OpBinary, []byte("frag-mented")}, {websocket.OpBinary, mid}, {websocket.OpBinary, big}, {websocket.OpText, []byte{}}} {
		op, p, err := ws.ReadMessage()
		if err != nil || op != want.op || !bytes.Equal(p, want.p) {
			t.Fatalf("read op %#x, %d bytes (%.20q), err %v; want op %#x, %d bytes", op, len(p), p, err, want.op, len(want.p))
		}
	}
	if _, _, err := ws.ReadMessage(); !errors.Is(err, websocket.ErrClosed) {
		t.Fatalf("after the server's close: %v, want websocket.ErrClosed", err)
	}
	if err := ws.WriteMessage(websocket.OpBinary, []byte("late")); err == nil {
		t.Fatal("a write after the close succeeded")
	}
}

func TestWebsocketRefusesAWrongAcceptKey(t *testing.T) {
	c := wsServer(t, func(string) string { return websocket.AcceptKey("some other key") }, func(*wstest.Conn) {})
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
