package remote

import (
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
	if i := slices.Index(argv, ImportScript); i >= 0 { // the import-and-check script
		argv = slices.Clone(argv)
		argv[i] = strings.ReplaceAll(ImportScript, "nix-store ", "nix-store --store "+Quote(c.root)+" ")
	}
	return c.localRunner.Exec(ctx, argv, stdin, stdout, stderr)
}

func TestCopyClosureSendsOnlyMissingPaths(t *testing.T) {
	if _, err := exec.LookPath("nix-build"); err != nil {
		if os.Getenv("FEDIVERSITY_LAB") == "1" {
			t.Fatal("nix-build is not installed")
		}
		t.Skip("nix-build is not installed on this machine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	file, _ := filepath.Abs("../../../lab/closures/default.nix")
	build := func(attr string) string {
		p, err := nixstore.Build(ctx, nixstore.BuildSpec{File: file, Attr: attr, ArgStr: map[string]string{"seed": "remote-copy-test"}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, v2 := build("good"), build("good-v2")
	node := &chrootNode{localRunner: localRunner{env: os.Environ()}, root: t.TempDir()}
	var logged []string
	log := Logger(func(f string, a ...any) { logged = append(logged, f) })

	st, err := CopyClosure(ctx, node, good, log)
	if err != nil {
		t.Fatal(err)
	}
	if st.PathsTotal != 3 || st.PathsMissing != 3 || st.BytesSent < 256<<10 {
		t.Fatalf("first copy: %+v, want 3 of 3 paths and the payload's bytes", st)
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
