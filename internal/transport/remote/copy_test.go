package remote

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// chrootNode is this machine's real nix-store acting on a chroot store (--store DIR):
// an empty "node" store without the lab. It runs what CopyClosure asks, through a real
// shell, and only adds --store to nix-store. The SSH lab tests copy into real nodes.
type chrootNode struct {
	localRunner
	root  string
	execs int
}

func (c *chrootNode) Exec(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	c.execs++
	if i := slices.Index(argv, "nix-store"); i >= 0 {
		argv = slices.Insert(slices.Clone(argv), i+1, "--store", c.root)
	}
	// The import-and-check script, with or without its PATH in front (WithPath).
	if i := slices.IndexFunc(argv, func(a string) bool { return strings.HasSuffix(a, ImportScript) }); i >= 0 {
		argv = slices.Clone(argv)
		argv[i] = strings.ReplaceAll(argv[i], "nix-store ", "nix-store --store "+Quote(c.root)+" ")
	}
	return c.localRunner.Exec(ctx, argv, stdin, stdout, stderr)
}

// buildLabClosure builds attr of lab/closures with seed on this machine's nix (a lab run
// fails without nix-build; elsewhere the test is skipped).
func buildLabClosure(ctx context.Context, t *testing.T, attr, seed string) string {
	t.Helper()
	if _, err := exec.LookPath("nix-build"); err != nil {
		if os.Getenv("FEDIVERSITY_LAB") == "1" {
			t.Fatal("nix-build is not installed")
		}
		t.Skip("nix-build is not installed on this machine")
	}
	// The lab's stand-ins are built by /bin/sh, which a build sandbox lacks; the product
	// leaves the deployer's sandbox setting alone, so the test sets it.
	t.Setenv("NIX_CONFIG", os.Getenv("NIX_CONFIG")+"\nsandbox = false")
	file, _ := filepath.Abs("../../../lab/closures/default.nix")
	p, err := nixstore.Build(ctx, nixstore.BuildSpec{File: file, Attr: attr, ArgStr: map[string]string{"seed": seed}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCopyClosureSendsOnlyMissingPaths(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	good, v2 := buildLabClosure(ctx, t, "good", "remote-copy-test"), buildLabClosure(ctx, t, "good-v2", "remote-copy-test")
	node := &chrootNode{localRunner: localRunner{env: os.Environ()}, root: t.TempDir()}
	var logged []string
	log := Logger(func(f string, a ...any) { logged = append(logged, f) })

	st, err := CopyClosure(ctx, node, good, log)
	if err != nil {
		t.Fatal(err)
	}
	closure, err := nixstore.Closure(ctx, good)
	if err != nil {
		t.Fatal(err)
	}
	if st.PathsTotal != len(closure) || st.PathsMissing != len(closure) || st.BytesSent < 256<<10 {
		t.Fatalf("first copy: %+v, want %d of %d paths (the whole closure) and the payload's bytes", st, len(closure), len(closure))
	}
	if _, err := os.Stat(filepath.Join(node.root, good, "bin/switch-to-configuration")); err != nil {
		t.Fatalf("node store lacks the toplevel: %v", err)
	}
	// Again: nothing is sent.
	st, err = CopyClosure(ctx, node, good, log)
	if err != nil || st.PathsMissing != 0 || st.BytesSent != 0 {
		t.Fatalf("re-copy: %+v %v, want 0 paths and 0 bytes", st, err)
	}
	// good-v2 shares tools and payload: only its toplevel travels.
	st, err = CopyClosure(ctx, node, v2, log)
	if err != nil || st.PathsMissing != 1 || st.BytesSent == 0 || st.BytesSent > 64<<10 {
		t.Fatalf("copy of v2: %+v %v, want only the toplevel sent", st, err)
	}
	if len(logged) == 0 {
		t.Error("copy logged no progress")
	}
	missing, err := MissingPaths(ctx, node, []string{good, "/nix/store/00000000000000000000000000000000-not-there"})
	if err != nil || len(missing) != 1 || !strings.HasSuffix(missing[0], "-not-there") {
		t.Fatalf("MissingPaths = %q, %v", missing, err)
	}
}

func TestMissingPathsBatchesLongClosures(t *testing.T) {
	// 1000 paths would make a command line over Linux's 128 KiB argument limit if sent
	// at once; the batches must each stay under it.
	var paths []string
	for i := 0; i < 1000; i++ {
		paths = append(paths, "/nix/store/00000000000000000000000000000000-"+strings.Repeat("p", 120)+"-"+itoa(i))
	}
	rec := &recordingRunner{}
	if _, err := MissingPaths(context.Background(), rec, paths); err != nil {
		t.Fatal(err)
	}
	if rec.calls != 3 || rec.maxLine > 100<<10 {
		t.Fatalf("%d calls, longest command line %d bytes", rec.calls, rec.maxLine)
	}
}

// recordingRunner only measures command lines (no node is needed to count bytes).
type recordingRunner struct{ calls, maxLine int }

func (r *recordingRunner) Exec(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	line, err := ShellJoin(argv)
	if err != nil {
		return 0, err
	}
	r.calls++
	r.maxLine = max(r.maxLine, len(line))
	return 0, nil
}

func itoa(i int) string { return strconv.Itoa(i) }

// cutStdinNode is a chrootNode whose stdin (the copy's stream) breaks after cutAt
// bytes, as a dropped SSH connection cuts it: the node's nix-store --serve --write
// meets the end of its input in the middle of an object.
type cutStdinNode struct {
	*chrootNode
	cutAt int64
}

func (c *cutStdinNode) Exec(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if stdin != nil {
		stdin = &cutReader{r: stdin, left: c.cutAt}
	}
	return c.chrootNode.Exec(ctx, argv, stdin, stdout, stderr)
}

type cutReader struct {
	r    io.Reader
	left int64
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := c.r.Read(p[:min(int64(len(p)), c.left)])
	c.left -= int64(n)
	return n, err
}

// A stream cut in the middle of the closure's largest object fails the copy, and the
// node keeps exactly the objects before it (each is added only once it arrived whole);
// the next copy sends only the rest, and the node then verifies the whole closure.
func TestCopyClosureCutMidStreamThenSendsOnlyTheRest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	top := buildLabClosure(ctx, t, "good", "remote-copy-cut-test")
	closure, err := nixstore.Closure(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := nixstore.QueryPathInfos(ctx, closure)
	if err != nil {
		t.Fatal(err)
	}
	largest := 0
	for i, p := range closure {
		if infos[p].NarSize > infos[closure[largest]].NarSize {
			largest = i
		}
	}
	var whole bytes.Buffer
	if err := nixstore.AddToStoreStream(ctx, closure, &whole); err != nil {
		t.Fatal(err)
	}
	// The largest object's command starts with its path; its header is under 1 KiB.
	at := int64(bytes.Index(whole.Bytes(), []byte(closure[largest])))
	cutAt := at + 1024 + infos[closure[largest]].NarSize/2

	node := &chrootNode{localRunner: localRunner{env: os.Environ()}, root: t.TempDir()}
	log := Logger(func(string, ...any) {})
	st, err := CopyClosure(ctx, &cutStdinNode{chrootNode: node, cutAt: cutAt}, top, log)
	if err == nil {
		t.Fatalf("a copy cut after %d of %d bytes succeeded: %+v", cutAt, whole.Len(), st)
	}
	t.Logf("cut after %d of %d bytes: %v", cutAt, whole.Len(), err)
	missing, err := MissingPaths(ctx, node, closure)
	if err != nil {
		t.Fatal(err)
	}
	if want := closure[largest:]; !slices.Equal(missing, want) {
		t.Fatalf("after the cut the node lacks %q, want %q (the objects before the cut kept, the cut one and after not)", missing, want)
	}
	st, err = CopyClosure(ctx, node, top, log)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Sent, missing) {
		t.Fatalf("the second copy sent %q, want only the missing %q", st.Sent, missing)
	}
	if out, err := exec.Command(nixstore.NixStoreBin, append([]string{"--store", node.root, "--verify-path"}, closure...)...).CombinedOutput(); err != nil {
		t.Fatalf("the node's store does not verify the closure: %v\n%s", err, out)
	}
}
