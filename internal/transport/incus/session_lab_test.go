package incus

// Lab tests of the exec session (session.go) against the real incusd and a real
// /bin/sh in a lab container: what commands get through it, and what happens when the
// session's shell dies under it.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

func TestLabExecSessionCarriesEveryKindOfCommand(t *testing.T) {
	labtest.Require(t)
	tr := labTransport(t, labtest.Nodes(t)[0])
	defer func() { _ = tr.Close() }()
	ctx := labCtx(t)

	run := func(argv []string, opts deploybody.RunOptions) deploybody.RunResult {
		t.Helper()
		res, err := tr.Run(ctx, argv, opts)
		if err != nil {
			t.Fatalf("%q: %v", argv, err)
		}
		return res
	}
	// Output with and without a final newline, on both streams, and the exit code.
	res := run([]string{"sh", "-c", `printf out; printf 'err\n\n' >&2; exit 7`}, deploybody.RunOptions{})
	if res.ExitCode != 7 || string(res.Stdout) != "out" || string(res.Stderr) != "err\n\n" {
		t.Fatalf("got exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// Nothing in argv is shell text, not even in the session's shell.
	awkward := []string{"a b", "'q'", `"dq"`, "$HOME", "`id`", "$(id)", ";exit 3", "\\", "", "*", "new\nline", "ü"}
	res = run(append([]string{"printf", "[%s]"}, awkward...), deploybody.RunOptions{})
	if want := "[" + strings.Join(awkward, "][") + "]"; string(res.Stdout) != want {
		t.Fatalf("argv through the session: %q, want %q", res.Stdout, want)
	}
	// A command that reads stdin gets an empty one (it must not eat the session's
	// stdin, the next commands), and one given stdin gets exactly that.
	res = run([]string{"cat"}, deploybody.RunOptions{})
	if res.ExitCode != 0 || len(res.Stdout) != 0 {
		t.Fatalf("cat without stdin: exit %d, %q", res.ExitCode, res.Stdout)
	}
	stdin := []byte("line 1\n'quoted' $HOME\x00binary\xff")
	if res = run([]string{"cat"}, deploybody.RunOptions{Stdin: stdin}); !bytes.Equal(res.Stdout, stdin) {
		t.Fatalf("stdin round trip: %q", res.Stdout)
	}
	// argv[0] is always a program, never a builtin of the session's shell: "exit" is
	// not found (127, as a recorded exec answers), and the session lives on.
	if res = run([]string{"exit", "3"}, deploybody.RunOptions{}); res.ExitCode != 127 {
		t.Fatalf("exit 3: exit code %d, want 127 (no such program)", res.ExitCode)
	}
	// A PATH prefix applies to that command only.
	res = run([]string{"sh", "-c", `echo "$PATH"`}, deploybody.RunOptions{Path: []string{"/opt/fedi-test/bin"}})
	if !strings.HasPrefix(string(res.Stdout), "/opt/fedi-test/bin:") {
		t.Fatalf("PATH with prefix: %q", res.Stdout)
	}
	res = run([]string{"sh", "-c", `echo "$PATH"`}, deploybody.RunOptions{})
	if strings.Contains(string(res.Stdout), "/opt/fedi-test/bin") {
		t.Fatalf("the prefix leaked into the next command: %q", res.Stdout)
	}
	// A missing command is exit 127, as over a recorded exec.
	if res = run([]string{"fedi-no-such-command"}, deploybody.RunOptions{}); res.ExitCode != 127 {
		t.Fatalf("missing command: exit %d stderr %q", res.ExitCode, res.Stderr)
	}
	// Large binary output (several websocket messages) arrives whole.
	res = run([]string{"sh", "-c", "head -c 3000000 /dev/urandom | tee /tmp/fedi-session-big | sha256sum; cat /tmp/fedi-session-big; rm /tmp/fedi-session-big"}, deploybody.RunOptions{})
	nl := bytes.IndexByte(res.Stdout, '\n')
	if nl < 0 || len(res.Stdout)-nl-1 != 3000000 {
		t.Fatalf("large output: %d bytes", len(res.Stdout))
	}
	sum := sha256.Sum256(res.Stdout[nl+1:])
	if got := strings.Fields(string(res.Stdout[:nl]))[0]; got != hex.EncodeToString(sum[:]) {
		t.Fatalf("large output corrupted: node says %s, got %x", got, sum)
	}
	// A batch (the watch loop's reads) through the session.
	out, err := tr.RunBatch(ctx, [][]string{{"echo", "one"}, {"sh", "-c", "echo two >&2; exit 4"}}, deploybody.RunOptions{})
	if err != nil || len(out) != 2 || string(out[0].Stdout) != "one\n" || out[1].ExitCode != 4 || string(out[1].Stderr) != "two\n" {
		t.Fatalf("batch: %v %+v", err, out)
	}
	if n := tr.viaRecorded.Load(); n != 0 {
		t.Fatalf("%d commands took a recorded exec; the session should have carried all %d", n, tr.viaSession.Load())
	}
	if tr.sessOpens != 1 {
		t.Fatalf("%d sessions opened for one transport, want 1", tr.sessOpens)
	}
}

// shellPID is the pid of the session's shell on the node: the parent of a command run
// through it (commands run in a subshell that execs them).
func shellPID(t *testing.T, ctx context.Context, tr *Transport) int {
	t.Helper()
	res, err := tr.Run(ctx, []string{"sh", "-c", `echo $PPID`}, deploybody.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil || pid <= 1 {
		t.Fatalf("shell pid %q: %v", res.Stdout, err)
	}
	return pid
}

// killOnNode kills pid in the instance with a recorded exec, outside the session.
func killOnNode(t *testing.T, ctx context.Context, tr *Transport, pid int) {
	t.Helper()
	res, err := tr.c.Exec(ctx, tr.instance, incusapi.ExecRequest{Command: []string{"kill", "-9", strconv.Itoa(pid)}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("kill %d on the node: %v %+v", pid, err, res)
	}
}

func TestLabExecSessionBreakReopensOnceThenFallsBack(t *testing.T) {
	labtest.Require(t)
	tr := labTransport(t, labtest.Nodes(t)[0])
	defer func() { _ = tr.Close() }()
	ctx := labCtx(t)

	first := shellPID(t, ctx, tr)
	killOnNode(t, ctx, tr, first) // the session breaks between two commands
	// Every command still gets its answer: through a second session, or (when the
	// break is noticed only as the command is sent) a recorded exec.
	for i := range 3 {
		res, err := tr.Run(ctx, []string{"echo", "after break", strconv.Itoa(i)}, deploybody.RunOptions{})
		if err != nil || string(res.Stdout) != "after break "+strconv.Itoa(i)+"\n" {
			t.Fatalf("command %d after the break: %v %q", i, err, res.Stdout)
		}
	}
	second := shellPID(t, ctx, tr)
	if second == first || tr.sessOpens != 2 {
		t.Fatalf("after one break: shell %d (was %d), %d sessions opened; want a new shell in a second session", second, first, tr.sessOpens)
	}
	killOnNode(t, ctx, tr, second)
	before := tr.viaRecorded.Load()
	for i := range 3 {
		res, err := tr.Run(ctx, []string{"echo", "fallback", strconv.Itoa(i)}, deploybody.RunOptions{})
		if err != nil || string(res.Stdout) != "fallback "+strconv.Itoa(i)+"\n" {
			t.Fatalf("command %d after the second break: %v %q", i, err, res.Stdout)
		}
	}
	if tr.sessOpens != 2 || tr.viaRecorded.Load()-before != 3 {
		t.Fatalf("after two breaks: %d sessions opened, %d recorded execs; want no third session and every command recorded",
			tr.sessOpens, tr.viaRecorded.Load()-before)
	}
}

func TestLabExecSessionCommandThatLosesItsShellIsAnErrorNotARerun(t *testing.T) {
	labtest.Require(t)
	tr := labTransport(t, labtest.Nodes(t)[0])
	defer func() { _ = tr.Close() }()
	ctx := labCtx(t)

	pid := shellPID(t, ctx, tr)
	marker := "/tmp/fedi-session-ran-" + freshSeed(t)
	go func() {
		time.Sleep(500 * time.Millisecond)
		killOnNode(t, ctx, tr, pid)
	}()
	// The command appends a line each time it runs: it must run once, and its lost
	// result be an error rather than a second run.
	_, err := tr.Run(ctx, []string{"sh", "-c", `echo ran >> "$1"; sleep 2`, "sh", marker}, deploybody.RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "exec session ended") || !strings.Contains(err.Error(), tr.node) {
		t.Fatalf("err = %v, want the lost session named, with the node", err)
	}
	if errors.Is(err, deploybody.ErrUnreachable) {
		t.Fatalf("err = %v: the instance still runs, so the node is not unreachable", err)
	}
	res, err := tr.Run(ctx, []string{"sh", "-c", `cat "$1"; rm -f "$1"`, "sh", marker}, deploybody.RunOptions{})
	if err != nil || string(res.Stdout) != "ran\n" {
		t.Fatalf("the command ran %q times (err %v), want once", res.Stdout, err)
	}
}

func TestLabExecSessionCancelledCommandEndsTheSessionNotTheNext(t *testing.T) {
	labtest.Require(t)
	tr := labTransport(t, labtest.Nodes(t)[0])
	defer func() { _ = tr.Close() }()
	ctx := labCtx(t)

	shellPID(t, ctx, tr)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := tr.Run(cctx, []string{"sleep", "20"}, deploybody.RunOptions{}); err == nil {
		t.Fatal("a command whose context ended returned no error")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the cancelled command returned after %s", d)
	}
	res, err := tr.Run(ctx, []string{"echo", "next"}, deploybody.RunOptions{})
	if err != nil || string(res.Stdout) != "next\n" {
		t.Fatalf("the next command: %v %q", err, res.Stdout)
	}
}

func TestLabRecordedExecOnlyOpensNoSession(t *testing.T) {
	labtest.Require(t)
	node := labtest.Nodes(t)[0]
	c, err := incusapi.NewFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(Config{Client: c, Instance: node.Instance, Project: node.Project, Node: node.Name, RecordedExecOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Run(labCtx(t), []string{"echo", "recorded"}, deploybody.RunOptions{})
	if err != nil || string(res.Stdout) != "recorded\n" || tr.sessOpens != 0 || tr.viaRecorded.Load() != 1 {
		t.Fatalf("got %v %q, %d sessions, %d recorded", err, res.Stdout, tr.sessOpens, tr.viaRecorded.Load())
	}
}

func TestLabExecSessionCloseEndsTheShell(t *testing.T) {
	labtest.Require(t)
	tr := labTransport(t, labtest.Nodes(t)[0])
	ctx := labCtx(t)
	pid := shellPID(t, ctx, tr)
	s := tr.sess
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	// The shell ends by itself at the end of its stdin: its stdout ends (the session's
	// pump sees it) and the process is gone from the node.
	for i := 0; ; i++ {
		s.omu.Lock()
		ended := s.ends[0] != nil
		s.omu.Unlock()
		res, err := tr.c.Exec(ctx, tr.instance, incusapi.ExecRequest{Command: []string{"sh", "-c", `kill -0 "$0" 2>/dev/null && echo alive || echo gone`, strconv.Itoa(pid)}})
		if err != nil {
			t.Fatal(err)
		}
		if ended && strings.TrimSpace(string(res.Stdout)) == "gone" {
			return
		}
		if i == 50 {
			t.Fatalf("5 s after Close: stdout ended %v, shell %d %s", ended, pid, res.Stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A secret given as stdin (a join token, a kube token) is never on the node's disk
// and never outlives its command: it is staged on /run's tmpfs in a directory only
// root enters, unlinked before the command runs, and what a killed run left (there, or
// in /var/tmp where older versions staged it) is removed at the next run's start. With
// the session and with recorded execs only (whose staging directory is made on its own).
func TestLabStdinIsStagedOnTmpfsAndGone(t *testing.T) {
	labtest.Require(t)
	node := labtest.Nodes(t)[0]
	for _, recordedOnly := range []bool{false, true} {
		t.Run(map[bool]string{false: "session", true: "recorded execs"}[recordedOnly], func(t *testing.T) {
			ctx := labCtx(t)
			// What a run killed between the push and the command leaves, ten minutes ago.
			labtest.Incus(t, "exec", node.Instance, "--project", node.Project, "--", "sh", "-c",
				`mkdir -p /run/fediversity-stdin && for f in /run/fediversity-stdin/fediversity-stdin-killed /var/tmp/fediversity-stdin-killed; do
				   echo old-token > "$f"; touch -d '-10 min' "$f"; done`)
			c, err := incusapi.NewFromEnv()
			if err != nil {
				t.Fatal(err)
			}
			tr, err := New(Config{Client: c, Instance: node.Instance, Project: node.Project, Node: node.Name, Log: t.Logf, RecordedExecOnly: recordedOnly})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tr.Close() }()
			// While the command runs: its stdin read whole, no staged file anywhere.
			probe := `cat; echo; ls -A /run/fediversity-stdin | wc -l; ls /var/tmp | grep -c '^fediversity-stdin-' || true
				stat -c %a /run/fediversity-stdin; stat -f -c %T /run`
			res, err := tr.Run(ctx, []string{"sh", "-c", probe}, deploybody.RunOptions{Stdin: []byte("kube-token-s3cret")})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("run with stdin: %v %+v", err, res)
			}
			got := strings.Fields(string(res.Stdout))
			want := []string{"kube-token-s3cret", "0", "0", "700", "tmpfs"}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("while the command ran: %q, want %q (token; files staged on /run; in /var/tmp; the directory's mode; /run's file system)", got, want)
			}
			after := labtest.Incus(t, "exec", node.Instance, "--project", node.Project, "--", "sh", "-c",
				`grep -rl s3cret /run/fediversity-stdin /var/tmp 2>/dev/null | wc -l`)
			if strings.TrimSpace(after) != "0" {
				t.Fatalf("%s files on the node still hold the token after the run", strings.TrimSpace(after))
			}
		})
	}
}
