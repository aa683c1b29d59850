package test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// The set of acceptance tests that run under Terraform too (terraform-compat.txt, read
// by lab/test.sh) names only acceptance tests of the repository, each once and with its
// reason: a test renamed or removed fails here, instead of leaving the set silently.
// It needs no lab and no binary: it reads the sources.
func TestTerraformCompatNamesAcceptanceTests(t *testing.T) {
	root := labtest.RepoRoot(t)
	defined := acceptanceTests(t, root)
	if len(defined) < 50 {
		t.Fatalf("found only %d acceptance tests under %s: the scan is wrong", len(defined), root)
	}
	f, err := os.Open(filepath.Join(root, "test", "terraform-compat.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]int{}
	scanner := bufio.NewScanner(f)
	for n := 1; scanner.Scan(); n++ {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, reason, _ := strings.Cut(line, " ")
		switch {
		case !defined[name]:
			t.Errorf("terraform-compat.txt:%d names %s, which is no acceptance test (func TestAcc…) of the repository: renamed or removed? Name the test that now proves its point", n, name)
		case strings.TrimSpace(reason) == "":
			t.Errorf("terraform-compat.txt:%d: %s has no reason: say what it proves of the binary", n, name)
		case seen[name] != 0:
			t.Errorf("terraform-compat.txt:%d names %s again (first on line %d)", n, name, seen[name])
		}
		seen[name] = n
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) == 0 {
		t.Fatal("terraform-compat.txt names no test")
	}
}

var acceptanceFunc = regexp.MustCompile(`(?m)^func (TestAcc\w+)\(t \*testing\.T\)`)

// acceptanceTests is every acceptance test function in the repository's test files.
func acceptanceTests(t *testing.T, root string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range acceptanceFunc.FindAllSubmatch(src, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}
