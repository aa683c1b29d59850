package incusapi

// Lab tests of the streamed exec (exec_stream.go) and so of the websocket client,
// against the real incusd and a lab container.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// streamRoundTrip sends payload through `cat` over a streamed exec and checks that it
// comes back whole, with stderr and the exit code apart.
func streamRoundTrip(t *testing.T, ctx context.Context, c *Client, instance string, payload []byte) {
	t.Helper()
	s, err := c.OpenExec(ctx, instance, ExecRequest{Command: []string{"sh", "-c", "cat; echo to-stderr >&2; exit 5"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	type read struct {
		b   []byte
		err error
	}
	outc, errc := make(chan read, 1), make(chan read, 1)
	// Both streams are read while stdin is written: the pipes on the node are small.
	go func() { b, err := io.ReadAll(s.Stdout); outc <- read{b, err} }()
	go func() { b, err := io.ReadAll(s.Stderr); errc <- read{b, err} }()
	for p := payload; len(p) > 0; {
		n := min(len(p), 100_000)
		if _, err := s.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	if err := s.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	out, serr := <-outc, <-errc
	if out.err != nil || !bytes.Equal(out.b, payload) {
		t.Fatalf("stdout: %d bytes of %d back (err %v)", len(out.b), len(payload), out.err)
	}
	if serr.err != nil || string(serr.b) != "to-stderr\n" {
		t.Fatalf("stderr: %q (err %v)", serr.b, serr.err)
	}
	code, err := s.Wait(ctx)
	if err != nil || code != 5 {
		t.Fatalf("exit code %d, err %v; want 5", code, err)
	}
}

func TestLabExecStreamRoundTrip(t *testing.T) {
	c := labClient(t)
	node := labtest.Nodes(t)[0]
	c = c.WithProject(node.Project)
	payload := make([]byte, 5<<20)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	streamRoundTrip(t, labCtx(t), c, node.Instance, payload)
	// An empty stdin ends at once.
	streamRoundTrip(t, labCtx(t), c, node.Instance, nil)
}

// scratchPath is a file name under the node's /tmp no other test run uses.
func scratchPath(prefix string) string {
	var r [6]byte
	_, _ = rand.Read(r[:])
	return "/tmp/" + prefix + "-" + hex.EncodeToString(r[:])
}

func TestLabExecStreamCloseEndsARunningCommand(t *testing.T) {
	c := labClient(t)
	node := labtest.Nodes(t)[0]
	c = c.WithProject(node.Project)
	ctx := labCtx(t)
	pidFile := scratchPath("fedi-stream")
	s, err := c.OpenExec(ctx, node.Instance, ExecRequest{Command: []string{"sh", "-c", `echo $$ > "$0"; echo started; exec sleep 300`, pidFile}})
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 8)
	if n, err := io.ReadFull(s.Stdout, line); err != nil || string(line[:n]) != "started\n" {
		t.Fatalf("read %q: %v", line[:n], err)
	}
	start := time.Now()
	s.Close()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	code, err := s.Wait(wctx)
	if err != nil && wctx.Err() != nil {
		t.Fatalf("the command still ran %s after Close: %v", time.Since(start), err)
	}
	t.Logf("after Close: exit %d, err %v, in %s", code, err, time.Since(start))
	res, err := c.Exec(ctx, node.Instance, ExecRequest{Command: []string{"sh", "-c", `kill -0 "$(cat "$0")" 2>/dev/null && echo alive || echo gone; rm -f "$0"`, pidFile}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "gone" {
		t.Fatalf("the command's process after Close: %q (err %v), want gone", res.Stdout, err)
	}
}

func TestLabExecStreamMissingInstanceIsNotFound(t *testing.T) {
	c := labClient(t)
	_, err := c.OpenExec(labCtx(t), labtest.Prefix()+"-t-no-such-instance", ExecRequest{Command: []string{"true"}})
	if !IsNotFound(err) {
		t.Fatalf("err = %v, want not found", err)
	}
}

// The real incusd fails an exec whose websockets do not all connect within seconds, and
// forgets it five seconds later; a CI run under load met it as "404: Operation not
// found" on all four handshakes of a closure copy. Here the first exec's dials wait
// until the daemon has forgotten it: that command never ran, so it is opened once more,
// and the command runs once in all.
func TestLabExecDroppedBeforeItsStreamsConnectIsOpenedOnceMore(t *testing.T) {
	c := labClient(t)
	node := labtest.Nodes(t)[0]
	c = c.WithProject(node.Project)
	ctx := labCtx(t)
	runs := scratchPath("fedi-dropped")
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), node.Instance, ExecRequest{Command: []string{"rm", "-f", runs}})
	})

	var waited time.Duration
	first := true
	pauseBeforeDial = func(opID string) {
		if !first {
			return
		}
		first = false
		start := time.Now()
		for time.Since(start) < time.Minute { // the daemon's 10 s, its 5 s memory, and slack
			_, err := c.do(ctx, where{op: "operation poll"}, http.MethodGet, "/1.0/operations/"+url.PathEscape(opID), nil, nil)
			if IsNotFound(err) {
				waited = time.Since(start)
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Errorf("the daemon still knew exec %s after a minute without its websockets", opID)
	}
	t.Cleanup(func() { pauseBeforeDial = func(string) {} })

	s, err := c.OpenExec(ctx, node.Instance, ExecRequest{Command: []string{"sh", "-c", `echo ran >> "$0"; cat`, runs}})
	if err != nil {
		t.Fatalf("OpenExec after the daemon dropped the first exec: %v", err)
	}
	t.Logf("the daemon dropped the first exec %s after its request", waited.Round(time.Second))
	if _, err := s.Write([]byte("through\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(s.Stdout)
	if err != nil || string(out) != "through\n" {
		t.Fatalf("stdout %q (err %v), want the stdin back", out, err)
	}
	if code, err := s.Wait(ctx); err != nil || code != 0 {
		t.Fatalf("exit %d, err %v", code, err)
	}
	res, err := c.Exec(ctx, node.Instance, ExecRequest{Command: []string{"cat", runs}})
	if err != nil || string(res.Stdout) != "ran\n" {
		t.Fatalf("the command's runs: %q (err %v), want exactly one", res.Stdout, err)
	}
}
