package nixstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Bounds of a source tree HashTree reads: a build that names a huge directory (a home
// directory, /) is evaluated every time rather than hashed for minutes.
const (
	maxTreeFiles = 20000
	maxTreeBytes = 256 << 20
	// maxHashedFile is the largest file hashed by content; a larger one is hashed by
	// its modification time and inode (see treeHash.file).
	maxHashedFile = 1 << 20
)

// SourceRoot is the operator tree a build reads its Nix source from: the repository
// holding the file a build names (or, for an expression, dir), so an import of another
// file of the operator's repository (../lib.nix) is hashed too. The repository is the
// nearest enclosing directory with a .git entry; outside any repository it is the
// directory the file build names (or that holds the named file), or dir for an
// expression, and a file above it is not covered (docs/design.md says so).
func SourceRoot(spec BuildSpec, dir string) (string, error) {
	start, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if spec.File != "" {
		abs, err := filepath.Abs(spec.File)
		if err != nil {
			return "", err
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return "", err
		}
		start = abs
		if !fi.IsDir() {
			start = filepath.Dir(abs)
		}
	}
	for d := start; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return start, nil
		}
	}
}

// HashTree returns a SHA-256 over the names, kinds and contents of the files under
// root, following symbolic links: a link is hashed by its target's name and by what
// it reaches (a file's content, a directory's tree), because nix reads through it (a
// link into the store by the store path it reaches, whose name fixes its content); a
// link that reaches nothing is hashed by its target's name alone, and a directory
// reached a second time (a loop) by its name. It skips what is not Nix source but
// changes on every run: entries whose name starts with "." (.terraform, .git) and
// Terraform's state and plan files (*.tfstate, *.tfstate.backup, *.tfplan). A file over
// 1 MiB is hashed by its modification time and inode, not its content.
// An evaluation reads only part of the tree; hashing all of it means an edit anywhere
// under root evaluates again (and finds the same derivation when the edit changed
// nothing nix sees), never that an edit under root is missed.
func HashTree(root string) (string, error) {
	h := sha256.New()
	t := &treeHash{h: h, root: root, seen: map[string]bool{}, buf: make([]byte, 32<<10)}
	if err := t.dir(root, "."); err != nil {
		return "", fmt.Errorf("hashing the source tree %s: %w", root, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

type treeHash struct {
	h     io.Writer
	root  string
	files int
	size  int64
	seen  map[string]bool // directories walked, by their real path
	// buf is the one read buffer of the walk: copying each file with its own (what
	// io.Copy of an *os.File does) allocated a quarter of all a 16-node plan did.
	buf []byte
}

// entry writes one line; writing to a hash never fails.
func (t *treeHash) entry(format string, a ...any) { _, _ = fmt.Fprintf(t.h, format, a...) }

func (t *treeHash) count() error {
	t.files++
	if t.files > maxTreeFiles {
		return fmt.Errorf("more than %d files under %s", maxTreeFiles, t.root)
	}
	return nil
}

// dir hashes the directory p (rel under the root), unless it was walked already.
func (t *treeHash) dir(p, rel string) error {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return err
	}
	if t.seen[real] {
		t.entry("loop %q\n", rel)
		return nil
	}
	t.seen[real] = true
	t.entry("d %q\n", rel)
	entries, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, d := range entries {
		if skipInTree(d.Name()) {
			continue
		}
		if err := t.count(); err != nil {
			return err
		}
		child, childRel := filepath.Join(p, d.Name()), filepath.Join(rel, d.Name())
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(child)
			if err != nil {
				return err
			}
			t.entry("l %q %q\n", childRel, target)
			// A link into the store (nix-build's ./result) reaches content its name
			// fixes: hashed by that name, not walked (a system's tree links its whole
			// closure).
			if real, err := filepath.EvalSymlinks(child); err == nil && strings.HasPrefix(real, StoreDir+"/") {
				t.entry("store %q %q\n", childRel, real)
				continue
			}
		}
		fi, err := os.Stat(child) // through a link
		switch {
		case err != nil && d.Type()&fs.ModeSymlink != 0:
			t.entry("dangling %q\n", childRel) // nix fails on it, or does not read it
		case err != nil:
			return err
		case fi.IsDir():
			if err := t.dir(child, childRel); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := t.file(child, childRel, fi); err != nil {
				return err
			}
		default:
			t.entry("o %q %s\n", childRel, fi.Mode().Type())
		}
	}
	return nil
}

func (t *treeHash) file(p, rel string, fi os.FileInfo) error {
	// The executable bit is part of what nix copies into the store.
	t.entry("f %q %d %t\n", rel, fi.Size(), fi.Mode()&0o111 != 0)
	if fi.Size() > maxHashedFile {
		// A large file (a binary, an image) is rarely Nix source: its modification
		// time and identity stand for its content, so a repository holding one is
		// not read whole on every plan. Any write of it changes the time.
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		t.entry("large %d %d\n", fi.ModTime().UnixNano(), ino)
		return nil
	}
	if t.size += fi.Size(); t.size > maxTreeBytes {
		return fmt.Errorf("more than %d MiB under %s", maxTreeBytes>>20, t.root)
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	// The file hidden behind io.Reader, so that its WriteTo (a fresh buffer per file)
	// is not used.
	_, err = io.CopyBuffer(t.h, struct{ io.Reader }{f}, t.buf)
	_ = f.Close() // read-only: a close error loses nothing
	return err
}

// HashNixPath returns what the entries of a NIX_PATH value resolve to, one line per
// entry: an entry resolving into the store by the store path (immutable: its name is
// its content), any other directory or file by HashTree of its content, a missing one
// as missing. So a channel update (the channel link now reaching another store path)
// or an edit of a checkout named in NIX_PATH changes the result, though NIX_PATH does
// not. An empty value stands for nix's default search path. A URL entry cannot be
// hashed: an error (the caller then evaluates every time).
func HashNixPath(nixPath string) (string, error) {
	entries := strings.Split(nixPath, ":")
	if nixPath == "" {
		home, _ := os.UserHomeDir()
		entries = []string{filepath.Join(home, ".nix-defexpr/channels"),
			"nixpkgs=/nix/var/nix/profiles/per-user/root/channels/nixpkgs", "/nix/var/nix/profiles/per-user/root/channels"}
	}
	var b strings.Builder
	for _, e := range entries {
		if e == "" {
			continue
		}
		_, p, named := strings.Cut(e, "=")
		if !named {
			p = e
		}
		if strings.Contains(p, "://") || strings.HasPrefix(p, "channel:") || strings.HasPrefix(p, "flake:") {
			return "", fmt.Errorf("NIX_PATH entry %s is fetched, not a path: its content cannot be hashed", e)
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			fmt.Fprintf(&b, "%s missing\n", e)
			continue
		}
		if rest, ok := strings.CutPrefix(real, StoreDir+"/"); ok {
			top, _, _ := strings.Cut(rest, "/")
			fmt.Fprintf(&b, "%s %s/%s %s\n", e, StoreDir, top, real)
			continue
		}
		fi, err := os.Stat(real)
		if err != nil {
			return "", err
		}
		if !fi.IsDir() {
			real = filepath.Dir(real)
		}
		tree, err := HashTree(real)
		if err != nil {
			return "", fmt.Errorf("NIX_PATH entry %s: %w", e, err)
		}
		fmt.Fprintf(&b, "%s %s tree %s\n", e, real, tree)
	}
	return b.String(), nil
}

func skipInTree(name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".tfstate") ||
		strings.HasSuffix(name, ".tfstate.backup") || strings.HasSuffix(name, ".tfplan")
}
