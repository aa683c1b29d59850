package nixstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A derivation's .drv depends on what nix sees of the source, not on its bytes: a
// comment changes nothing, a changed value gives a new derivation, and realising it
// gives the path nix-build gives.
func TestInstantiateRealise(t *testing.T) {
	requireNix(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "node.nix")
	write := func(src string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const src = `{ seed ? "" }: derivation { name = "instantiate-test"; system = builtins.currentSystem; builder = "/bin/sh";
	  inherit seed; args = [ "-c" "echo %s > $out" ]; }`
	write(strings.Replace(src, "%s", "one", 1))
	spec := BuildSpec{File: file, ArgStr: map[string]string{"seed": time.Now().Format(time.RFC3339Nano)}}
	drv, err := Instantiate(ctx(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(drv, "-instantiate-test.drv") {
		t.Fatalf("Instantiate = %q, want a .drv", drv)
	}

	write("# only a comment\n" + strings.Replace(src, "%s", "one", 1))
	if again, err := Instantiate(ctx(t), spec); err != nil || again != drv {
		t.Fatalf("a comment changed the derivation: %q (%v), want %q", again, err, drv)
	}
	write(strings.Replace(src, "%s", "two", 1))
	other, err := Instantiate(ctx(t), spec)
	if err != nil || other == drv {
		t.Fatalf("an edit gave %q (%v), want a derivation other than %q", other, err, drv)
	}

	out, err := Realise(ctx(t), other, nil)
	if err != nil {
		t.Fatal(err)
	}
	built, err := Build(ctx(t), spec)
	if err != nil || built != out {
		t.Fatalf("nix-build gave %q (%v), Realise %q", built, err, out)
	}
	if b, _ := os.ReadFile(out); strings.TrimSpace(string(b)) != "two" {
		t.Fatalf("realised %q, want the edited source's output", b)
	}

	write("{ seed ? \"\" }: derivation { name = ")
	_, err = Instantiate(ctx(t), spec)
	if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "syntax error") {
		t.Fatalf("a syntax error gave %v, want nix's message naming %s", err, file)
	}
	if _, err := Realise(ctx(t), out, nil); err == nil {
		t.Fatal("Realise accepted a path that is not a .drv")
	}
}

// The Flight shares one run between concurrent callers of a key and runs again once
// that run ended. A fake function: the property is the engine's, not nix's.
func TestFlightSharesOneRun(t *testing.T) {
	var f Flight
	var runs atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]string, 8)
	shared := make([]bool, 8)
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i], shared[i], _ = f.Do(context.Background(), "drv", func() (string, error) {
				runs.Add(1)
				<-release
				return "/nix/store/out", nil
			})
		}(i)
	}
	// Let all eight reach Do before the run ends.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		f.mu.Lock()
		started := f.calls["drv"] != nil
		f.mu.Unlock()
		if started || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("8 concurrent callers ran the function %d times, want 1", runs.Load())
	}
	nShared := 0
	for i, r := range results {
		if r != "/nix/store/out" {
			t.Fatalf("caller %d got %q", i, r)
		}
		if shared[i] {
			nShared++
		}
	}
	if nShared != 7 {
		t.Fatalf("%d callers were told they shared, want 7", nShared)
	}
	if _, sh, err := f.Do(context.Background(), "drv", func() (string, error) { return "", errors.New("again") }); sh || err == nil {
		t.Fatalf("a later call did not run again (shared %v, err %v)", sh, err)
	}
}

func TestHashTree(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "node.nix"), []byte("{ }"), 0o644))
	must(os.MkdirAll(filepath.Join(dir, "lib"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "lib", "a.nix"), []byte("1"), 0o644))
	h1, err := HashTree(dir)
	must(err)
	// What changes on every run without being source is not hashed.
	must(os.MkdirAll(filepath.Join(dir, ".terraform", "providers"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "terraform.tfstate"), []byte("{}"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "run.tfplan"), []byte("x"), 0o644))
	if h, _ := HashTree(dir); h != h1 {
		t.Fatal("state, plan files or .terraform changed the tree's hash")
	}
	must(os.WriteFile(filepath.Join(dir, "lib", "a.nix"), []byte("2"), 0o644))
	h2, _ := HashTree(dir)
	if h2 == h1 {
		t.Fatal("an edit in a subdirectory did not change the hash")
	}
	must(os.Chmod(filepath.Join(dir, "lib", "a.nix"), 0o755))
	if h, _ := HashTree(dir); h == h2 {
		t.Fatal("the executable bit did not change the hash")
	}
	root, err := SourceRoot(BuildSpec{File: filepath.Join(dir, "node.nix")}, "/")
	if err != nil || root != dir {
		t.Fatalf("SourceRoot of a file = %q (%v), want its directory %s", root, err, dir)
	}
	if root, _ := SourceRoot(BuildSpec{Expr: "1"}, dir); root != dir {
		t.Fatalf("SourceRoot of an expression = %q, want the working directory", root)
	}
}
