package incus

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
)

// A fake daemon is used because incusd answers `500 Invalid PID` to a state read only in
// the instant a container powers off (seen once in a lab acceptance run, when a bricking
// switch shut the node down): the real daemon cannot be made to show it on demand.
func TestStateSettledAsksAgainWhileTheDaemonIsMidTransition(t *testing.T) {
	var reads atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/1.0/instances/inst/state" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if reads.Add(1) <= 2 {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = fmt.Fprint(w, `{"type":"error","error":"Invalid PID '\u0000'","error_code":500}`)
			return
		}
		_, _ = fmt.Fprint(w, `{"type":"sync","status":"Success","status_code":200,"metadata":{"status":"Stopped","status_code":102}}`)
	})
	sock := filepath.Join(t.TempDir(), "incus.socket")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)

	c, err := incusapi.NewUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(Config{Client: c, Instance: "inst"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := tr.stateSettled(context.Background())
	if err != nil {
		t.Fatalf("state read gave up on a transient daemon error: %v", err)
	}
	if st.Running() || reads.Load() != 3 {
		t.Fatalf("state %+v after %d reads, want Stopped after 3", st, reads.Load())
	}
	if !isTransient(&incusapi.APIError{StatusCode: 500}) || isTransient(&incusapi.APIError{StatusCode: 404}) {
		t.Fatal("only daemon-side (5xx) errors are transient")
	}
}

// A fake daemon again: a reset connection and a 503 cannot be had from incusd on
// demand. A read (GET) and an overwriting file push are retried, bounded; an exec is
// never sent twice.
func TestTransientDaemonFaultsRetriedOnlyWhenSafe(t *testing.T) {
	var gets, pushes, execs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/1.0/instances/inst":
			if gets.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = fmt.Fprint(w, `{"type":"error","error":"busy","error_code":503}`)
				return
			}
			_, _ = fmt.Fprint(w, `{"type":"sync","status_code":200,"metadata":{"name":"inst","status":"Running"}}`)
		case r.Method == http.MethodPost && r.URL.Path == "/1.0/instances/inst/files":
			if pushes.Add(1) == 1 {
				hj, _ := w.(http.Hijacker)
				conn, _, _ := hj.Hijack()
				_ = conn.Close() // the daemon drops the connection mid-request
				return
			}
			_, _ = fmt.Fprint(w, `{"type":"sync","status_code":200,"metadata":{}}`)
		case r.Method == http.MethodPost && r.URL.Path == "/1.0/instances/inst/exec":
			execs.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprint(w, `{"type":"error","error":"busy","error_code":503}`)
		default:
			http.NotFound(w, r)
		}
	})
	sock := filepath.Join(t.TempDir(), "incus.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	c, err := incusapi.NewUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.GetInstance(ctx, "inst"); err != nil || gets.Load() != 2 {
		t.Fatalf("GET after a 503: err=%v after %d tries", err, gets.Load())
	}
	if err := c.PushFile(ctx, "inst", "/tmp/x", strings.NewReader("data"), 4, incusapi.FileMode{}); err != nil || pushes.Load() != 2 {
		t.Fatalf("push after a reset: err=%v after %d tries", err, pushes.Load())
	}
	if _, err := c.Exec(ctx, "inst", incusapi.ExecRequest{Command: []string{"true"}}); err == nil || execs.Load() != 1 {
		t.Fatalf("exec: err=%v, sent %d times (want once)", err, execs.Load())
	}
}
