package incusapi

// Lab test of the image endpoints on the real incusd: a unified image streamed from a
// toplevel's closure is imported under the fingerprint the writer computed, a second
// upload of it is ErrImageExists, an alias names it, and deleting the image removes
// the alias with it.

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/image"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

func TestLabImageImportAliasDelete(t *testing.T) {
	c := labClient(t)
	ctx := labCtx(t)
	top := labtest.BuildClosureSeed(t, labtest.ClosureBootableSwitchable, labtest.Prefix()+"-api-image")
	alias := labtest.Prefix() + "-t-api-image"
	var fp string
	t.Cleanup(func() {
		_, _ = labtest.IncusErr("image", "alias", "delete", alias)
		if fp != "" {
			_, _ = labtest.IncusErr("image", "delete", fp)
		}
	})

	upload := func() (image.IncusImageResult, string, error) {
		pr, pw := io.Pipe()
		written := make(chan image.IncusImageResult, 1)
		go func() {
			res, err := image.WriteIncusImage(ctx, pw, top)
			written <- res
			pw.CloseWithError(err)
		}()
		got, err := c.ImportImage(ctx, pr, "")
		_ = pr.CloseWithError(errors.New("upload over"))
		return <-written, got, err
	}
	res, got, err := upload()
	if err != nil {
		t.Fatal(err)
	}
	fp = got
	if got != res.Fingerprint {
		t.Fatalf("the daemon made image %s of a tarball whose SHA-256 is %s", got, res.Fingerprint)
	}
	img, err := c.GetImage(ctx, fp)
	if err != nil || img.Type != "container" || img.Properties[image.IncusImageProperty] != top {
		t.Fatalf("image %s: %+v (%v); want a container image naming %s", fp, img, err, top)
	}
	// Without the fingerprint header the daemon still refuses the second copy, once it
	// has read it.
	if _, again, err := upload(); !errors.Is(err, ErrImageExists) {
		t.Fatalf("second upload: %q, %v; want ErrImageExists", again, err)
	}

	if err := c.CreateImageAlias(ctx, alias, fp, "lab test"); err != nil {
		t.Fatal(err)
	}
	a, err := c.GetImageAlias(ctx, alias)
	if err != nil || a.Target != fp {
		t.Fatalf("alias %s: %+v (%v), want it to name %s", alias, a, err, fp)
	}
	if err := c.CreateImageAlias(ctx, alias, fp, "again"); err == nil {
		t.Fatalf("a second alias %s was accepted", alias)
	}
	if err := c.DeleteImage(ctx, fp); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetImageAlias(ctx, alias); !IsNotFound(err) {
		t.Fatalf("alias %s after its image was deleted: %v, want not found", alias, err)
	}
	if err := c.DeleteImage(ctx, fp); err != nil {
		t.Fatalf("deleting a deleted image: %v, want nothing", err)
	}
	if err := c.DeleteImageAlias(context.Background(), alias); err != nil {
		t.Fatalf("deleting a deleted alias: %v, want nothing", err)
	}
	fp = ""
}
