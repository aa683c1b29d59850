package nixeval

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMakeCacheKey(t *testing.T) {
	a := MakeCacheKey("plan-1", map[string]string{"rev": "x", "system": "fedi-n1"})
	b := MakeCacheKey("plan-1", map[string]string{"system": "fedi-n1", "rev": "x"})
	if a != b || len(a) != 64 {
		t.Fatalf("key must not depend on map order: %s %s", a, b)
	}
	if MakeCacheKey("plan-2", map[string]string{"rev": "x", "system": "fedi-n1"}) == a {
		t.Fatal("a different plan must give a different key")
	}
	if MakeCacheKey("plan-1", map[string]string{"rev": "y", "system": "fedi-n1"}) == a {
		t.Fatal("a different build input must give a different key")
	}
}

func TestEvalCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	held := map[string]bool{cacheTestToplevel: true}
	c := &EvalCache{Dir: dir, StoreHas: func(p string) bool { return held[p] }}
	key := MakeCacheKey("plan", nil)
	if _, ok, why := c.Lookup(key); ok || why != "" {
		t.Fatalf("empty cache: ok=%v why=%q", ok, why)
	}
	must(t, c.Store(key, cacheTestToplevel, time.Now()))
	if got, ok, _ := c.Lookup(key); !ok || got != cacheTestToplevel {
		t.Fatalf("lookup = %q %v", got, ok)
	}
	delete(held, cacheTestToplevel) // garbage-collected
	if _, ok, why := c.Lookup(key); ok || !strings.Contains(why, "does not hold") {
		t.Fatalf("gone path: ok=%v why=%q", ok, why)
	}
	must(t, os.WriteFile(filepath.Join(dir, key+".json"), []byte("{not json"), 0o644))
	if _, ok, why := c.Lookup(key); ok || !strings.Contains(why, "malformed") {
		t.Fatalf("corrupt entry: ok=%v why=%q", ok, why)
	}
	other := MakeCacheKey("other", nil)
	must(t, os.WriteFile(filepath.Join(dir, other+".json"), []byte(`{"key":"`+key+`","toplevel":"`+cacheTestToplevel+`"}`), 0o644))
	held[cacheTestToplevel] = true
	if _, ok, _ := c.Lookup(other); ok {
		t.Fatal("an entry whose key does not match its file must be ignored")
	}
	if err := c.Store("../escape", cacheTestToplevel, time.Now()); err == nil {
		t.Fatal("a key that is not a MakeCacheKey key must be refused")
	}
	// A failed write leaves no temporary file behind, and neither does a good one.
	blocked := MakeCacheKey("blocked", nil)
	must(t, os.Mkdir(filepath.Join(dir, blocked+".json"), 0o755))
	if err := c.Store(blocked, cacheTestToplevel, time.Now()); err == nil || !strings.Contains(err.Error(), blocked) {
		t.Fatalf("storing onto a directory: err = %v, want an error naming the entry", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".entry-*")); len(left) != 0 {
		t.Fatalf("temporary files left in the cache: %v", left)
	}
}

// cacheTestToplevel is a toplevel as a cache entry names it.
const cacheTestToplevel = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-nixos-system-n1"

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
