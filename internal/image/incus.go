package image

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// An Incus image built from a toplevel is a unified image: one tarball holding
// metadata.yaml and rootfs/, the root file system NixOS's own container images have
// (nixos/modules/virtualisation/lxc-container.nix, nixos/lib/make-system-tarball.sh):
// the toplevel's closure under /nix/store, /sbin/init -> <toplevel>/init, empty /dev,
// /proc and /sys for the container's mounts, and /nix-path-registration, the closure's
// registrations in the form `nix-store --load-db` reads, which the system's stage 2
// loads at its first boot, so that the node's Nix knows the paths it already holds
// (a deploy then copies only what a new system adds).
//
// The tarball is reproducible, as the OCI layer is (writeRoot: sorted entries, mtime 1,
// owner 0:0, the store's modes) and uncompressed, so one toplevel always gives the same
// bytes and so the same Incus fingerprint, the SHA-256 of the tarball.

// IncusImageProperty is the image property that names the toplevel an image was built
// from.
const IncusImageProperty = "fediversity.toplevel"

// IncusImageResult is what WriteIncusImage wrote.
type IncusImageResult struct {
	// Fingerprint is the SHA-256 of the tarball, hex: the fingerprint Incus gives it.
	Fingerprint string
	// Size is the tarball's length in bytes.
	Size int64
	// Paths is the closure the image holds, sorted.
	Paths []string
}

// WriteIncusImage writes the Incus unified image of toplevel, which must be in the
// local store, to w. The tarball is streamed: memory stays flat however large the
// closure is.
func WriteIncusImage(ctx context.Context, w io.Writer, toplevel string) (IncusImageResult, error) {
	if _, err := ToplevelTag(toplevel); err != nil {
		return IncusImageResult{}, err
	}
	paths, err := nixstore.Closure(ctx, toplevel)
	if err != nil {
		return IncusImageResult{}, err
	}
	paths = append([]string(nil), paths...)
	sort.Strings(paths)
	registration, err := nixstore.Registrations(ctx, paths)
	if err != nil {
		return IncusImageResult{}, fmt.Errorf("registrations of the closure of %s: %w", toplevel, err)
	}
	h := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(w, h)}
	tw := tar.NewWriter(cw)
	if err := writeFile(tw, "metadata.yaml", incusMetadata(toplevel)); err != nil {
		return IncusImageResult{}, err
	}
	if err := tw.WriteHeader(dirHeader("rootfs/")); err != nil {
		return IncusImageResult{}, err
	}
	layout := rootLayout{
		prefix: "rootfs/",
		dirs:   []string{"dev/", "proc/", "sys/"},
		files:  []rootFile{{name: "nix-path-registration", content: registration}},
	}
	if err := writeRoot(tw, toplevel, paths, layout); err != nil {
		return IncusImageResult{}, err
	}
	if err := tw.Close(); err != nil {
		return IncusImageResult{}, err
	}
	return IncusImageResult{Fingerprint: hex.EncodeToString(h.Sum(nil)), Size: cw.n, Paths: paths}, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// incusMetadata is the image's metadata.yaml: its architecture, a fixed creation date
// (as NixOS's container images have), and properties that name the toplevel. Values
// are written as JSON strings, which YAML reads as they are.
func incusMetadata(toplevel string) []byte {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	var b strings.Builder
	fmt.Fprintf(&b, "architecture: %s\n", q(incusArch(toplevel)))
	b.WriteString("creation_date: 1\n")
	b.WriteString("properties:\n")
	fmt.Fprintf(&b, "  description: %s\n", q("system "+strings.SplitN(filepath.Base(toplevel), "-", 2)[1]))
	fmt.Fprintf(&b, "  %s: %s\n", IncusImageProperty, q(toplevel))
	return []byte(b.String())
}

// incusArch is the image's architecture as Incus names it: from the toplevel's `system`
// file (NixOS writes e.g. x86_64-linux there), else the machine's.
func incusArch(toplevel string) string {
	raw, err := os.ReadFile(filepath.Join(toplevel, "system"))
	if err == nil {
		if arch, _, ok := strings.Cut(strings.TrimSpace(string(raw)), "-"); ok && arch != "" {
			return arch
		}
	}
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	}
	return runtime.GOARCH
}
