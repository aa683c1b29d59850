package nixstore

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// WriteNAR must write what nix-store --dump writes, byte for byte: the node checks
// each archive's hash against the one the local store registered, so any difference
// fails the copy. The tree has each kind of node, names that sort differently as
// bytes and as text, contents of lengths that do and do not need padding, and an
// empty file and directory.
func TestWriteNARIsNixStoreDump(t *testing.T) {
	requireNix(t)
	root := filepath.Join(t.TempDir(), "tree")
	files := map[string]string{
		"a":              "x",
		"B":              "eight by",
		"a-b/deep/file":  strings.Repeat("0123456789", 1000),
		"a.b":            "",
		"a_b/nested":     "nine byte",
		"émigré/é":       "utf-8 names sort as bytes",
		"bin/executable": "#!/bin/sh\necho hi\n",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "bin/executable"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../a-b/deep/file", filepath.Join(root, "bin/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("dangling target", filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{root, filepath.Join(root, "a"), filepath.Join(root, "bin/link")} {
		want, err := exec.Command(NixStoreBin, "--dump", p).Output()
		if err != nil {
			t.Fatalf("nix-store --dump %s: %v", p, err)
		}
		var got bytes.Buffer
		n, err := WriteNAR(&got, p)
		if err != nil {
			t.Fatalf("WriteNAR(%s): %v", p, err)
		}
		if n != int64(got.Len()) || !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("WriteNAR(%s) wrote %d bytes (said %d), nix-store --dump %d; first difference at byte %d",
				p, got.Len(), n, len(want), firstDifference(got.Bytes(), want))
		}
	}
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A real nix-store --serve --write (on a chroot store: an empty "node" store without
// the lab) takes the stream and registers the whole closure, with the hashes, sizes and
// references of the local store: nix-store --verify-path rehashes each path there.
func TestAddToStoreStreamIntoServe(t *testing.T) {
	top, closure := streamTestClosure(t)
	var stream bytes.Buffer
	if err := AddToStoreStream(ctx(t), closure, &stream); err != nil {
		t.Fatal(err)
	}
	node := t.TempDir()
	serve := exec.Command(NixStoreBin, append([]string{"--store", node}, ServeCommand[1:]...)...)
	serve.Stdin = &stream
	if out, err := serve.CombinedOutput(); err != nil {
		t.Fatalf("nix-store --serve --write: %v\n%s", err, out)
	}
	if out, err := exec.Command(NixStoreBin, append([]string{"--store", node, "--verify-path"}, closure...)...).CombinedOutput(); err != nil {
		t.Fatalf("the node's store does not verify the closure: %v\n%s", err, out)
	}
	refs, err := exec.Command(NixStoreBin, "--store", node, "--query", "--references", top).Output()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := exec.Command(NixStoreBin, "--query", "--references", top).Output()
	if string(refs) != string(want) {
		t.Fatalf("the node registered the references of %s as\n%s\nwant\n%s", top, refs, want)
	}

	// A path the local store does not hold is refused before anything is written.
	stream.Reset()
	err = AddToStoreStream(ctx(t), []string{"/nix/store/00000000000000000000000000000000-not-there"}, &stream)
	if err == nil || stream.Len() != 0 {
		t.Fatalf("a path not in the store: err %v, %d bytes written", err, stream.Len())
	}
}

// streamTestClosure builds the lab's stand-in system and returns it with its closure.
func streamTestClosure(t *testing.T) (top string, closure []string) {
	t.Helper()
	requireNix(t)
	top, err := Build(ctx(t), BuildSpec{File: closuresFile(t), Attr: "good", ArgStr: map[string]string{"seed": "serve-stream-test"}})
	if err != nil {
		t.Fatal(err)
	}
	closure, err = Closure(ctx(t), top)
	if err != nil {
		t.Fatal(err)
	}
	return top, closure
}

// writeCounter counts the writes it is given and their bytes.
type writeCounter struct{ writes, bytes int }

func (c *writeCounter) Write(p []byte) (int, error) {
	c.writes++
	c.bytes += len(p)
	return len(p), nil
}

// The stream reaches its writer in chunks, not a field at a time: each write becomes a
// packet on its way to the node (SSH, an Incus websocket frame), which every hop
// encrypts, forwards or reads on its own. Written a field at a time, the lab closure
// (about 500 KB) went out in thousands of writes.
func TestAddToStoreStreamWritesInChunks(t *testing.T) {
	_, closure := streamTestClosure(t)
	var w writeCounter
	if err := AddToStoreStream(ctx(t), closure, &w); err != nil {
		t.Fatal(err)
	}
	if most := w.bytes/(32<<10) + 2; w.writes > most {
		t.Fatalf("the stream of %d paths, %d bytes, came in %d writes; want at most %d (32 KiB or more each)", len(closure), w.bytes, w.writes, most)
	}
}

func TestParseRegistrations(t *testing.T) {
	const p1 = "/nix/store/034b8wba2lv0k8jrifbln9bl9l23m37z-conf"
	const p2 = "/nix/store/05529km7p755g14570q8d1r580cjyzml-system"
	hash := strings.Repeat("ab", 32)
	got, err := parseRegistrations(strings.NewReader(p1 + "\n" + hash + "\n680\n\n0\n" +
		p2 + "\n" + hash + "\n2056\n/nix/store/4z888ay7d3n4js0ljyg6whss7jp1r7d3-system.drv\n2\n" + p1 + "\n" + p2 + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[p1].NarSize != 680 || got[p1].Deriver != "" || len(got[p1].References) != 0 ||
		got[p2].NarSize != 2056 || got[p2].NarHash != hash || strings.Join(got[p2].References, " ") != p1+" "+p2 {
		t.Fatalf("parsed %+v", got)
	}
	for _, bad := range []string{
		p1 + "\n" + hash + "\n680\n\n2\n" + p2 + "\n", // a reference missing
		p1 + "\nnot-a-hash\n680\n\n0\n",
		p1 + "\n" + hash + "\n-1\n\n0\n",
		"not a path\n",
	} {
		if _, err := parseRegistrations(strings.NewReader(bad)); err == nil {
			t.Errorf("parsed %q without an error", bad)
		}
	}
}
