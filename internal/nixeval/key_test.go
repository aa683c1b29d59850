package nixeval

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// keyFixture evaluates one file build through a cache, counting nix-instantiate runs.
type keyFixture struct {
	t    *testing.T
	e    *Evaluator
	runs func() int
	spec nixstore.BuildSpec
}

func newKeyFixture(t *testing.T, spec nixstore.BuildSpec) *keyFixture {
	spec.ArgStr = map[string]string{"seed": time.Now().Format(time.RFC3339Nano)}
	return &keyFixture{t: t, runs: labtest.CountNixInstantiate(t), spec: spec,
		e: &Evaluator{Cache: &EvalCache{Dir: filepath.Join(t.TempDir(), "eval")}}}
}

// eval evaluates and checks it ran nix-instantiate exactly wantRuns times in all.
func (k *keyFixture) eval(wantRuns int, why string) string {
	k.t.Helper()
	ev, err := k.e.Evaluate(context.Background(), "web01", k.spec, "")
	if err != nil {
		k.t.Fatalf("%s: %v", why, err)
	}
	if k.runs() != wantRuns {
		k.t.Fatalf("%s: nix-instantiate ran %d times in all, want %d (cache %s, ignored %q)", why, k.runs(), wantRuns, ev.Cache, ev.Ignored)
	}
	return ev.Derivation
}

func writeFile(t *testing.T, file, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// importing is a node source whose output is what expr (an import) evaluates to.
func importing(expr string) string {
	return `{ seed ? "" }: derivation { name = "key-test"; system = builtins.currentSystem; builder = "/bin/sh"; inherit seed;
  args = [ "-c" "echo ${` + expr + `} > $out" ]; }`
}

// An edit behind a symbolic link to a directory outside the node's directory is seen:
// the tree is hashed through the link.
func TestKeySeesEditBehindSymlinkedDirectory(t *testing.T) {
	dir, shared := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(dir, "node.nix"), importing("import ./modules/m.nix"))
	writeFile(t, filepath.Join(shared, "m.nix"), `"one"`)
	if err := os.Symlink(shared, filepath.Join(dir, "modules")); err != nil {
		t.Fatal(err)
	}
	k := newKeyFixture(t, nixstore.BuildSpec{File: filepath.Join(dir, "node.nix")})
	drv := k.eval(1, "cold")
	if k.eval(1, "unchanged") != drv {
		t.Fatal("an unchanged tree gave another derivation")
	}
	writeFile(t, filepath.Join(shared, "m.nix"), `"two"`)
	if k.eval(2, "an edit behind the link") == drv {
		t.Fatal("an edit behind the link gave the same derivation")
	}
}

// A NIX_PATH entry is hashed by what it resolves to: the same NIX_PATH whose link now
// reaches another directory (a channel update), or whose directory was edited, is seen.
func TestKeySeesNixPathTarget(t *testing.T) {
	dir, one, two := t.TempDir(), t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(one, "default.nix"), `"one"`)
	writeFile(t, filepath.Join(two, "default.nix"), `"two"`)
	link := filepath.Join(t.TempDir(), "channel")
	if err := os.Symlink(one, link); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NIX_PATH", "chan="+link)
	writeFile(t, filepath.Join(dir, "node.nix"), importing("import <chan>"))
	k := newKeyFixture(t, nixstore.BuildSpec{File: filepath.Join(dir, "node.nix")})
	drv := k.eval(1, "cold")
	k.eval(1, "unchanged")
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(two, link); err != nil {
		t.Fatal(err)
	}
	updated := k.eval(2, "the channel link now reaches another directory")
	if updated == drv {
		t.Fatal("a channel update gave the same derivation")
	}
	writeFile(t, filepath.Join(two, "default.nix"), `"three"`)
	if k.eval(3, "an edit of the directory NIX_PATH reaches") == updated {
		t.Fatal("an edit of the NIX_PATH directory gave the same derivation")
	}
}

// A file of the operator's repository outside the node's directory (../lib.nix) is
// seen: the key hashes the repository (the nearest directory with .git).
func TestKeySeesFileOutsideTheNodeDirectory(t *testing.T) {
	repo := t.TempDir()
	if err := os.Mkdir(filepath.Join(repo, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(repo, "lib.nix"), `"one"`)
	writeFile(t, filepath.Join(repo, "nodes", "node.nix"), importing("import ../lib.nix"))
	k := newKeyFixture(t, nixstore.BuildSpec{File: filepath.Join(repo, "nodes", "node.nix")})
	drv := k.eval(1, "cold")
	k.eval(1, "unchanged")
	writeFile(t, filepath.Join(repo, "lib.nix"), `"two"`)
	if k.eval(2, "an edit of ../lib.nix") == drv {
		t.Fatal("an edit of ../lib.nix gave the same derivation")
	}
	writeFile(t, filepath.Join(repo, ".git", "index"), "git's own files are not Nix source")
	k.eval(2, "an edit under .git")
}

// The cache is used only when its directory is ours and not writable by others (else a
// warning, once), and an entry only when it names a derivation the store holds.
func TestCacheTrust(t *testing.T) {
	runs := labtest.CountNixInstantiate(t)
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	base := filepath.Join(cache, "fediversity")
	if err := os.Mkdir(base, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o777); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "node.nix")
	writeEvalSource(t, src, "one")
	spec := nixstore.BuildSpec{File: src, ArgStr: map[string]string{"seed": time.Now().Format(time.RFC3339Nano)}}
	ctx := context.Background()

	e := New()
	if e.Cache != nil || !strings.Contains(e.Distrust, "writable by group or others") {
		t.Fatalf("a cache directory writable by others: cache %v, distrust %q", e.Cache, e.Distrust)
	}
	ev, err := e.Evaluate(ctx, "web01", spec, "")
	if err != nil || ev.Cache != "off" || len(ev.Warnings) != 1 || !strings.Contains(ev.Warnings[0], base) {
		t.Fatalf("first evaluation with a distrusted cache: %v cache %s warnings %q, want no cache and one warning naming %s", err, ev.Cache, ev.Warnings, base)
	}
	if ev, _ := e.Evaluate(ctx, "web02", spec, ""); len(ev.Warnings) != 0 {
		t.Fatalf("the distrust was warned again: %q", ev.Warnings)
	}

	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}
	e = New()
	if e.Cache == nil {
		t.Fatalf("our own cache directory was not used: %s", e.Distrust)
	}
	key, _ := Key(spec, "")
	for _, forged := range []string{"/etc/passwd", "/nix/store/" + strings.Repeat("a", 32) + "-x.drv", ev.Derivation + "/x.drv"} {
		if err := e.Cache.Store(key, forged, time.Now()); err != nil {
			t.Fatal(err)
		}
		before := runs()
		got, err := e.Evaluate(ctx, "web01", spec, "")
		if err != nil || got.Derivation != ev.Derivation || runs() != before+1 || got.Ignored == "" {
			t.Fatalf("an entry naming %s: %v, derivation %s after %d runs (ignored %q); want it ignored and %s evaluated", forged, err, got.Derivation, runs()-before, got.Ignored, ev.Derivation)
		}
	}
	before := runs()
	if got, err := e.Evaluate(ctx, "web01", spec, ""); err != nil || got.Cache != "hit" || runs() != before {
		t.Fatalf("a good entry: %v cache %s after %d runs, want a hit", err, got.Cache, runs()-before)
	}
}

// A link into the store (nix-build's ./result) is hashed by the store path it reaches,
// not walked: a tree holding a system's result link is still cached.
func TestKeyHashesStoreLinksByName(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "node.nix"), importing(`"one"`))
	k := newKeyFixture(t, nixstore.BuildSpec{File: filepath.Join(dir, "node.nix")})
	drv := k.eval(1, "cold")
	if err := os.Symlink(drv, filepath.Join(dir, "result")); err != nil {
		t.Fatal(err)
	}
	key, why := Key(k.spec, "")
	if key == "" {
		t.Fatalf("a tree with a link into the store is not hashed: %s", why)
	}
	k.eval(2, "a new link is an edit of the tree")
	k.eval(2, "unchanged")
}
