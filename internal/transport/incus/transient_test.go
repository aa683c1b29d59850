package incus

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
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
