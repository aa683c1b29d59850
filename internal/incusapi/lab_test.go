package incusapi

// Lab tests: the real incusd and real containers (FEDIVERSITY_LAB=1, after
// `bash lab/lab.sh up`). Destructive steps (stop, restore) use a throwaway instance.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
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
		// A command incusd cannot find fails the operation; its logs must go too.
		if _, err := c.Exec(ctx, inst, ExecRequest{Command: []string{"/no/such/binary"}}); err == nil {
			t.Fatal("missing binary: no error")
		}
		// A caller that gives up while the command runs: the logs go once it ends.
		short, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Exec(short, inst, ExecRequest{Command: []string{"sleep", "3"}})
		cancel()
		if err == nil {
			t.Fatal("exec outlived its context without an error")
		}
		listLogs := func() []string {
			r, err := c.do(ctx, where{op: "list logs", instance: inst}, http.MethodGet, instPath(inst, "logs", "exec-output"), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var logs []string
			if err := json.Unmarshal(r.Metadata, &logs); err != nil {
				t.Fatal(err)
			}
			return logs
		}
		// A throwaway instance: every exec log in it is ours, and all must be gone
		// (the abandoned one within the few seconds its command still runs).
		logs := listLogs()
		for i := 0; i < 240 && len(logs) != 0; i++ {
			time.Sleep(250 * time.Millisecond)
			logs = listLogs()
		}
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

// TestLabHTTPS reaches the real daemon over HTTPS on a loopback address with a client
// certificate it trusts and its own server certificate pinned; a wrong pin is refused.
// It opens core.https_address on 127.0.0.1 for the test when the daemon has none, and
// removes the address and the trust again afterwards.
func TestLabHTTPS(t *testing.T) {
	labtest.Require(t)
	ctx := labCtx(t)
	addr := strings.TrimSpace(labtest.Incus(t, "config", "get", "core.https_address"))
	if addr == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = l.Addr().String()
		_ = l.Close()
		labtest.Incus(t, "config", "set", "core.https_address", addr)
		t.Cleanup(func() { _, _ = labtest.IncusErr("config", "unset", "core.https_address") })
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") && !strings.HasPrefix(addr, "[::1]:") {
		// Not a skip: the HTTPS path would then go unproven while the run says it passed.
		t.Fatalf("the daemon listens on %s, not on loopback, and this test only targets loopback: "+
			"unset core.https_address (or set it to 127.0.0.1:<port>) for the lab", addr)
	}
	dir := t.TempDir()
	cliCert, cliKey, pair := selfSigned(t, dir, "fedi-t-h3-client")
	labtest.Incus(t, "config", "trust", "add-certificate", cliCert, "--name", "fedi-t-h3-client")
	fp := sha256.Sum256(pair.Certificate[0])
	t.Cleanup(func() { _, _ = labtest.IncusErr("config", "trust", "remove", hex.EncodeToString(fp[:])) })

	node := labtest.Nodes(t)[0]
	c, err := NewHTTPS(HTTPSConfig{URL: "https://" + addr, ClientCertFile: cliCert, ClientKeyFile: cliKey, ServerCertFile: "/var/lib/incus/server.crt"})
	if err != nil {
		t.Fatal(err)
	}
	c = c.WithProject(node.Project)
	in, err := c.GetInstance(ctx, node.Instance)
	if err != nil || in.Name != node.Instance {
		t.Fatalf("over HTTPS: %v %+v", err, in)
	}
	res, err := c.Exec(ctx, node.Instance, ExecRequest{Command: []string{"echo", "via https"}})
	if err != nil || string(res.Stdout) != "via https\n" {
		t.Fatalf("exec over HTTPS: %v %+v", err, res)
	}
	// The exec websockets over TLS, with the same pinned certificate.
	streamRoundTrip(t, ctx, c, node.Instance, bytes.Repeat([]byte("over tls "), 100_000))

	otherCert, _, _ := selfSigned(t, dir, "not-the-server")
	bad, err := NewHTTPS(HTTPSConfig{URL: "https://" + addr, ClientCertFile: cliCert, ClientKeyFile: cliKey, ServerCertFile: otherCert})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.GetInstance(ctx, node.Instance); err == nil || !strings.Contains(err.Error(), "pinned certificate") {
		t.Fatalf("wrong pin: %v", err)
	}
	untrusted, untrustedKey, _ := selfSigned(t, dir, "untrusted-client")
	u, err := NewHTTPS(HTTPSConfig{URL: "https://" + addr, ClientCertFile: untrusted, ClientKeyFile: untrustedKey, ServerCertFile: "/var/lib/incus/server.crt"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.GetInstance(ctx, node.Instance); err == nil {
		t.Fatal("an untrusted client certificate was let in")
	} else {
		t.Logf("untrusted client: %v", err)
	}
}

// TestLabOperationWaitTimeout: the real daemon's answer when /wait's own timeout passes
// before the operation ends is read as "still running", not as success or failure.
func TestLabOperationWaitTimeout(t *testing.T) {
	c := labClient(t)
	node := labtest.Nodes(t)[0]
	c = c.WithProject(node.Project)
	ctx := labCtx(t)
	w := where{op: "exec", instance: node.Instance}
	r, err := c.do(ctx, w, http.MethodPost, instPath(node.Instance, "exec"), nil, execBody{
		Command: []string{"sleep", "4"}, RecordOutput: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	op, err := c.asyncOp(w, r)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.WaitOperation(ctx, op.ID, 1500*time.Millisecond)
	var te *OperationTimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("short wait: want OperationTimeoutError, got %v", err)
	}
	done, err := c.WaitOperation(ctx, op.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var rc int
	if err := json.Unmarshal(done.Metadata["return"], &rc); err != nil || rc != 0 {
		t.Fatalf("sleep returned %s (%v)", done.Metadata["return"], err)
	}
	var outputs map[string]string
	_ = json.Unmarshal(done.Metadata["output"], &outputs)
	for _, p := range outputs {
		_ = c.deleteLog(ctx, w, p)
	}

	// One wait that spans several daemon-side timeouts still ends in the result.
	defer func(h time.Duration) { waitHold = h }(waitHold)
	waitHold = time.Second
	res, err := c.Exec(ctx, node.Instance, ExecRequest{Command: []string{"sh", "-c", "sleep 3; echo slept"}})
	if err != nil || string(res.Stdout) != "slept\n" {
		t.Fatalf("exec across wait rounds: %v %+v", err, res)
	}

	if _, err := c.WaitOperation(ctx, "00000000-0000-0000-0000-000000000000", time.Minute); !IsNotFound(err) {
		t.Fatalf("unknown operation: want not found, got %v", err)
	}
}

// OperationsOn sees the running exec of a command on the instance, and nothing once it
// ended: what tells a restore still at work from one whose run is gone. A snapshot's
// rename keeps its content and survives a restore of the instance (the restore
// journal).
func TestLabOperationsOnAndSnapshotRename(t *testing.T) {
	c := labClient(t)
	node := labtest.NewInstance(t, "incusapi-ops")
	c = c.WithProject(node.Project)
	ctx := labCtx(t)
	inst := node.Instance
	if n, err := c.OperationsOn(ctx, inst); err != nil || n != 0 {
		t.Fatalf("an idle instance: %d running operations (%v), want 0", n, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, inst, ExecRequest{Command: []string{"sleep", "4"}})
		done <- err
	}()
	seen := 0
	for i := 0; i < 30 && seen == 0; i++ {
		time.Sleep(100 * time.Millisecond)
		seen, _ = c.OperationsOn(ctx, inst)
	}
	if seen == 0 {
		t.Fatal("OperationsOn never saw the running exec")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, err := c.OperationsOn(ctx, inst); err != nil || n != 0 {
		t.Fatalf("after the exec ended: %d running operations (%v), want 0", n, err)
	}

	if err := c.CreateSnapshot(ctx, inst, "t-journal"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateSnapshot(ctx, inst, "t-set"); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx, inst, true, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.RestoreSnapshot(ctx, inst, "t-set"); err != nil {
		t.Fatal(err)
	}
	if err := c.RenameSnapshot(ctx, inst, "t-journal", "t-kept"); err != nil {
		t.Fatal(err)
	}
	snaps, err := c.ListSnapshots(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range snaps {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "t-kept,t-set" {
		t.Fatalf("after a restore and a rename the snapshots are %v, want [t-kept t-set]", names)
	}
	if err := c.Start(ctx, inst); err != nil {
		t.Fatal(err)
	}
}
