package labtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// CountNixInstantiate points nixstore at a wrapper around the real nix-instantiate that
// appends a line to a file per run, and returns a function reading the count. The
// wrapper also comes first in PATH, so processes the test starts (the fediversity
// command) are counted too. The evaluations are real; only their number is observed.
func CountNixInstantiate(t testing.TB) func() int {
	t.Helper()
	real, err := exec.LookPath("nix-instantiate")
	if err != nil {
		if os.Getenv("FEDIVERSITY_LAB") == "1" {
			t.Fatalf("nix-instantiate is not installed (lab/install-host.sh installs it): %v", err)
		}
		t.Skip("nix-instantiate is not installed on this machine")
	}
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	wrapper := filepath.Join(dir, "nix-instantiate")
	script := fmt.Sprintf("#!/bin/sh\necho run >>%q\nexec %q \"$@\"\n", count, real)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	prev := nixstore.NixInstantiateBin
	nixstore.NixInstantiateBin = wrapper
	t.Cleanup(func() { nixstore.NixInstantiateBin = prev })
	return func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "run\n")
	}
}

// CountNixEvals is CountNixInstantiate for the flake form: it points nixstore at a
// wrapper around the real nix that counts its `eval` runs (an evaluation of a flake
// build; `nix flake metadata`, which the cache key reads, is not one), also first in
// PATH for the processes the test starts.
func CountNixEvals(t testing.TB) func() int {
	t.Helper()
	real, err := exec.LookPath("nix")
	if err != nil {
		if os.Getenv("FEDIVERSITY_LAB") == "1" {
			t.Fatalf("nix is not installed (lab/install-host.sh installs it): %v", err)
		}
		t.Skip("nix is not installed on this machine")
	}
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	wrapper := filepath.Join(dir, "nix")
	script := fmt.Sprintf("#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = eval ] && echo run >>%q && break; done\nexec %q \"$@\"\n", count, real)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	prev := nixstore.NixBin
	nixstore.NixBin = wrapper
	t.Cleanup(func() { nixstore.NixBin = prev })
	return func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "run\n")
	}
}
