// Package archtest checks the repository's structural rules on every `go test`, so they
// hold even where golangci-lint (whose depguard states the same rules) is not run: the
// engine packages never import the plugin framework or the provider, the deploy body
// never imports a transport (docs/design.md#objects), and the provider's families
// (internal/provider/node, k8s, spire, submission) import neither each other nor the
// provider's root, only its kit. It also checks that every pointer into the design page
// names a section that exists there.
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
	"internal/nodespec", "internal/fleet", "internal/methods", "internal/noderun",
}

// providerFamilies are the provider's packages per family of objects; providerRoot is
// the package that serves them (the provider, its configuration, the registry).
var providerFamilies = []string{"internal/provider/node", "internal/provider/k8s", "internal/provider/spire", "internal/provider/submission"}

const providerRoot = "internal/provider"

type rule struct {
	under     []string
	forbidden []string // these packages and every package below them
	exact     []string // these packages only
	// sourceOnly leaves the _test.go files out: a family's acceptance tests are an
	// external test package that reaches the provider through internal/provider/acctest.
	sourceOnly bool
	why        string
}

var rules = append([]rule{
	{under: enginePackages, forbidden: []string{"github.com/hashicorp/terraform-plugin-framework", "github.com/hashicorp/terraform-plugin-go"},
		why: "engine packages must not import the plugin framework"},
	{under: enginePackages, forbidden: []string{module + "/" + providerRoot},
		why: "engine packages must not import the provider: the provider translates for the engines, not the other way round"},
	{under: []string{"internal/deploybody"}, forbidden: []string{module + "/internal/transport", module + "/internal/incusapi"},
		why: "the deploy body talks to nodes only through its Transport interface"},
	{under: []string{providerRoot + "/kit"}, forbidden: prefixed(providerFamilies), exact: []string{module + "/" + providerRoot},
		why: "the provider's kit is shared by every family: it imports no family and not the provider's root"},
}, familyRules()...)

// familyRules: each family imports no other family and not the provider's root, so a
// family can be read, changed and tested on its own, over the kit.
func familyRules() []rule {
	var out []rule
	for _, f := range providerFamilies {
		var others []string
		for _, o := range providerFamilies {
			if o != f {
				others = append(others, module+"/"+o)
			}
		}
		out = append(out, rule{under: []string{f}, forbidden: others, exact: []string{module + "/" + providerRoot}, sourceOnly: true,
			why: "a provider family imports neither another family nor the provider's root; what families share lives in internal/provider/kit"})
	}
	return out
}

func prefixed(dirs []string) []string {
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = module + "/" + d
	}
	return out
}

func TestEngineLayering(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	for _, rule := range rules {
		for _, dir := range rule.under {
			_ = filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || (rule.sourceOnly && strings.HasSuffix(p, "_test.go")) {
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
					for _, bad := range rule.exact {
						if path == bad {
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
