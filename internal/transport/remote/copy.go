package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// checkBatch bounds how many paths go into one remote command line: a shell command
// line is one argument on the node, and Linux caps one argument at 128 KiB.
const checkBatch = 400

// MissingPaths returns the paths the node's store does not hold (as valid paths), in
// the order given. It asks `nix-store --check-validity --print-invalid` on the node.
func MissingPaths(ctx context.Context, r Runner, paths []string) ([]string, error) {
	return missingPaths(ctx, r, "", paths)
}

// RootAndMissingPaths is MissingPaths, with the pushed closure's GC root
// (deploybody.PushedRoot) pointed at toplevel in the same first round trip: from then
// on a garbage collection on the node keeps whatever of the closure it holds.
func RootAndMissingPaths(ctx context.Context, r Runner, toplevel string, paths []string) ([]string, error) {
	if !nixstore.ValidStorePath(toplevel) {
		return nil, fmt.Errorf("root the pushed closure: %q is not a store path", toplevel)
	}
	return missingPaths(ctx, r, toplevel, paths)
}

func missingPaths(ctx context.Context, r Runner, root string, paths []string) ([]string, error) {
	var missing []string
	if len(paths) == 0 && root != "" {
		if _, err := runSys(ctx, r, nil, "/bin/sh", "-c", deploybody.PushRootScript, "sh", root, "true"); err != nil {
			return nil, fmt.Errorf("root the pushed closure at %s: %w", deploybody.PushedRoot, err)
		}
	}
	for start := 0; start < len(paths); start += checkBatch {
		batch := paths[start:min(start+checkBatch, len(paths))]
		for _, p := range batch {
			if !nixstore.ValidStorePath(p) {
				return nil, fmt.Errorf("ask the node which paths it lacks: %q is not a store path", p)
			}
		}
		argv := append([]string{"nix-store", "--check-validity", "--print-invalid"}, batch...)
		if start == 0 && root != "" {
			argv = append([]string{"/bin/sh", "-c", deploybody.PushRootScript, "sh", root}, argv...)
		}
		out, err := runSys(ctx, r, nil, argv...)
		if err != nil {
			return nil, fmt.Errorf("ask the node which paths it lacks: %w", err)
		}
		missing = append(missing, InvalidPaths(out, batch)...)
	}
	return missing, nil
}

// InvalidPaths reads the output of `nix-store --check-validity --print-invalid` asked
// about paths: the paths it names, in the order of paths.
func InvalidPaths(out string, paths []string) []string {
	invalid := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			invalid[l] = true
		}
	}
	var missing []string
	for _, p := range paths {
		if invalid[p] {
			missing = append(missing, p)
		}
	}
	return missing
}

// VerifyInline says whether a closure is small enough to be checked in the same
// command as its import (ImportScript): its paths fit one command line.
func VerifyInline(closure []string) bool { return len(closure) <= checkBatch }

// ImportScript adds the store objects of a nixstore.AddToStoreStream to the node's store
// (nixstore.ServeCommand, its answers dropped: the stream does not wait for them) and
// then prints which of its arguments (the closure's paths) the store still lacks: the
// import and its check in one round trip. The stream is its stdin, over SSH and over
// Incus alike (no file on either side).
var ImportScript = strings.Join(nixstore.ServeCommand, " ") + ` >/dev/null || exit; ` +
	`exec nix-store --check-validity --print-invalid "$@"`

// CopyClosure makes the node hold the closure of storePath: it streams, from the local
// store, only the paths the node lacks into `nix-store --serve --write` on the node
// (nixstore.AddToStoreStream), then checks that the node now holds the whole closure.
func CopyClosure(ctx context.Context, r Runner, storePath string, log Logger) (deploybody.CopyStats, error) {
	closure, err := nixstore.Closure(ctx, storePath)
	if err != nil {
		return deploybody.CopyStats{}, fmt.Errorf("copy closure: %w (build it first)", err)
	}
	stats := deploybody.CopyStats{PathsTotal: len(closure), Closure: closure}
	missing, err := RootAndMissingPaths(ctx, r, storePath, closure)
	if err != nil {
		return stats, fmt.Errorf("copy closure: %w", err)
	}
	stats.PathsMissing, stats.Sent = len(missing), missing
	if len(missing) == 0 {
		log.printf("copy %s: node holds all %d paths, nothing to send", storePath, len(closure))
		return stats, nil
	}
	log.printf("copy %s: sending %d of %d paths", storePath, len(missing), len(closure))

	pr, pw := io.Pipe()
	counter := &countingWriter{w: pw, progress: func(n int64) {
		log.printf("copy %s: %d MiB sent", storePath, n>>20)
	}}
	exportCtx, cancelExport := context.WithCancel(ctx)
	defer cancelExport()
	exportErr := make(chan error, 1)
	go func() {
		err := nixstore.AddToStoreStream(exportCtx, missing, counter)
		pw.CloseWithError(err) // nil closes cleanly: the import sees EOF
		exportErr <- err
	}()
	inline := VerifyInline(closure)
	importArgv := nixstore.ServeCommand
	if inline {
		importArgv = append([]string{"/bin/sh", "-c", ImportScript, "sh"}, closure...)
	}
	out, importErr := runSys(ctx, r, pr, importArgv...)
	if importErr == nil {
		// The node's command ended with the stream, whose writer may not have returned
		// yet (seen with 16 copies at once on 2 cores). Stopping it then would fail a
		// copy that arrived whole: give it a moment to return on its own. What the node
		// holds is checked below either way.
		select {
		case err := <-exportErr:
			exportErr <- err
		case <-time.After(exportExitGrace):
		}
	}
	// If the import ended early, unblock and stop the export.
	pr.CloseWithError(io.ErrClosedPipe)
	cancelExport()
	expErr := <-exportErr
	stats.BytesSent = counter.n.Load()
	if importErr != nil {
		// The local stream's error counts only when it is its own: a closed pipe is the
		// node's command gone first, which the node's side says.
		if expErr != nil && ctx.Err() == nil && !errors.Is(expErr, io.ErrClosedPipe) {
			return stats, fmt.Errorf("copy closure: local %w; node side: %v", expErr, importErr)
		}
		return stats, fmt.Errorf("copy closure: import on the node: %w", importErr)
	}
	if expErr != nil {
		return stats, fmt.Errorf("copy closure: local %w", expErr)
	}
	still := InvalidPaths(out, closure)
	if !inline {
		if still, err = MissingPaths(ctx, r, closure); err != nil {
			return stats, fmt.Errorf("copy closure: verify: %w", err)
		}
	}
	if len(still) > 0 {
		return stats, fmt.Errorf("copy closure: after the import the node still lacks %d paths (first %s)", len(still), still[0])
	}
	log.printf("copy %s: sent %d paths, %d bytes", storePath, len(missing), stats.BytesSent)
	return stats, nil
}

// exportExitGrace is how long a finished import waits for the local export to exit.
const exportExitGrace = 30 * time.Second

// progressEvery is how many bytes pass between two progress messages of a copy.
const progressEvery = 64 << 20

type countingWriter struct {
	w        io.Writer
	n        atomic.Int64
	progress func(sent int64)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	after := c.n.Add(int64(n))
	if c.progress != nil && after/progressEvery != (after-int64(n))/progressEvery {
		c.progress(after)
	}
	return n, err
}
