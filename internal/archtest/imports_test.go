// Package archtest checks the repository's structural rules on every `go test`, so they
// hold even where golangci-lint (whose depguard states the same rules) is not run: the
// engine packages never import the plugin framework, and the deploy body never imports
// a transport (docs/design.md#objects). It also checks that every pointer into the
// design page names a section that exists there.
package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/fediversity/terraform-provider-fediversity"

var enginePackages = []string{
	"internal/deploybody", "internal/submission", "internal/k8s", "internal/image",
	"internal/transport", "internal/incusapi", "internal/nixstore", "internal/spire", "internal/nixeval",
	"internal/nodespec", "internal/fleet",
}

var rules = []struct {
	under     []string
	forbidden []string
	why       string
}{
	{enginePackages, []string{"github.com/hashicorp/terraform-plugin-framework", "github.com/hashicorp/terraform-plugin-go"},
		"engine packages must not import the plugin framework"},
	{[]string{"internal/deploybody"}, []string{module + "/internal/transport", module + "/internal/incusapi"},
		"the deploy body talks to nodes only through its Transport interface"},
}

func TestEngineLayering(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	for _, rule := range rules {
		for _, dir := range rule.under {
			_ = filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
					return nil
				}
				f, perr := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
				if perr != nil {
					t.Errorf("%s: %v", p, perr)
					return nil
				}
				checked++
				for _, imp := range f.Imports {
					path, _ := strconv.Unquote(imp.Path.Value)
					for _, bad := range rule.forbidden {
						if path == bad || strings.HasPrefix(path, bad+"/") {
							t.Errorf("%s imports %s: %s", p, path, rule.why)
						}
					}
				}
				return nil
			})
		}
	}
	if checked == 0 {
		t.Fatal("no engine source files found: the layering check checked nothing")
	}
}
