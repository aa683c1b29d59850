// Package wstest is the server end of a websocket for tests of the websocket client:
// raw frames written as a server writes them, and the client's frames read and
// checked (a client must mask). A server of our own, because the faults the tests need
// (fragments interleaved with pings, reserved bits, oversized frames, a peer hanging up
// mid-frame) are ones incusd cannot be made to show on demand.
package wstest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// opContinuation is the opcode of a message's later frames (RFC 6455 section 5.2).
const opContinuation = 0x0

// Conn is the server end of a websocket in tests: it writes unmasked frames and reads
// (and checks the masking of) the client's frames.
type Conn struct {
	T  testing.TB
	C  net.Conn
	BR *bufio.Reader
}

// WriteFrame writes one unmasked frame.
func (s *Conn) WriteFrame(fin bool, op byte, p []byte) {
	s.T.Helper()
	s.WriteRaw(FrameBytes(fin, op, p, false))
}

// WriteRaw writes b as it is.
func (s *Conn) WriteRaw(b []byte) {
	s.T.Helper()
	if _, err := s.C.Write(b); err != nil {
		s.T.Errorf("server write: %v", err)
	}
}

// FrameBytes encodes a frame as a server sends it (unmasked unless masked).
func FrameBytes(fin bool, op byte, p []byte, masked bool) []byte {
	var b bytes.Buffer
	h0 := op
	if fin {
		h0 |= 0x80
	}
	b.WriteByte(h0)
	mbit := byte(0)
	if masked {
		mbit = 0x80
	}
	switch l := len(p); {
	case l < 126:
		b.WriteByte(mbit | byte(l))
	case l <= 0xFFFF:
		b.WriteByte(mbit | 126)
		_ = binary.Write(&b, binary.BigEndian, uint16(l))
	default:
		b.WriteByte(mbit | 127)
		_ = binary.Write(&b, binary.BigEndian, uint64(l))
	}
	if masked {
		key := []byte{1, 2, 3, 4}
		b.Write(key)
		for i, c := range p {
			b.WriteByte(c ^ key[i&3])
		}
	} else {
		b.Write(p)
	}
	return b.Bytes()
}

// ReadFrame reads one client frame; a client frame that is not masked fails the test.
func (s *Conn) ReadFrame() (fin bool, op byte, p []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(s.BR, h[:]); err != nil {
		return
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0F
	if h[1]&0x80 == 0 {
		s.T.Errorf("client frame (opcode %#x) is not masked", op)
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		_, err = io.ReadFull(s.BR, b[:])
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		_, err = io.ReadFull(s.BR, b[:])
		n = binary.BigEndian.Uint64(b[:])
	}
	if err != nil {
		return
	}
	var key [4]byte
	if _, err = io.ReadFull(s.BR, key[:]); err != nil {
		return
	}
	p = make([]byte, n)
	if _, err = io.ReadFull(s.BR, p); err != nil {
		return
	}
	for i := range p {
		p[i] ^= key[i&3]
	}
	return
}

// ReadMessage reassembles one client message.
func (s *Conn) ReadMessage() (byte, []byte, error) {
	var op byte
	var msg []byte
	for {
		fin, fop, p, err := s.ReadFrame()
		if err != nil {
			return 0, nil, err
		}
		if fop != opContinuation {
			op = fop
		}
		msg = append(msg, p...)
		if fin {
			return op, msg, nil
		}
	}
}
