package nixstore

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestClosureAskedOncePerPath: the nodes of a group deploying one system ask for its
// closure once between them, at the same time or later, while the path is in the store;
// a path gone from the store is asked again. A fake nix-store counts its starts, which
// the real one cannot show.
func TestClosureAskedOncePerPath(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "starts")
	top := "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-system"
	dep := "/nix/store/abcdfghijklmnpqrsvwxyz0123456789-dep"
	script := "#!/bin/sh\necho x >>" + count + "\nsleep 0.2\nprintf '%s\\n%s\\n' " + dep + " " + top + "\n"
	fake := filepath.Join(dir, "nix-store")
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	prevBin, prevMemo := NixStoreBin, closures
	inStore := true
	NixStoreBin = fake
	closures = &closureMemo{exists: func(string) bool { return inStore }}
	t.Cleanup(func() { NixStoreBin, closures = prevBin, prevMemo })
	starts := func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "x")
	}

	var wg sync.WaitGroup
	results := make([][]string, 16)
	errs := make([]error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() { defer wg.Done(); results[i], errs[i] = Closure(ctx(t), top) }()
	}
	wg.Wait()
	for i := range 16 {
		if errs[i] != nil || len(results[i]) != 2 || results[i][0] != dep || results[i][1] != top {
			t.Fatalf("node %d: closure = %q, %v; want [%s %s]", i, results[i], errs[i], dep, top)
		}
	}
	results[0][0] = "changed by a caller" // each caller gets a copy of its own
	if again, err := Closure(ctx(t), top); err != nil || again[0] != dep {
		t.Fatalf("a later caller got %q, %v", again, err)
	}
	if n := starts(); n != 1 {
		t.Errorf("nix-store started %d times for 17 asks of one path, want 1", n)
	}

	inStore = false // collected: the remembered answer is no longer used
	if _, err := Closure(ctx(t), top); err != nil {
		t.Fatal(err)
	}
	if n := starts(); n != 2 {
		t.Errorf("nix-store started %d times after the path left the store, want 2", n)
	}
}
