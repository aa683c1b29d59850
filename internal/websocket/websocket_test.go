package websocket

// Unit tests of the frames against the server end of internal/websocket/wstest over
// net.Pipe, and fuzz tests of the frame reader and of a write read back.

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/websocket/wstest"
)

func TestAcceptKeyMatchesRFC6455Example(t *testing.T) {
	// The example of RFC 6455 section 1.3.
	if got := AcceptKey("dGhlIHNhbXBsZSBub25jZQ=="); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("acceptKey = %q", got)
	}
}

// pipeWebsocket is a client websocket over net.Pipe, with the server end.
func pipeWebsocket(t *testing.T) (*Conn, *wstest.Conn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return New(a, nil), &wstest.Conn{T: t, C: b, BR: bufio.NewReader(b)}
}

func TestWebsocketProtocolFaultsAreErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"reserved bits", append([]byte{0x80 | 0x40 | OpBinary, 1}, 'x'), "reserved bits"},
		{"unknown opcode", []byte{0x80 | 0x3, 0}, "unknown opcode"},
		{"continuation outside a message", []byte{0x80 | OpContinuation, 0}, "continuation"},
		{"message inside a message", append(wstest.FrameBytes(false, OpBinary, []byte("a"), false), wstest.FrameBytes(true, OpText, []byte("b"), false)...), "inside a fragmented"},
		{"fragmented ping", wstest.FrameBytes(false, OpPing, []byte("p"), false), "control frame"},
		{"oversized frame", []byte{0x80 | OpBinary, 127, 0, 0, 0, 0, 0x7F, 0, 0, 0}, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, s := pipeWebsocket(t)
			go s.WriteRaw(tc.raw)
			_, _, err := ws.ReadMessage()
			var we *ProtocolError
			if !errors.As(err, &we) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a ProtocolError about %q", err, tc.want)
			}
		})
	}
}

func TestWebsocketFragmentedMessageOverLimitIsRefused(t *testing.T) {
	ws, s := pipeWebsocket(t)
	chunk := make([]byte, 1<<20)
	go func() {
		s.WriteFrame(false, OpBinary, chunk)
		for range MaxMessage / len(chunk) {
			s.WriteFrame(false, OpContinuation, chunk)
		}
	}()
	_, _, err := ws.ReadMessage()
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v, want the message refused as too large", err)
	}
}

func TestWebsocketPeerHangingUpMidFrameIsUnexpectedEOF(t *testing.T) {
	ws, s := pipeWebsocket(t)
	go func() {
		s.WriteRaw([]byte{0x80 | OpBinary, 10, 'a', 'b'})
		_ = s.C.Close()
	}()
	if _, _, err := ws.ReadMessage(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	ws2, s2 := pipeWebsocket(t)
	go func() { _ = s2.C.Close() }()
	if _, _, err := ws2.ReadMessage(); !errors.Is(err, io.EOF) {
		t.Fatalf("a hang-up between frames: %v, want io.EOF", err)
	}
}

func TestWebsocketUnmasksAMaskedServerFrame(t *testing.T) {
	// A server must not mask, but a client that meets it loses nothing by unmasking.
	ws, s := pipeWebsocket(t)
	go s.WriteRaw(wstest.FrameBytes(true, OpBinary, []byte("masked anyway"), true))
	if _, p, err := ws.ReadMessage(); err != nil || string(p) != "masked anyway" {
		t.Fatalf("got %q, %v", p, err)
	}
}

func TestWebsocketConcurrentWritesStayWholeFrames(t *testing.T) {
	ws, s := pipeWebsocket(t)
	ws.frameLimit = 7
	const writers, each = 4, 50
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			msg := bytes.Repeat([]byte{byte('a' + w)}, 30)
			for range each {
				if err := ws.WriteMessage(OpBinary, msg); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers * each {
		op, msg, err := s.ReadMessage()
		if err != nil || op != OpBinary || len(msg) != 30 || bytes.Count(msg, msg[:1]) != 30 {
			t.Fatalf("message op %#x %q err %v: frames of two writers interleaved", op, msg, err)
		}
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// A peer that stops reading leaves a writer stuck in its write (net.Pipe writes block
// until read; incusd cannot be made to stall on demand). Close must not wait behind
// it: it ends the connection, and with it the stuck write.
func TestWebsocketCloseDoesNotWaitBehindAStuckWriter(t *testing.T) {
	ws, _ := pipeWebsocket(t) // the server end never reads
	wrote := make(chan error, 1)
	go func() { wrote <- ws.WriteMessage(OpBinary, []byte("nobody reads this")) }()
	for ws.wmu.TryLock() { // wait until the writer holds the write lock
		ws.wmu.Unlock()
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { _ = ws.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(closeFrameLimit / 2):
		t.Fatal("Close waited behind a stuck writer")
	}
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("the stuck write reported success after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stuck write did not end when Close closed the connection")
	}
}

// Without a writer, Close sends its close frame, but a peer that does not read gets
// closeFrameLimit, no more.
func TestWebsocketCloseBoundsItsCloseFrame(t *testing.T) {
	ws, _ := pipeWebsocket(t)
	start := time.Now()
	_ = ws.Close()
	if d := time.Since(start); d > closeFrameLimit+2*time.Second {
		t.Fatalf("Close took %s with a peer that does not read, want about %s", d, closeFrameLimit)
	}
	if err := ws.WriteMessage(OpBinary, []byte("x")); err == nil {
		t.Fatal("a write after Close succeeded")
	}
}

func TestMaskBytesIsRFC6455Masking(t *testing.T) {
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	for n := range 21 {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*7 + 1)
		}
		want := make([]byte, n)
		for i, b := range src {
			want[i] = b ^ key[i%4] // RFC 6455 section 5.3
		}
		got := make([]byte, n)
		maskBytes(got, src, key)
		if !bytes.Equal(got, want) {
			t.Fatalf("length %d: got %x, want %x", n, got, want)
		}
		maskBytes(src, src, key) // in place, as a read unmasks
		if !bytes.Equal(src, want) {
			t.Fatalf("length %d in place: got %x, want %x", n, src, want)
		}
	}
}

// FuzzReadMessage feeds the reader any bytes a peer could send. It must never panic,
// never return a message over MaxMessage, and end every input with an error of its
// own kind: a ProtocolError, ErrClosed, or the end of the bytes (io.EOF between frames,
// io.ErrUnexpectedEOF inside one).
func FuzzReadMessage(f *testing.F) {
	for _, seed := range [][]byte{
		wstest.FrameBytes(true, OpBinary, []byte("hello"), false),
		wstest.FrameBytes(true, OpText, nil, false), // incusd's barrier
		append(wstest.FrameBytes(false, OpBinary, []byte("frag-"), false), append(wstest.FrameBytes(true, OpPing, []byte("p"), false), wstest.FrameBytes(true, OpContinuation, []byte("ment"), false)...)...),
		wstest.FrameBytes(true, OpClose, []byte{0x03, 0xE8}, false),
		wstest.FrameBytes(true, OpBinary, bytes.Repeat([]byte("m"), 300), true),
		{0x80 | OpBinary, 127, 0, 0, 0, 0, 0x7F, 0, 0, 0},
		{0x80 | 0x40 | OpBinary, 1, 'x'},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ws := New(readOnly{bytes.NewReader(raw)}, nil)
		for range 1000 { // each round consumes at least two bytes
			_, msg, err := ws.ReadMessage()
			if len(msg) > MaxMessage {
				t.Fatalf("a message of %d bytes, over MaxMessage", len(msg))
			}
			if err == nil {
				continue
			}
			var pe *ProtocolError
			if !errors.As(err, &pe) && !errors.Is(err, ErrClosed) && err != io.EOF && err != io.ErrUnexpectedEOF {
				t.Fatalf("read ended with %T %v", err, err)
			}
			return
		}
		t.Fatal("the reader never ended")
	})
}

// readOnly is a peer that sends raw and reads whatever the client writes (pongs, the
// close's echo) away.
type readOnly struct{ r *bytes.Reader }

func (p readOnly) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p readOnly) Write(b []byte) (int, error) { return len(b), nil }
func (p readOnly) Close() error                { return nil }

// FuzzWriteThenRead writes any message in frames of any size and reads it back as the
// server does: the same opcode and bytes, every frame masked, only the last one final.
func FuzzWriteThenRead(f *testing.F) {
	f.Add([]byte("hello"), true, uint16(7))
	f.Add([]byte{}, false, uint16(1))
	f.Add(bytes.Repeat([]byte{0xFF}, 70000), true, uint16(65535))
	f.Fuzz(func(t *testing.T, msg []byte, binaryMsg bool, limit uint16) {
		a, b := net.Pipe()
		defer func() { _ = a.Close(); _ = b.Close() }()
		ws := New(a, nil)
		ws.frameLimit = max(1, int(limit))
		op := byte(OpText)
		if binaryMsg {
			op = OpBinary
		}
		wrote := make(chan error, 1)
		go func() { wrote <- ws.WriteMessage(op, msg) }()
		s := &wstest.Conn{T: t, C: b, BR: bufio.NewReader(b)}
		var got []byte
		for first := true; ; first = false {
			fin, fop, p, err := s.ReadFrame() // fails t on an unmasked frame
			if err != nil {
				t.Fatal(err)
			}
			if want := byte(OpContinuation); !first && fop != want || first && fop != op {
				t.Fatalf("frame opcode %#x (first %v), message opcode %#x", fop, first, op)
			}
			if len(p) > ws.frameLimit {
				t.Fatalf("a frame of %d bytes over the limit %d", len(p), ws.frameLimit)
			}
			got = append(got, p...)
			if fin {
				break
			}
		}
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("read back %d bytes, wrote %d", len(got), len(msg))
		}
	})
}
