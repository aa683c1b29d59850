package remote

import (
	"bytes"
	"fmt"
)

// MaxOutput bounds what one remote command's stdout (and, apart, its stderr) may put in
// memory. Every read the body makes is far smaller; a command that prints more (a
// runaway journal, a wrong path) is cut here, not read without end.
const MaxOutput = 16 << 20

// boundedBuffer keeps the first MaxOutput bytes written to it and counts the rest. It
// never fails a write, so the remote command is not broken off by its reader.
type boundedBuffer struct {
	buf     bytes.Buffer
	dropped int64
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	room := MaxOutput - b.buf.Len()
	if room >= len(p) {
		return b.buf.Write(p)
	}
	if room > 0 {
		b.buf.Write(p[:room])
	}
	b.dropped += int64(len(p) - max(room, 0))
	return len(p), nil
}

func (b *boundedBuffer) Bytes() []byte { return b.buf.Bytes() }

func (b *boundedBuffer) String() string { return b.buf.String() }

// cutNote says what was cut ("" when nothing was), for stderr.
func (b *boundedBuffer) cutNote(stream string) string {
	if b.dropped == 0 {
		return ""
	}
	return fmt.Sprintf("\n[fediversity: %s cut at %d MiB; %d more bytes were discarded]\n", stream, MaxOutput>>20, b.dropped)
}
