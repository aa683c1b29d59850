package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// Two writes of one toplevel's Incus image give the same bytes, whose SHA-256 is the
// fingerprint returned; the tarball is metadata.yaml and rootfs/, which holds exactly
// the closure, /sbin/init pointing at the toplevel's init, empty /dev, /proc and /sys,
// and the closure's registrations as nix-store --dump-db prints them.
func TestIncusImageReproducibleAndExact(t *testing.T) {
	top := labtest.BuildClosure(t, labtest.ClosureBootableSwitchable)
	ctx := context.Background()
	var first bytes.Buffer
	res, err := WriteIncusImage(ctx, &first, top)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(first.Bytes())
	if res.Fingerprint != hex.EncodeToString(sum[:]) || res.Size != int64(first.Len()) {
		t.Fatalf("result %s (%d bytes), tarball sha256 %x (%d bytes)", res.Fingerprint, res.Size, sum, first.Len())
	}
	again, err := WriteIncusImage(ctx, io.Discard, top)
	if err != nil || again.Fingerprint != res.Fingerprint {
		t.Fatalf("second write: %s (%v), first %s", again.Fingerprint, err, res.Fingerprint)
	}

	closure, err := nixstore.Closure(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	closure = append([]string(nil), closure...)
	sort.Strings(closure)
	want, err := nixstore.Registrations(ctx, closure)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&first)
	entries := map[string]*tar.Header{}
	var order, roots []string
	var metadata, registration []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		entries[name], order = h, append(order, name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || !h.ModTime.Equal(time.Unix(1, 0)) {
			t.Errorf("%s: owner %d:%d (%q) mtime %v, want 0:0, no name, mtime 1", name, h.Uid, h.Gid, h.Uname, h.ModTime)
		}
		switch name {
		case "metadata.yaml":
			metadata, _ = io.ReadAll(tr)
		case "rootfs/nix-path-registration":
			registration, _ = io.ReadAll(tr)
		}
		if rest, ok := strings.CutPrefix(name, "rootfs/nix/store/"); ok && !strings.Contains(rest, "/") {
			roots = append(roots, "/nix/store/"+rest)
		}
	}
	if order[0] != "metadata.yaml" {
		t.Errorf("the tarball starts with %s, want metadata.yaml", order[0])
	}
	for _, m := range []string{`architecture: "x86_64"`, "creation_date: 1", `fediversity.toplevel: "` + top + `"`} {
		if !bytes.Contains(metadata, []byte(m)) {
			t.Errorf("metadata.yaml lacks %q:\n%s", m, metadata)
		}
	}
	sort.Strings(roots)
	if strings.Join(roots, "\n") != strings.Join(closure, "\n") {
		t.Fatalf("the image's store paths:\n%s\nthe closure:\n%s", strings.Join(roots, "\n"), strings.Join(closure, "\n"))
	}
	if !bytes.Equal(registration, want) {
		t.Fatalf("/nix-path-registration differs from nix-store --dump-db of the closure:\n%s", registration)
	}
	for name := range entries {
		switch name {
		case "metadata.yaml", "rootfs", "rootfs/nix", "rootfs/nix/store", "rootfs/sbin", "rootfs/sbin/init",
			"rootfs/dev", "rootfs/proc", "rootfs/sys", "rootfs/nix-path-registration":
		default:
			if !strings.HasPrefix(name, "rootfs/nix/store/") {
				t.Errorf("the image holds %s, outside the closure and the container's mount points", name)
			}
		}
	}
	if h := entries["rootfs/sbin/init"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != top+"/init" {
		t.Fatalf("rootfs/sbin/init: %+v, want a symlink to %s/init", h, top)
	}
}
