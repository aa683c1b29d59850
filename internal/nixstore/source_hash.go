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
)

// Bounds of a source tree HashTree reads: a build that names a huge directory (a home
// directory, /) is evaluated every time rather than hashed for minutes.
const (
	maxTreeFiles = 20000
	maxTreeBytes = 256 << 20
)

// SourceRoot is the operator tree a build reads its Nix source from: the directory a
// file build names (or the directory holding the named file), or dir for an
// expression (whose relative paths nix resolves against the working directory).
func SourceRoot(spec BuildSpec, dir string) (string, error) {
	if spec.File == "" {
		return filepath.Abs(dir)
	}
	abs, err := filepath.Abs(spec.File)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if fi.IsDir() {
		return abs, nil
	}
	return filepath.Dir(abs), nil
}

// HashTree returns a SHA-256 over the names, kinds and contents of the files under
// root (symbolic links by their target, not followed). It skips what is not Nix
// source but changes on every run: entries whose name starts with "." (.terraform,
// .git) and Terraform's state and plan files (*.tfstate, *.tfstate.backup, *.tfplan).
// An evaluation reads only part of the tree; hashing all of it means an edit anywhere
// under root evaluates again (and finds the same derivation when the edit changed
// nothing nix sees), never that an edit under root is missed. What lies outside root
// (an import of ../lib.nix, <nixpkgs> through NIX_PATH) is not read here.
func HashTree(root string) (string, error) {
	h := sha256.New()
	// Writing to a hash never fails.
	entry := func(format string, a ...any) { _, _ = fmt.Fprintf(h, format, a...) }
	files, size := 0, int64(0)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel != "." && skipInTree(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		files++
		if files > maxTreeFiles {
			return fmt.Errorf("more than %d files under %s", maxTreeFiles, root)
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			entry("l %q %q\n", rel, target)
		case d.IsDir():
			entry("d %q\n", rel)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if size += fi.Size(); size > maxTreeBytes {
				return fmt.Errorf("more than %d MiB under %s", maxTreeBytes>>20, root)
			}
			// The executable bit is part of what nix copies into the store.
			entry("f %q %d %t\n", rel, fi.Size(), fi.Mode()&0o111 != 0)
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(h, f)
			_ = f.Close() // read-only: a close error loses nothing
			if err != nil {
				return err
			}
		default:
			entry("o %q %s\n", rel, d.Type())
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hashing the source tree %s: %w", root, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func skipInTree(name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".tfstate") ||
		strings.HasSuffix(name, ".tfstate.backup") || strings.HasSuffix(name, ".tfplan")
}
