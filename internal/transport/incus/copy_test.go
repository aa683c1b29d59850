package incus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
)

// fakeImport stands in for the node's nix-store --serve --write behind a streamed exec.
// A fake is used because the faults tested cannot be had from the real parts on demand:
// the stdin websocket dropped by incusd in the middle of a stream (the lab's incusd is
// shared and cannot be stopped for one test), and a local stream that fails halfway
// (it fails only on a modified or corrupt local store). The lab test
// TestLabCopyCutMidStreamThenRetrySendsOnlyTheRest cuts a real stream.
type fakeImport struct {
	mu       sync.Mutex
	got      int64
	breakAt  int64 // a Write that reaches this many bytes fails: the websocket dropped
	failAt   int64 // at this many bytes the import exits 1 and stops reading
	closedCh chan struct{}
	stdinEOF bool // CloseStdin was called
	killed   bool // Close was called before the command ended
	ended    bool
	code     int
	eofCode  int // the exit code at the end of its input: 1 in the middle of an object, 0 between two

	stdout, stderr *io.PipeWriter
}

func newFakeImport(breakAt int64) (*fakeImport, io.Reader, io.Reader) {
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	return &fakeImport{breakAt: breakAt, failAt: -1, eofCode: 1, stdout: outW, stderr: errW, closedCh: make(chan struct{})}, outR, errR
}

var errDropped = &incusapi.TransportError{Op: "exec (streamed)", Instance: "node", Err: io.ErrUnexpectedEOF}

func (f *fakeImport) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended && f.code == 1 {
		// A daemon that stopped reading the stdin of a command that ended: the write
		// blocks until the stream is closed.
		f.mu.Unlock()
		<-f.closedCh
		f.mu.Lock()
		return 0, errDropped
	}
	if f.ended {
		return 0, errDropped
	}
	if f.failAt >= 0 && f.got+int64(len(p)) >= f.failAt {
		f.got += int64(len(p))
		f.end(1, "error: cannot open connection to remote store 'daemon': Permission denied\n", nil)
		return len(p), nil
	}
	if f.breakAt >= 0 && f.got+int64(len(p)) >= f.breakAt {
		n := f.breakAt - f.got
		f.got = f.breakAt
		// incusd gone: every websocket of the exec ends without a word.
		f.end(-1, "", errDropped)
		return int(n), errDropped
	}
	f.got += int64(len(p))
	return len(p), nil
}

// end ends the command: its output streams close (with err, or plainly).
func (f *fakeImport) end(code int, stderr string, err error) {
	if f.ended {
		return
	}
	f.ended, f.code = true, code
	go func() {
		if stderr != "" {
			_, _ = f.stderr.Write([]byte(stderr))
		}
		f.stdout.CloseWithError(err)
		f.stderr.CloseWithError(err)
	}()
}

// CloseStdin: a stream cut in the middle of an object makes nix-store --serve --write
// fail on its own, as the real one does ("error: unexpected end-of-file"); cut between
// two objects, it ends well (eofCode 0).
func (f *fakeImport) CloseStdin() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return errDropped
	}
	f.stdinEOF = true
	if f.eofCode == 0 {
		f.end(0, "", nil)
		return nil
	}
	f.end(f.eofCode, "error: unexpected end-of-file\n", nil)
	return nil
}

func (f *fakeImport) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.closedCh:
	default:
		close(f.closedCh)
	}
	if !f.ended {
		f.killed = true
		f.end(-1, "", errors.New("killed"))
	}
}

func (f *fakeImport) Wait(context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.code < 0 {
		return -1, errDropped
	}
	return f.code, nil
}

// fakeExport writes size bytes in 32 KiB writes, as os/exec copies nix-store's output,
// stopping at the first failed write or when ctx ends; failAt > 0 makes it fail by
// itself after that many bytes.
type fakeExport struct {
	size, failAt int64
	wrote        int64
	err          error
	returned     bool
}

func (e *fakeExport) run(ctx context.Context, w io.Writer) error {
	defer func() { e.returned = true }()
	chunk := make([]byte, 32<<10)
	for e.wrote < e.size {
		if ctx.Err() != nil {
			e.err = ctx.Err()
			return e.err
		}
		if e.failAt > 0 && e.wrote >= e.failAt {
			e.err = errors.New("add to store: the archive of /nix/store/x is 1000 bytes where the local store registered 1200 (is the store path modified?)")
			return e.err
		}
		n, err := w.Write(chunk[:min(int64(len(chunk)), e.size-e.wrote)])
		e.wrote += int64(n)
		if err != nil {
			e.err = err
			return err
		}
	}
	return nil
}

func TestStreamImportBreakMidStreamFailsCleanly(t *testing.T) {
	const breakAt = 1<<20 + 100
	imp, out, errOut := newFakeImport(breakAt)
	exp := &fakeExport{size: 8 << 20}
	began := time.Now()
	res, err := streamImport(context.Background(), imp, out, errOut, 1<<20, exp.run, nil)
	if err == nil {
		t.Fatal("a stream cut in the middle was not an error")
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the broken copy took %s to fail", took)
	}
	for _, want := range []string{fmt.Sprintf("broke after %d bytes", breakAt), "cannot reach the daemon"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	var te *incusapi.TransportError
	if !errors.As(err, &te) {
		t.Errorf("the daemon's transport error is not in the chain (the transport would not call the node unreachable): %v", err)
	}
	if res.sent != breakAt {
		t.Errorf("sent = %d, want %d", res.sent, breakAt)
	}
	if !exp.returned || exp.wrote > breakAt || exp.err == nil {
		t.Errorf("the export was not stopped at the break: returned %v, wrote %d of %d, err %v", exp.returned, exp.wrote, exp.size, exp.err)
	}
	if imp.stdinEOF {
		t.Error("the broken stream was ended as if the export were whole")
	}
	// The transport names the node and says the node is unreachable.
	tr := &Transport{instance: "node", node: "web1"}
	cerr := tr.classify(context.Background(), "copy closure", err)
	if !strings.Contains(cerr.Error(), "node web1") || !strings.Contains(cerr.Error(), "check that incusd is running") {
		t.Errorf("classified error %q does not name the node and the daemon", cerr)
	}
}

// A stream that fails between two store objects: the node's command ends well at the
// end of its input, having added the objects before the break. The copy is an error
// all the same, never a success that the check of the closure alone would catch.
func TestStreamImportExportFailingBetweenObjectsIsAnError(t *testing.T) {
	imp, out, errOut := newFakeImport(-1)
	imp.eofCode = 0
	exp := &fakeExport{size: 8 << 20, failAt: 1 << 20}
	_, err := streamImport(context.Background(), imp, out, errOut, 1<<20, exp.run, nil)
	if err == nil {
		t.Fatal("a stream that failed between two objects was a success")
	}
	for _, want := range []string{"local add to store", "after 1048576 bytes were sent", "node side: nix-store --serve --write exited 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestStreamImportFailedExportEndsTheImportCleanly(t *testing.T) {
	imp, out, errOut := newFakeImport(-1)
	exp := &fakeExport{size: 8 << 20, failAt: 1 << 20}
	res, err := streamImport(context.Background(), imp, out, errOut, 1<<20, exp.run, nil)
	if err == nil {
		t.Fatal("a failed export was not an error")
	}
	for _, want := range []string{"local add to store: the archive of /nix/store/x", "after 1048576 bytes were sent",
		"node side: nix-store --serve --write exited 1: error: unexpected end-of-file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if !imp.stdinEOF || imp.killed {
		t.Errorf("the node's import was not left to end on its own input (stdin ended %v, killed %v)", imp.stdinEOF, imp.killed)
	}
	if res.sent != 1<<20 {
		t.Errorf("sent = %d, want %d", res.sent, 1<<20)
	}
}

// An interrupted copy stops the export and ends the import's input, so the node keeps
// the paths whose bytes arrived whole before the cut.
func TestStreamImportCancelStopsExportAndEndsTheImportsInput(t *testing.T) {
	imp, out, errOut := newFakeImport(-1)
	ctx, cancel := context.WithCancel(context.Background())
	exp := &fakeExport{size: 1 << 40} // endless unless stopped
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := streamImport(ctx, imp, out, errOut, 1<<20, exp.run, nil)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "copy interrupted after") {
		t.Fatalf("want an interrupted copy, got %v", err)
	}
	if !exp.returned || !imp.stdinEOF || imp.killed {
		t.Errorf("export stopped %v, node's input ended %v, node's import killed %v", exp.returned, imp.stdinEOF, imp.killed)
	}
}

func TestStreamImportFailingOnTheNodeStopsTheExport(t *testing.T) {
	imp, out, errOut := newFakeImport(-1)
	imp.failAt = 256 << 10
	exp := &fakeExport{size: 1 << 40} // endless unless stopped
	began := time.Now()
	res, err := streamImport(context.Background(), imp, out, errOut, 1<<20, exp.run, nil)
	if err != nil {
		t.Fatalf("an import that failed on the node is its exit code for the caller, got %v", err)
	}
	if res.exitCode != 1 || !strings.Contains(string(res.stderr), "Permission denied") {
		t.Errorf("result %d %q, want exit 1 with the node's message", res.exitCode, res.stderr)
	}
	if !exp.returned || time.Since(began) > 5*time.Second {
		t.Errorf("the export was not stopped at once (returned %v after %s)", exp.returned, time.Since(began))
	}
}
