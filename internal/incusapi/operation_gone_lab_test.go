package incusapi

// Lab test, on the real incusd, of an operation the daemon forgot before its wait came:
// incusd keeps an ended operation five seconds, so every wait here is sent six seconds
// after the operation ended (pauseBeforeWait). A CI run met it once, under load, as
// "404: Operation not found" on a container create.

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// The daemon's own memory of an ended operation (see OperationGoneError).
const daemonKeepsEndedOperation = 5 * time.Second

func TestLabOperationForgottenBeforeItsWaitIsJudgedByItsObject(t *testing.T) {
	c := labClient(t)
	ctx := labCtx(t)
	name := labtest.Prefix() + "-t-api-gone"
	_, _ = labtest.IncusErr("delete", "--force", name)
	t.Cleanup(func() { _, _ = labtest.IncusErr("delete", "--force", name) })
	img, err := c.ResolveImage(ctx, labtest.Image)
	if err != nil {
		t.Fatal(err)
	}

	late := func(id string) { outlastEndedOperation(t, c, id) }
	pauseBeforeWait = late
	t.Cleanup(func() { pauseBeforeWait = func(string) {} })

	// Each change whose operation was forgotten is read from its object: done.
	if err := c.CreateInstance(ctx, InstanceCreate{Name: name, Fingerprint: img.Fingerprint, Start: true, Profiles: []string{"default"}}); err != nil {
		t.Fatalf("create and start, wait sent late: %v", err)
	}
	if st, err := c.GetInstanceState(ctx, name); err != nil || !st.Running() {
		t.Fatalf("the container should run: %v %+v", err, st)
	}
	// The premise: the daemon has forgotten the operation when the wait comes (a wait
	// for an id from elsewhere, WaitOperation, keeps its not-found).
	w := where{op: "snapshot create premise", instance: name}
	r, err := c.do(ctx, w, http.MethodPost, instPath(name, "snapshots"), nil, map[string]any{"name": "premise"})
	if err != nil {
		t.Fatal(err)
	}
	op, err := c.asyncOp(w, r)
	if err != nil {
		t.Fatal(err)
	}
	late(op.ID)
	if _, err := c.WaitOperation(ctx, op.ID, time.Minute); !IsNotFound(err) {
		t.Fatalf("a wait sent %s after the operation ended: want the daemon's not-found, got %v", daemonKeepsEndedOperation+time.Second, err)
	}

	if err := c.CreateSnapshot(ctx, name, "one"); err != nil {
		t.Fatalf("snapshot, wait sent late: %v", err)
	}
	// A create refused inside its operation (the name is taken) finds an object by the
	// name, older than the operation: not done, and said so, never taken as success.
	err = c.CreateSnapshot(ctx, name, "one")
	if !IsOperationGone(err) || IsNotFound(err) {
		t.Fatalf("a second snapshot with a taken name, wait sent late: want an OperationGoneError, got %v", err)
	}
	t.Logf("taken name: %v", err)
	if err := c.RenameSnapshot(ctx, name, "one", "two"); err != nil {
		t.Fatalf("rename, wait sent late: %v", err)
	}
	if err := c.DeleteSnapshot(ctx, name, "two"); err != nil {
		t.Fatalf("snapshot delete, wait sent late: %v", err)
	}
	if err := c.Stop(ctx, name, true, 0); err != nil {
		t.Fatalf("stop, wait sent late: %v", err)
	}
	if err := c.DeleteInstance(ctx, name); err != nil {
		t.Fatalf("delete, wait sent late: %v", err)
	}
	if _, err := c.GetInstance(ctx, name); !IsNotFound(err) {
		t.Fatalf("the container should be gone: %v", err)
	}
}

// outlastEndedOperation waits until the daemon says operation id has ended (or has
// forgotten it already), then for longer than the daemon keeps an ended operation. A
// fixed pause after the request did not do: on a machine loaded by a cold CI run's
// builds, a snapshot ran longer than the pause, and the wait found it still running.
func outlastEndedOperation(t *testing.T, c *Client, id string) {
	t.Helper()
	ctx := labCtx(t)
	w := where{op: "operation show"}
	for range 1500 { // 200 ms apart: up to five minutes, labCtx's own bound
		r, err := c.do(ctx, w, http.MethodGet, "/1.0/operations/"+url.PathEscape(id), nil, nil)
		if IsNotFound(err) {
			break
		}
		if err != nil {
			t.Fatalf("reading operation %s: %v", id, err)
		}
		var op Operation
		if err := json.Unmarshal(r.Metadata, &op); err != nil {
			t.Fatalf("operation %s: %v", id, err)
		}
		if op.done() {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(daemonKeepsEndedOperation + time.Second)
}
