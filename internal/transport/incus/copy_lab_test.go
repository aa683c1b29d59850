package incus

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
)

// countWriter counts what is written to it.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// cutExport is the real stream of the copy (nixstore.AddToStoreStream) cut after the
// bytes cutAt picks (from the stream's whole size): the deploy's context is cancelled there, as an
// interrupted apply does, and nothing more reaches the node.
func cutExport(t *testing.T, cancel context.CancelFunc, cutAt func(size int64) int64) func(context.Context, []string, io.Writer) error {
	return func(ctx context.Context, paths []string, w io.Writer) error {
		var size countWriter
		if err := nixstore.AddToStoreStream(ctx, paths, &size); err != nil {
			return err
		}
		limit := cutAt(size.n)
		t.Logf("the stream of %d paths is %d bytes; cut after %d", len(paths), size.n, limit)
		return nixstore.AddToStoreStream(ctx, paths, &cutWriter{w: w, left: limit, cut: cancel})
	}
}

type cutWriter struct {
	w    io.Writer
	left int64
	cut  context.CancelFunc
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if int64(len(p)) < c.left {
		n, err := c.w.Write(p)
		c.left -= int64(n)
		return n, err
	}
	n, err := c.w.Write(p[:c.left])
	c.left = 0
	c.cut()
	if err == nil {
		err = context.Canceled
	}
	return n, err
}

// nodeHolds checks the node's store after a cut: it lacks what lacks says, the paths it
// holds pass nix-store --verify-path (the cut left nothing half-registered), and no
// nix-store --serve of the cut stream is left running. It returns the missing paths.
func nodeHolds(t *testing.T, tr *Transport, closure []string) []string {
	t.Helper()
	ctx := labCtx(t)
	missing, err := remote.MissingPaths(ctx, tr.runner(), closure)
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, p := range closure {
		if !slices.Contains(missing, p) {
			held = append(held, p)
		}
	}
	if len(held) > 0 {
		res, err := tr.Run(ctx, append([]string{"nix-store", "--verify-path"}, held...), deploybody.RunOptions{})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("the paths the node holds after the cut do not verify: %v %+v", err, res)
		}
	}
	for i := 0; ; i++ {
		res, err := tr.Run(ctx, []string{"pgrep", "-f", "^nix-store --serve"}, deploybody.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == 1 {
			break
		}
		if i == 50 {
			t.Fatalf("the cut stream's nix-store --serve still runs on the node: %s", res.Stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return missing
}

// A copy cut in the middle of its stream fails as an interrupted copy; the node's store
// keeps the paths that arrived whole and nothing of the one cut; a second copy cut in
// its last path leaves the node lacking only that path; the third copy sends only that
// path, and the node holds the whole closure, verified.
func TestLabCopyCutMidStreamThenRetrySendsOnlyTheRest(t *testing.T) {
	labtest.Require(t)
	node := labtest.Nodes(t)[0]
	top := labtest.BuildClosureSeed(t, labtest.ClosureGood, freshSeed(t))
	closure, err := nixstore.Closure(labCtx(t), top)
	if err != nil {
		t.Fatal(err)
	}
	copyCut := func(cutAt func(int64) int64) error {
		ctx, cancel := context.WithCancel(labCtx(t))
		defer cancel()
		tr := labTransport(t, node)
		defer func() { _ = tr.Close() }()
		tr.exportPaths = cutExport(t, cancel, cutAt)
		_, err := tr.CopyClosure(ctx, top)
		return err
	}
	check := labTransport(t, node)
	defer func() { _ = check.Close() }()

	// Cut 1: half-way (inside the payload, most of the bytes).
	err = copyCut(func(size int64) int64 { return size / 2 })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "copy interrupted after") ||
		!strings.Contains(err.Error(), "the next apply sends only the rest") {
		t.Fatalf("cut copy: want an interrupted copy, got %v", err)
	}
	missing := nodeHolds(t, check, closure)
	if len(missing) == 0 || !slices.Contains(missing, top) {
		t.Fatalf("after a cut half-way the node lacks %v, want at least the toplevel", missing)
	}

	// Cut 2: in the last 512 bytes, inside the toplevel (streamed after what it uses).
	if err := copyCut(func(size int64) int64 { return size - 512 }); !errors.Is(err, context.Canceled) {
		t.Fatalf("second cut copy: want an interrupted copy, got %v", err)
	}
	if missing = nodeHolds(t, check, closure); !slices.Equal(missing, []string{top}) {
		t.Fatalf("after a cut in the last path the node lacks %v, want only the toplevel %s", missing, top)
	}

	// The retry sends only the missing path, and the node then holds the whole closure.
	tr := labTransport(t, node)
	defer func() { _ = tr.Close() }()
	stats, err := tr.CopyClosure(labCtx(t), top)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if !slices.Equal(stats.Sent, []string{top}) || stats.PathsTotal != len(closure) {
		t.Fatalf("retry sent %v of %d paths, want only %s", stats.Sent, stats.PathsTotal, top)
	}
	if missing = nodeHolds(t, check, closure); len(missing) != 0 {
		t.Fatalf("after the retry the node still lacks %v", missing)
	}
}
