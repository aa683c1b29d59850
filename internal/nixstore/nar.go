package nixstore

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// WriteNAR writes the Nix archive (NAR) of the file tree at path to w, as `nix-store
// --dump path` would, byte for byte, and returns how many bytes it wrote. The copy to a
// node writes its store paths' archives itself, straight from the local store, rather
// than start a nix-store per path or parse an export stream for them.
//
// The format (Nix's archive.cc): the string "nix-archive-1", then the tree, each node
// "(" "type" <regular|directory|symlink> … ")"; a regular file carries "executable" ""
// when its owner may execute it, then "contents" and its bytes; a directory's entries
// come sorted by name, bytewise, each "entry" "(" "name" <name> "node" <node> ")"; a
// symlink carries "target" <target>. Every string and the contents are preceded by
// their length (a little-endian uint64) and padded with zero bytes to a multiple of 8.
func WriteNAR(w io.Writer, path string) (int64, error) {
	n := &narWriter{w: w}
	n.str("nix-archive-1")
	if n.err == nil {
		n.node(path)
	}
	return n.written, n.err
}

type narWriter struct {
	w       io.Writer
	written int64
	err     error
	buf     [8]byte
}

func (n *narWriter) write(p []byte) {
	if n.err != nil {
		return
	}
	m, err := n.w.Write(p)
	n.written += int64(m)
	n.err = err
}

func (n *narWriter) u64(v uint64) {
	binary.LittleEndian.PutUint64(n.buf[:], v)
	n.write(n.buf[:])
}

var narPadding [8]byte

func (n *narWriter) pad(size uint64) {
	if r := size % 8; r != 0 {
		n.write(narPadding[:8-r])
	}
}

func (n *narWriter) str(s string) {
	n.u64(uint64(len(s)))
	n.write([]byte(s))
	n.pad(uint64(len(s)))
}

func (n *narWriter) node(path string) {
	fi, err := os.Lstat(path)
	if err != nil {
		n.err = err
		return
	}
	n.str("(")
	switch mode := fi.Mode(); {
	case mode.IsRegular():
		n.str("type")
		n.str("regular")
		if mode&0o100 != 0 {
			n.str("executable")
			n.str("")
		}
		n.contents(path, fi.Size())
	case mode.IsDir():
		n.str("type")
		n.str("directory")
		entries, err := os.ReadDir(path)
		if err != nil {
			n.err = err
			return
		}
		names := make([]string, len(entries))
		for i, e := range entries {
			names[i] = e.Name()
		}
		sort.Strings(names) // bytewise, as Nix's std::map orders them
		for _, name := range names {
			n.str("entry")
			n.str("(")
			n.str("name")
			n.str(name)
			n.str("node")
			n.node(filepath.Join(path, name))
			n.str(")")
			if n.err != nil {
				return
			}
		}
	case mode&os.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			n.err = err
			return
		}
		n.str("type")
		n.str("symlink")
		n.str("target")
		n.str(target)
	default:
		n.err = fmt.Errorf("%s: a %s cannot go into a Nix archive", path, mode.Type())
		return
	}
	n.str(")")
}

// contents writes a regular file's "contents" field, streaming its bytes. A file whose
// length changed since it was listed is an error: the archive's length field is
// already written.
func (n *narWriter) contents(path string, size int64) {
	n.str("contents")
	n.u64(uint64(size))
	if n.err != nil {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		n.err = err
		return
	}
	defer f.Close()
	m, err := io.Copy(n.w, io.LimitReader(f, size))
	n.written += m
	if err != nil {
		n.err = err
		return
	}
	if m != size {
		n.err = fmt.Errorf("%s: read %d bytes of %d (the file changed while it was archived)", path, m, size)
		return
	}
	n.pad(uint64(size))
}
