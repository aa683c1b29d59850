package incusapi

// Lab tests: the real incusd and real containers (FEDIVERSITY_LAB=1, after
// `bash lab/lab.sh up`). Destructive steps (stop, restore) use a throwaway instance.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

func labClient(t *testing.T) *Client {
	t.Helper()
	labtest.Require(t)
	c, err := NewFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func labCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestLabExecOutputAndExitCodes(t *testing.T) {
	c := labClient(t)
	node := labtest.Nodes(t)[0]
	c = c.WithProject(node.Project)
	ctx := labCtx(t)

	res, err := c.Exec(ctx, node.Instance, ExecRequest{Command: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("got exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}

	// argv reaches the command unjoined: no shell sees these.
	awkward := []string{"a b", "'q'", `"dq"`, "$HOME", ";rm -rf /x", "\\", "", "ü\t\n"}
	res, err = c.Exec(ctx, node.Instance, ExecRequest{Command: append([]string{"printf", `[%s]`}, awkward...)})
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, a := range awkward {
		want += "[" + a + "]"
	}
	if res.ExitCode != 0 || string(res.Stdout) != want {
		t.Fatalf("printf got %d %q, want %q", res.ExitCode, res.Stdout, want)
	}

	res, err = c.Exec(ctx, node.Instance, ExecRequest{
		Command:     []string{"sh", "-c", `printf %s "$FEDI_X"`},
		Environment: map[string]string{"FEDI_X": "v a l"},
	})
	if err != nil || string(res.Stdout) != "v a l" {
		t.Fatalf("environment: %v %q", err, res.Stdout)
	}

	// A larger output comes back whole.
	res, err = c.Exec(ctx, node.Instance, ExecRequest{Command: []string{"head", "-c", "3000000", "/dev/zero"}})
	if err != nil || len(res.Stdout) != 3000000 {
		t.Fatalf("large output: %v, %d bytes", err, len(res.Stdout))
	}

	_, err = c.Exec(ctx, "fedi-no-such-instance", ExecRequest{Command: []string{"true"}})
	if !IsNotFound(err) || !strings.Contains(err.Error(), "fedi-no-such-instance") {
		t.Fatalf("missing instance: want a not-found naming it, got %v", err)
	}
}

func TestLabMissingBinary(t *testing.T) {
	c := labClient(t)
	node := labtest.Nodes(t)[0]
	c = c.WithProject(node.Project)
	res, err := c.Exec(labCtx(t), node.Instance, ExecRequest{Command: []string{"/no/such/binary"}})
	// Incus reports a command it cannot start as exit code 127 (or an operation
	// failure); either way it must not look like success.
	if err == nil && res.ExitCode == 0 {
		t.Fatal("a missing binary reported success")
	}
	t.Logf("missing binary: exit %v err %v", res, err)
}

func TestLabDestructive(t *testing.T) {
	c := labClient(t)
	node := labtest.NewInstance(t, "incusapi")
	c = c.WithProject(node.Project)
	ctx := labCtx(t)
	inst := node.Instance

	t.Run("exec logs are deleted", func(t *testing.T) {
		if _, err := c.Exec(ctx, inst, ExecRequest{Command: []string{"echo", "hi"}}); err != nil {
			t.Fatal(err)
		}
		r, err := c.do(ctx, where{op: "list logs", instance: inst}, http.MethodGet, instPath(inst, "logs", "exec-output"), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var logs []string
		if err := json.Unmarshal(r.Metadata, &logs); err != nil {
			t.Fatal(err)
		}
		// A throwaway instance: every exec log in it is ours, and all must be gone.
		if len(logs) != 0 {
			t.Errorf("exec logs left behind: %v", logs)
		}
	})

	t.Run("file push pull round trip", func(t *testing.T) {
		content := make([]byte, 0, 256*1024)
		for i := 0; i < cap(content); i++ {
			content = append(content, byte(i*7))
		}
		path := "/root/fedi test file"
		if err := c.PushFile(ctx, inst, path, bytes.NewReader(content), int64(len(content)), FileMode{UID: 0, GID: 0, Mode: 0o600}); err != nil {
			t.Fatal(err)
		}
		got, err := c.PullFile(ctx, inst, path, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content) {
			t.Fatalf("pulled %d bytes that differ from the %d pushed", len(got), len(content))
		}
		res, err := c.Exec(ctx, inst, ExecRequest{Command: []string{"stat", "-c", "%a %u %g %s", path}})
		if err != nil || strings.TrimSpace(string(res.Stdout)) != "600 0 0 262144" {
			t.Fatalf("stat: %v %q", err, res.Stdout)
		}
		// overwrite with less
		if err := c.PushFile(ctx, inst, path, strings.NewReader("short"), -1, FileMode{Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		if got, err := c.PullFile(ctx, inst, path, 0); err != nil || string(got) != "short" {
			t.Fatalf("after overwrite: %v %q", err, got)
		}
		if _, err := c.PullFile(ctx, inst, path, 3); err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Fatalf("pull limit: %v", err)
		}
		if err := c.DeleteFile(ctx, inst, path); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PullFile(ctx, inst, path, 0); !IsNotFound(err) {
			t.Fatalf("pull after delete: want not found, got %v", err)
		}
	})

	t.Run("snapshots create list restore delete", func(t *testing.T) {
		marker := "/root/marker"
		if err := c.PushFile(ctx, inst, marker, strings.NewReader("before"), -1, FileMode{}); err != nil {
			t.Fatal(err)
		}
		if err := c.CreateSnapshot(ctx, inst, "t-snap1"); err != nil {
			t.Fatal(err)
		}
		if err := c.CreateSnapshot(ctx, inst, "t-snap1"); err == nil {
			t.Error("a second snapshot with the same name was accepted")
		}
		snaps, err := c.ListSnapshots(ctx, inst)
		if err != nil {
			t.Fatal(err)
		}
		if len(snaps) != 1 || snaps[0].Name != "t-snap1" || snaps[0].CreatedAt.IsZero() {
			t.Fatalf("snapshots = %+v", snaps)
		}
		if err := c.PushFile(ctx, inst, marker, strings.NewReader("after"), -1, FileMode{}); err != nil {
			t.Fatal(err)
		}
		if err := c.Stop(ctx, inst, false, 60); err != nil {
			t.Fatal(err)
		}
		if err := c.RestoreSnapshot(ctx, inst, "t-snap1"); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx, inst); err != nil {
			t.Fatal(err)
		}
		got, err := c.PullFile(ctx, inst, marker, 0)
		if err != nil || string(got) != "before" {
			t.Fatalf("after restore: %v %q, want \"before\"", err, got)
		}
		if err := c.DeleteSnapshot(ctx, inst, "t-snap1"); err != nil {
			t.Fatal(err)
		}
		if snaps, err := c.ListSnapshots(ctx, inst); err != nil || len(snaps) != 0 {
			t.Fatalf("after delete: %v %+v", err, snaps)
		}
		err = c.RestoreSnapshot(ctx, inst, "t-snap1")
		if err == nil || !strings.Contains(err.Error(), inst) {
			t.Fatalf("restore of a deleted snapshot: %v", err)
		}
	})

	t.Run("stop and start", func(t *testing.T) {
		if err := c.Stop(ctx, inst, true, 0); err != nil {
			t.Fatal(err)
		}
		st, err := c.GetInstanceState(ctx, inst)
		if err != nil || st.Running() || st.Status != "Stopped" {
			t.Fatalf("after stop: %v %+v", err, st)
		}
		if _, err := c.Exec(ctx, inst, ExecRequest{Command: []string{"true"}}); err == nil {
			t.Fatal("exec in a stopped instance succeeded")
		}
		if err := c.Start(ctx, inst); err != nil {
			t.Fatal(err)
		}
		i, err := c.GetInstance(ctx, inst)
		if err != nil || !i.Running() || i.Name != inst {
			t.Fatalf("after start: %v %+v", err, i)
		}
	})
}

func TestLabProjectParameter(t *testing.T) {
	c := labClient(t)
	ctx := labCtx(t)
	const proj, inst = "fedi-t-incusapi", "fedi-t-inproj"
	cleanup := func() {
		_, _ = labtest.IncusErr("delete", "--force", "--project", proj, inst)
		_, _ = labtest.IncusErr("project", "delete", proj)
	}
	cleanup()
	labtest.Incus(t, "project", "create", proj, "-c", "features.images=false", "-c", "features.profiles=false")
	t.Cleanup(cleanup)
	labtest.Incus(t, "init", "--empty", inst, "--project", proj)

	in, err := c.WithProject(proj).GetInstance(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	if in.Project != proj || in.Name != inst {
		t.Fatalf("instance = %+v", in)
	}
	_, err = c.GetInstance(ctx, inst) // default project: not there
	if !IsNotFound(err) {
		t.Fatalf("default project: want not found, got %v", err)
	}
	_, err = c.WithProject("fedi-t-no-such-project").GetInstance(ctx, inst)
	if err == nil || !strings.Contains(err.Error(), "fedi-t-no-such-project") {
		t.Fatalf("unknown project: %v", err)
	}
}
