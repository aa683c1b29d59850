package methods

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// operatorInputs are the module inputs of the operator variants only: the DNS lane's
// addresses and the SPIRE lane. A tenant's shared resources (`tenant`) are not among
// them: modules/tf-incus takes them with either method (docs/incus-nodes.md#incus-tenant).
var operatorInputs = []string{"addresses", "spire", "spire_handoff"}

// TestModuleArgumentsAreTheModulesInputs holds each module method's Arguments to its
// module's variables, both ways: a catalog argument the module does not take, or a
// module input the catalog does not list, fails it. A method that is not an operator
// variant lists every input but the operator lanes'; an operator variant lists them all.
func TestModuleArgumentsAreTheModulesInputs(t *testing.T) {
	variable := regexp.MustCompile(`(?m)^variable "([a-z0-9_]+)"`)
	checked := 0
	for _, m := range Catalog {
		module, ok := strings.CutPrefix(strings.Fields(m.Setup)[0], "modules/")
		if !ok {
			continue
		}
		files, err := filepath.Glob(filepath.Join("..", "..", "modules", module, "*.tf"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no .tf files in modules/%s (%v)", m.Name, module, err)
		}
		var inputs []string
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range variable.FindAllStringSubmatch(string(b), -1) {
				inputs = append(inputs, v[1])
			}
		}
		var want []string
		for _, in := range inputs {
			if m.NeedsApplication || !slices.Contains(operatorInputs, in) {
				want = append(want, in)
			}
		}
		got := slices.Clone(m.Arguments)
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			var extra, missing []string
			for _, a := range got {
				if !slices.Contains(want, a) {
					extra = append(extra, a)
				}
			}
			for _, w := range want {
				if !slices.Contains(got, w) {
					missing = append(missing, w)
				}
			}
			t.Errorf("method %s (modules/%s): the catalog lists %v that the module does not take, and lacks the module's inputs %v", m.Name, module, extra, missing)
		}
		checked++
	}
	if checked != 5 {
		t.Fatalf("checked %d module methods, want 5 (tf, tf-incus, tf-incus-operator, k8s, k8s-operator)", checked)
	}
}
