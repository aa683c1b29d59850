package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// A node image built from a toplevel is one layer that holds exactly the toplevel's
// closure (nix-store -qR) under /nix/store, plus /sbin/init -> <toplevel>/init, so
// that the container starts the node's systemd as PID 1.
//
// It is reproducible: the same closure gives the same layer and image digest on every
// build and machine with the same provider version. Paths are written in sorted order
// (each store path's tree as filepath.WalkDir walks it, which is lexical), every entry
// has mtime 1 (as in the Nix store), owner 0:0 with no names, and the mode bits the
// store has; a file hard-linked elsewhere in the store is written as a regular file.
// The image config has a fixed (zero) creation time and no history. The layer is gzip
// at a fixed level.
//
// Memory stays flat: the layer is a stream, written by a goroutine into a pipe each
// time go-containerregistry reads it (once for its digests, once for the upload when
// the registry does not hold it yet), never held whole.

// storeMTime is the modification time of everything in the Nix store.
var storeMTime = time.Unix(1, 0)

// ToplevelTag is the tag derived from a toplevel: its hash part, so an unchanged
// toplevel names the same tag (and pushes nothing), and another toplevel another tag.
func ToplevelTag(toplevel string) (string, error) {
	if !nixstore.ValidStorePath(toplevel) {
		return "", fmt.Errorf("toplevel %q is not a store path (/nix/store/<hash>-<name>)", toplevel)
	}
	hash, _, _ := strings.Cut(filepath.Base(toplevel), "-")
	return hash, nil
}

// ToplevelImage builds (lazily: nothing is read until go-containerregistry reads the
// layer) the node image of toplevel, which must be in the local store.
func ToplevelImage(ctx context.Context, toplevel string) (v1.Image, []string, error) {
	if _, err := ToplevelTag(toplevel); err != nil {
		return nil, nil, err
	}
	paths, err := nixstore.Closure(ctx, toplevel)
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(paths)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeClosureTar(pw, toplevel, paths)) }()
		return pr, nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(6))
	if err != nil {
		return nil, nil, fmt.Errorf("layer of %s: %w", toplevel, err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer})
	if err != nil {
		return nil, nil, fmt.Errorf("image of %s: %w", toplevel, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", toplevelArch(toplevel)
	cfg.Created = v1.Time{}
	cfg.History = nil
	// The node's command is /sbin/init (a command, not an entrypoint, as the node spec
	// gives it), and its stop signal SIGRTMIN+3: systemd as PID 1 takes SIGTERM as
	// "re-execute", not "shut down", so a pod replacement or a rollback would wait out
	// the termination grace and then kill the node without a clean shutdown, mid-write
	// for anything in /var/lib (the node's state across replacements). Both are shown on
	// a real kubelet by TestAccK8sRolloutRealNode_cleanStop* (internal/provider/k8s).
	cfg.Config.Cmd = []string{"/sbin/init"}
	// The image has no /bin or /usr/bin: a command run in the node (the readiness
	// probe's systemctl, kubectl exec) is found on NixOS's PATH, whose directories the
	// node's stage 2 makes (/run/current-system -> the toplevel, /run/wrappers).
	// Without it the runtime's default PATH names only directories that do not exist,
	// and the probe never finds systemctl.
	cfg.Config.Env = []string{"PATH=" + NodePath}
	cfg.Config.StopSignal = "SIGRTMIN+3"
	cfg.Config.Labels = map[string]string{"org.fediversity.toplevel": toplevel}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, nil, err
	}
	return img, paths, nil
}

// NodePath is the PATH of a node image built from a toplevel: NixOS's system PATH.
const NodePath = "/run/wrappers/bin:/run/current-system/sw/bin"

// toplevelArch is the image architecture: from the toplevel's `system` file (NixOS
// writes e.g. x86_64-linux there), else the machine's.
func toplevelArch(toplevel string) string {
	raw, err := os.ReadFile(filepath.Join(toplevel, "system"))
	if err == nil {
		switch strings.TrimSpace(string(raw)) {
		case "x86_64-linux":
			return "amd64"
		case "aarch64-linux":
			return "arm64"
		}
	}
	return runtime.GOARCH
}

func dirHeader(name string) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: storeMTime, Format: tar.FormatPAX}
}

// writeClosureTar writes the layer's tar: the node's root file system (writeRoot) with
// nothing else.
func writeClosureTar(w io.Writer, toplevel string, paths []string) error {
	tw := tar.NewWriter(w)
	if err := writeRoot(tw, toplevel, paths, rootLayout{}); err != nil {
		return err
	}
	return tw.Close()
}

// rootLayout is what one kind of node image adds to the root file system every node
// image of a toplevel has (writeRoot).
type rootLayout struct {
	// prefix is where the root file system is in the tarball: "" for an OCI layer,
	// "rootfs/" for an Incus image.
	prefix string
	// dirs are more empty directories of the root, e.g. "proc/" (each ending in "/").
	dirs []string
	// files are more regular files of the root, written after /sbin/init.
	files []rootFile
}

type rootFile struct {
	name    string // relative to the root, e.g. "nix-path-registration"
	content []byte
}

// writeRoot writes the root file system of a node image built from toplevel, the one
// layout both image kinds share: /nix, /nix/store, the layout's directories, /sbin,
// /sbin/init -> <toplevel>/init, the layout's files, then each store path of the
// closure (paths, sorted) as its tree, all under the layout's prefix.
func writeRoot(tw *tar.Writer, toplevel string, paths []string, l rootLayout) error {
	dirs := append([]string{"nix/", "nix/store/"}, l.dirs...)
	for _, d := range append(dirs, "sbin/") {
		if err := tw.WriteHeader(dirHeader(l.prefix + d)); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: l.prefix + "sbin/init", Linkname: toplevel + "/init", Mode: 0o777, ModTime: storeMTime, Format: tar.FormatPAX}); err != nil {
		return err
	}
	for _, f := range l.files {
		if err := writeFile(tw, l.prefix+f.name, f.content); err != nil {
			return err
		}
	}
	for _, p := range paths {
		if err := writeTree(tw, l.prefix, p); err != nil {
			return fmt.Errorf("store path %s: %w", p, err)
		}
	}
	return nil
}

// writeFile writes one regular file with the store's owner, mode and time.
func writeFile(tw *tar.Writer, name string, content []byte) error {
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(content)), Mode: 0o644, ModTime: storeMTime, Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err := tw.Write(content)
	return err
}

// writeTree writes the tree of store path root, each entry named prefix + its path
// without the leading "/".
func writeTree(tw *tar.Writer, prefix, root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: prefix + strings.TrimPrefix(p, "/"), ModTime: storeMTime, Mode: int64(info.Mode().Perm()), Format: tar.FormatPAX}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, target, 0o777
			return tw.WriteHeader(h)
		case d.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			return tw.WriteHeader(h)
		case d.Type().IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, info.Size()
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			n, err := io.Copy(tw, f)
			if err == nil && n != info.Size() {
				err = errors.New("changed while being read")
			}
			return err
		}
		return fmt.Errorf("%s: %s files do not belong in the Nix store", p, d.Type())
	})
}

// PushToplevel builds the node image of toplevel and writes it to the target's tag.
// Layers the registry already holds are not uploaded again (go-containerregistry asks
// first). It returns the digest the registry holds for the tag afterwards.
func PushToplevel(ctx context.Context, toplevel string, t Target, o Options) (Result, error) {
	img, _, err := ToplevelImage(ctx, toplevel)
	if err != nil {
		return Result{}, err
	}
	want, err := img.Digest()
	if err != nil {
		return Result{}, fmt.Errorf("compute the image of %s: %w", toplevel, err)
	}
	return write(ctx, img, want, t, o)
}
