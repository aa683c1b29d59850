package incusapi

// A fake daemon (httptest on 127.0.0.1) because the real one cannot be made to leave
// websocket handshakes unanswered on demand; CI saw it do so under load. The daemon's
// dropping of an exec whose websockets came late is shown on the real incusd too
// (exec_stream_lab_test.go).

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/websocket"
)

// handshake is how the fake daemon answers one websocket handshake.
type handshake int

const (
	connects handshake = iota // completed and held open
	hangs                     // unanswered until the client gives up
	dropped                   // "404: Operation not found": the daemon dropped the exec
)

func (h handshake) String() string { return [...]string{"connect", "hang", "are dropped"}[h] }

// stallingExecDaemon answers every exec with a new operation op-<n>, and each of its
// websocket handshakes (by fd: control, 0, 1, 2) as answer says.
func stallingExecDaemon(t *testing.T, answer func(op int, fd string) handshake) (*Client, *atomic.Int32) {
	t.Helper()
	var posts atomic.Int32
	var held sync.WaitGroup
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/1.0/instances/web01/exec":
			n := posts.Add(1)
			reply(t, w, fmt.Sprintf(`{"type":"async","operation":"/1.0/operations/op-%d","metadata":{"id":"op-%d","status_code":103,`+
				`"metadata":{"fds":{"control":"control","0":"0","1":"1","2":"2"}}}}`, n, n))
		case strings.HasSuffix(r.URL.Path, "/websocket"):
			var op int
			_, _ = fmt.Sscanf(r.URL.Path, "/1.0/operations/op-%d/websocket", &op)
			switch answer(op, r.URL.Query().Get("secret")) {
			case hangs:
				<-r.Context().Done()
				return
			case dropped:
				w.WriteHeader(http.StatusNotFound)
				reply(t, w, `{"type":"error","error":"Operation not found","error_code":404}`)
				return
			}
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
				websocket.AcceptKey(r.Header.Get("Sec-WebSocket-Key")) + "\r\n\r\n")
			_ = brw.Flush()
			held.Add(1)
			go func() { // held open until the client closes it
				defer held.Done()
				buf := make([]byte, 512)
				for {
					if _, err := conn.Read(buf); err != nil {
						_ = conn.Close()
						return
					}
				}
			}()
		default:
			http.NotFound(w, r)
		}
	})
	t.Cleanup(held.Wait)
	return c, &posts
}

func shortHandshakes(t *testing.T) {
	old := handshakeTimeout
	handshakeTimeout = 300 * time.Millisecond
	t.Cleanup(func() { handshakeTimeout = old })
}

// Every handshake of the first exec hangs: that command never ran, so it is opened once
// more, and the stream of the second exec is what the caller gets.
func TestOpenExecOpensOnceMoreWhenNoStreamConnected(t *testing.T) {
	shortHandshakes(t)
	for _, first := range []handshake{hangs, dropped} {
		c, posts := stallingExecDaemon(t, func(op int, _ string) handshake {
			if op == 1 {
				return first
			}
			return connects
		})
		st, err := c.OpenExec(context.Background(), "web01", ExecRequest{Command: []string{"nix-store", "--import"}})
		if err != nil {
			t.Fatalf("first exec's handshakes %v: OpenExec: %v", first, err)
		}
		st.Close()
		if got := posts.Load(); got != 2 {
			t.Fatalf("first exec's handshakes %v: %d execs sent, want 2 (the one that never ran, then one more)", first, got)
		}
	}
}

// An exec the daemon dropped twice fails with words of its own: the daemon's
// not-found is about the operation, and must not read as "no such instance".
func TestOpenExecDroppedTwiceSaysTheCommandDidNotRun(t *testing.T) {
	shortHandshakes(t)
	c, posts := stallingExecDaemon(t, func(int, string) handshake { return dropped })
	_, err := c.OpenExec(context.Background(), "web01", ExecRequest{Command: []string{"nix-store", "--import"}})
	if err == nil || IsNotFound(err) || !strings.Contains(err.Error(), "the command did not run") {
		t.Fatalf("OpenExec error = %v, want one that says the command did not run, not a not-found", err)
	}
	if got := posts.Load(); got != 2 {
		t.Fatalf("%d execs sent, want 2", got)
	}
}

// Once stdout is connected the command may have started: it is never sent again, and
// the error names the stalled handshakes. A second stall is not retried either.
func TestOpenExecNeverResendsACommandThatMayHaveRun(t *testing.T) {
	shortHandshakes(t)
	for _, tc := range []struct {
		name      string
		answer    func(op int, fd string) handshake
		wantPosts int32
	}{
		{"stdout connected", func(_ int, fd string) handshake {
			if fd == "1" {
				return connects
			}
			return hangs
		}, 1},
		{"every exec stalls", func(int, string) handshake { return hangs }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, posts := stallingExecDaemon(t, tc.answer)
			_, err := c.OpenExec(context.Background(), "web01", ExecRequest{Command: []string{"nix-store", "--import"}})
			if err == nil || !strings.Contains(err.Error(), "context deadline exceeded") {
				t.Fatalf("OpenExec error = %v, want the handshakes' deadline", err)
			}
			if got := posts.Load(); got != tc.wantPosts {
				t.Fatalf("%d execs sent, want %d", got, tc.wantPosts)
			}
		})
	}
}
