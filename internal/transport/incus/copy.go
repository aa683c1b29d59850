package incus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
)

// CopyClosure makes the node's store hold the closure of storePath. It asks the node
// which paths of the closure it lacks, and streams only those
// (nixstore.AddToStoreStream) into `nix-store --serve --write` on the node, over the
// stdin of an exec of its own (streamImport), as `nix copy --to ssh://` streams into
// the same command over SSH: no file on either side. The same exec then prints which
// paths of the closure the node still lacks (remote.ImportScript).
//
// A break (the stream cut, incusd gone, the local store failing, the deploy cancelled)
// leaves the node's store consistent: the node adds each path once its archive arrived
// whole and hashed right, in a transaction of its own, in the closure's order (a path
// after the paths it references), so it holds every path whose bytes all arrived and
// none of the one cut; a path cut halfway through its write stays invalid and is
// overwritten by the next copy. The next copy asks again and sends only the rest.
func (t *Transport) CopyClosure(ctx context.Context, storePath string) (deploybody.CopyStats, error) {
	const phase = "copy closure"
	var stats deploybody.CopyStats
	closure, err := nixstore.Closure(ctx, storePath)
	if err != nil {
		return stats, t.errorf(phase, "%w", err)
	}
	stats.PathsTotal, stats.Closure = len(closure), closure
	step := time.Now()
	lap := func() time.Duration {
		now := time.Now()
		d := now.Sub(step).Round(time.Millisecond)
		step = now
		return d
	}
	missing, err := remote.RootAndMissingPaths(ctx, t.runner(), storePath, closure)
	if err != nil {
		return stats, t.wrapErr(phase, err)
	}
	t.logPrintf("copy %s: node lacks %d of %d paths (asked in %s)", storePath, len(missing), len(closure), lap())
	if len(missing) == 0 {
		return stats, nil
	}

	// The import and the check of the closure in one exec (closures of up to a few
	// hundred paths; larger ones are checked separately). The paths go as arguments,
	// never in the script.
	inline := remote.VerifyInline(closure)
	argv := []string{"/bin/sh", "-c", remote.ImportScript, "sh"}
	if inline {
		argv = append(argv, closure...)
	}
	st, err := t.c.OpenExec(ctx, t.instance, incusapi.ExecRequest{
		Command:     argv,
		Environment: map[string]string{"PATH": t.nodePath(ctx)},
	})
	if err != nil {
		return stats, t.classify(ctx, phase+": open the import", err)
	}
	export := func(ctx context.Context, w io.Writer) error { return t.exportPaths(ctx, missing, w) }
	res, err := streamImport(ctx, st, st.Stdout, st.Stderr, t.outputLimit(), export, func(sent int64) {
		t.logPrintf("copy %s: %d MiB sent", storePath, sent>>20)
	})
	stats.BytesSent = res.sent
	if err != nil {
		return stats, t.classify(ctx, phase, fmt.Errorf("%w (the node keeps the paths that arrived whole; the next apply sends only the rest)", err))
	}
	if res.exitCode != 0 {
		return stats, t.errorf(phase, "nix-store --serve --write exited %d: %s (is Nix installed on the node and is its store writable?)",
			res.exitCode, trim(res.stderr))
	}
	stats.PathsMissing, stats.Sent = len(missing), missing
	t.logPrintf("copy: streamed %d paths, %d bytes, into the node's import in %s", len(missing), res.sent, lap())
	still := remote.InvalidPaths(string(res.stdout), closure)
	if !inline {
		if still, err = remote.MissingPaths(ctx, t.runner(), closure); err != nil {
			return stats, t.wrapErr(phase+": verify", err)
		}
	}
	if len(still) > 0 {
		return stats, t.errorf(phase, "after the import the node still lacks %d paths (first %s)", len(still), still[0])
	}
	t.logPrintf("copy: verified in %s", lap())
	return stats, nil
}

// outputLimit bounds each output stream of one command.
func (t *Transport) outputLimit() int64 {
	if t.c.MaxOutput > 0 {
		return t.c.MaxOutput
	}
	return incusapi.DefaultMaxOutput
}

// importExec is what streamImport needs of a streamed exec (incusapi.ExecStream): an
// interface so that a unit test can break the stream where incusd cannot be made to.
type importExec interface {
	Write(p []byte) (int, error)
	CloseStdin() error
	Close()
	Wait(ctx context.Context) (int, error)
}

// importResult is what a streamed import returned: the command's exit code and output,
// and the bytes of the export that went into its stdin.
type importResult struct {
	exitCode       int
	stdout, stderr []byte
	sent           int64
}

// Bounds of the ends of a streamed import.
const (
	// importEndGrace is how long a broken or failed stream waits for the node's
	// command to end on its own (its stdin ended) before it is killed.
	importEndGrace = 10 * time.Second
	// copyProgressEvery is how many bytes pass between two progress messages.
	copyProgressEvery = 64 << 20
)

// streamImport runs export into the stdin of st (a command already started on the
// node) and returns the command's result once its stdin, stdout and stderr have ended.
//
//   - The export finished: stdin is ended, and the command's exit code and output are
//     the result.
//   - The export failed: stdin is ended all the same, so the node's import fails on
//     its own on the cut stream; the error names the export's failure and the node's.
//   - A write to stdin failed (the websocket or incusd gone): the export is stopped
//     and the error says how many bytes had gone.
//   - The command ended before the export did (the import failed on the node): the
//     export is stopped, and the result is the command's.
//   - ctx ended: the export is stopped and stdin ended, so the import keeps what
//     arrived whole; the command is killed if it does not end by itself.
//
// st is closed on return in every case.
func streamImport(ctx context.Context, st importExec, stdout, stderr io.Reader, limit int64,
	export func(context.Context, io.Writer) error, progress func(sent int64)) (importResult, error) {
	defer st.Close()
	var res importResult
	outs := [2]*boundedBuffer{{limit: limit}, {limit: limit}}
	outDone := make(chan error, 2)
	for i, r := range []io.Reader{stdout, stderr} {
		go func() { outDone <- outs[i].readFrom(r) }()
	}
	outputsEnded := 0
	var outErr error
	waitOutputs := func(wctx context.Context) bool {
		for outputsEnded < 2 {
			select {
			case err := <-outDone:
				outputsEnded++
				outErr = errors.Join(outErr, err)
			case <-wctx.Done():
				return false
			}
		}
		return true
	}

	exportCtx, stopExport := context.WithCancel(ctx)
	defer stopExport()
	w := &stdinWriter{st: st, progress: progress}
	exportDone := make(chan error, 1)
	go func() { exportDone <- export(exportCtx, w) }()

	// interrupted ends a copy whose ctx ended. The node's import gets the end of its
	// input rather than a kill, so it keeps every path whose bytes had arrived whole
	// before the cut (bounded by importEndGrace; then it is killed).
	interrupted := func(exportStopped bool) (importResult, error) {
		if !exportStopped {
			stopExport()
			var stopped error
			select {
			case stopped = <-exportDone:
			case <-time.After(importEndGrace): // a write blocked on a daemon that stopped reading
				st.Close()
				stopped = <-exportDone
			}
			_ = stopped // the export's own error is the interruption: it is not reported
		}
		if w.err == nil && st.CloseStdin() == nil {
			end, cancel := context.WithTimeout(context.WithoutCancel(ctx), importEndGrace)
			waitOutputs(end)
			cancel()
		}
		st.Close()
		res.sent = w.sent
		return res, fmt.Errorf("copy interrupted after %d bytes of the export: %w", w.sent, ctx.Err())
	}
	// stopExportNow ends the export and waits for it: the stream is closed first, so a
	// write blocked on a daemon that stopped reading cannot hold the export.
	stopExportNow := func() error {
		stopExport()
		st.Close()
		return <-exportDone
	}

	var exportErr error
	endedFirst := false // the command ended before the export did
	select {
	case exportErr = <-exportDone:
	case err := <-outDone:
		// The command ended before the export did: it failed early. No more bytes are
		// wanted: once the rest of its output is read, the export is stopped (closing
		// the stream first, as a write may be blocked on it).
		outputsEnded++
		outErr = err
		rest, cancel := context.WithTimeout(ctx, importEndGrace)
		waitOutputs(rest)
		cancel()
		_ = stopExportNow()
		endedFirst = true
	case <-ctx.Done():
		return interrupted(false)
	}
	res.sent = w.sent
	if ctx.Err() != nil {
		return interrupted(true)
	}
	if w.err == nil && !endedFirst {
		// The end of stdin: after a whole stream the node's command ends; after a failed
		// one it meets the end of its input, in the middle of an object or between two,
		// and ends on its own. An error here is a broken stream, seen again below.
		if err := st.CloseStdin(); err != nil {
			w.err = err
		}
	}
	// The command's end: bounded by ctx after a whole export, by importEndGrace after a
	// failure (then the command is killed by Close).
	endCtx := ctx
	if exportErr != nil || w.err != nil || endedFirst {
		var cancel context.CancelFunc
		endCtx, cancel = context.WithTimeout(ctx, importEndGrace)
		defer cancel()
	}
	ended := waitOutputs(endCtx)
	if !ended {
		st.Close() // kills the command; its output readers end with the websockets
	}
	res.stdout, res.stderr = outs[0].bytes(), outs[1].bytes()
	if ended && outErr == nil {
		code, err := st.Wait(endCtx)
		switch {
		case err != nil:
			outErr = err
		case code == 0 && (endedFirst || exportErr == nil && w.err == nil):
			// The whole stream went and the node added all of it (or the node ended
			// first, well): what the node holds is checked by the caller either way.
			return res, nil
		case code == 0:
			// The node's command ends well at the end of its input when the stream broke
			// between two store objects: the break is the error (reported below), and
			// the node keeps the objects before it.
		default:
			res.exitCode = code
			if endedFirst || (exportErr == nil && w.err == nil) {
				// The import failed on the node by itself; the caller reports it.
				return res, nil
			}
		}
	}
	if ctx.Err() != nil {
		return interrupted(true)
	}
	node := nodeSide(ended, outErr, res)
	if w.err != nil {
		return res, fmt.Errorf("the stream into the node's nix-store --serve --write broke after %d bytes: %w; node side: %s", w.sent, w.err, node)
	}
	return res, fmt.Errorf("local %w (after %d bytes were sent); node side: %s", exportErr, w.sent, node)
}

// nodeSide says how the node's import ended, for an error message.
func nodeSide(ended bool, outErr error, res importResult) string {
	switch {
	case !ended:
		return fmt.Sprintf("nix-store --serve --write had not ended %s after its input did, and was killed", importEndGrace)
	case outErr != nil:
		return fmt.Sprintf("its output ended with %v", outErr)
	case res.exitCode == 0:
		return "nix-store --serve --write exited 0"
	}
	return fmt.Sprintf("nix-store --serve --write exited %d: %s", res.exitCode, trim(res.stderr))
}

// stdinWriter writes the export into the command's stdin, counting what went; its
// first failure is kept (a broken stream) and every later write fails at once.
type stdinWriter struct {
	st       importExec
	sent     int64
	err      error
	progress func(sent int64)
}

func (w *stdinWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.st.Write(p)
	before := w.sent
	w.sent += int64(n)
	if err != nil {
		w.err = err
		return n, err
	}
	if w.progress != nil && w.sent/copyProgressEvery != before/copyProgressEvery {
		w.progress(w.sent)
	}
	return n, nil
}

// boundedBuffer keeps the first limit bytes of a stream and reads the rest away.
type boundedBuffer struct {
	limit int64
	mu    sync.Mutex
	buf   []byte
}

// readFrom reads r to its end (nil for a plain end).
func (b *boundedBuffer) readFrom(r io.Reader) error {
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		b.mu.Lock()
		if keep := min(int64(n), b.limit-int64(len(b.buf))); keep > 0 {
			b.buf = append(b.buf, chunk[:keep]...)
		}
		b.mu.Unlock()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// bytes is what was kept so far.
func (b *boundedBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...)
}
