package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
)

// The tests read the modules as committed, from the repository's root.
const repoRoot = "../.."

// The committed modules are what `make generate` writes: no generated file was edited
// by hand, none is missing, none is left over.
func TestGeneratedModulesAreCurrent(t *testing.T) {
	files, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range sortedKeys(files) {
		got, err := os.ReadFile(filepath.Join(repoRoot, path))
		if err != nil || !bytes.Equal(got, files[path]) {
			t.Errorf("%s is not what `make generate` writes (%v): run it and commit the result", path, err)
		}
	}
	stale, err := staleFiles(repoRoot, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range stale {
		t.Errorf("%s is a generated file `make generate` no longer writes: run it (it removes the file)", path)
	}
}

// Every module's `nodes` holds the keys of a roster's node entry it takes, nested keys
// included, and no key of the roster's it says it does not take; every other key is
// its own. Both ways: a roster key a module drops, or a module key the roster lacks,
// fails here, and so does a roster key no module has decided about. The modules are
// read as Terraform reads them (their .tf files), the roster's keys from the node spec.
func TestModulesTakeTheRostersKeys(t *testing.T) {
	roster := jsonKeys(reflect.TypeOf(fleet.RosterNode{}), "")
	rosterTop := topKeys(roster)
	for _, m := range modules {
		t.Run(m.Name, func(t *testing.T) {
			typ := variableType(t, filepath.Join(repoRoot, "modules", m.Name), "nodes")
			if !typ.IsMapType() || !typ.ElementType().IsObjectType() {
				t.Fatalf("modules/%s's nodes is %s, want a map of node entries", m.Name, typeexpr.TypeString(typ))
			}
			have := typeKeys(typ.ElementType(), "")
			takes := func(key string) bool {
				return slices.Contains(m.RosterKeys, allRosterKeys) || slices.Contains(m.RosterKeys, key)
			}
			for _, k := range rosterTop {
				_, declined := m.NotRosterKeys[k]
				switch {
				case takes(k) && declined:
					t.Errorf("modules/%s both takes and declines the roster key %s", m.Name, k)
				case !takes(k) && !declined:
					t.Errorf("the roster key %s: modules/%s neither takes it nor says why not (tools/modulegen/modules.go)", k, m.Name)
				}
			}
			for _, k := range sortedKeys(roster) {
				top, _, _ := strings.Cut(k, ".")
				switch {
				case takes(top) && !have[k]:
					t.Errorf("modules/%s's nodes lack the roster key %s", m.Name, k)
				case !takes(top) && have[k]:
					t.Errorf("modules/%s's nodes have the roster key %s it says it does not take: %s", m.Name, k, m.NotRosterKeys[top])
				}
			}
			for _, k := range sortedKeys(have) {
				top, _, _ := strings.Cut(k, ".")
				own := slices.ContainsFunc(m.OwnKeys, func(o ownKey) bool { return o.Name == top })
				switch {
				case own && roster[top]:
					t.Errorf("modules/%s's own key %s is a roster key", m.Name, top)
				case !own && !roster[k]:
					t.Errorf("modules/%s's nodes have %s, which is neither a roster key nor one of its own", m.Name, k)
				}
			}
		})
	}
}

// Every module's `timings` holds exactly the timing table's rows that its objects read,
// and its own keys: a row one side drops fails here.
func TestModuleTimingsAreTheTables(t *testing.T) {
	for _, m := range modules {
		t.Run(m.Name, func(t *testing.T) {
			typ := variableType(t, filepath.Join(repoRoot, "modules", m.Name), "timings")
			have := typeKeys(typ, "")
			want := map[string]bool{}
			for _, row := range deploybody.TimingTable {
				for _, o := range m.TimingObjects {
					if row.UsedByObject(o) {
						want[row.Name] = true
					}
				}
			}
			for _, k := range m.OwnTimings {
				want[k.Name] = true
			}
			compare(t, "modules/"+m.Name+"'s timings", have, "the timing table's rows for "+strings.Join(m.TimingObjects, ", "), want)
		})
	}
}

// Every resource of a module that has a `timings` block hands it every timing the
// resource reads, each from the module's timings: a timing the table gains, or one a
// hand-written block leaves out (tf-incus once dropped lock_wait), fails here.
func TestModuleResourcesGetEveryTiming(t *testing.T) {
	objects := []string{deploybody.ObjectNodeSwitch, deploybody.ObjectVerdict, deploybody.ObjectK8sRollout}
	seen := map[string]int{}
	for _, m := range modules {
		for _, dir := range []string{"", "wave"} {
			for _, r := range resources(t, filepath.Join(repoRoot, "modules", m.Name, dir)) {
				if !slices.Contains(objects, r.Type) {
					continue
				}
				where := filepath.Join("modules", m.Name, dir, r.File) + ": " + r.Type
				var block *hclsyntax.Block
				for _, b := range r.Body.Blocks {
					if b.Type == "timings" {
						block = b
					}
				}
				if block == nil {
					t.Errorf("%s has no timings block", where)
					continue
				}
				seen[r.Type]++
				have := map[string]bool{}
				for name, a := range block.Body.Attributes {
					have[name] = true
					if !refersTo(a.Expr, name) {
						t.Errorf("%s: timings.%s is not set from a timing of that name", where, name)
					}
				}
				want := map[string]bool{}
				for _, row := range deploybody.TimingTable {
					if row.UsedByObject(r.Type) {
						want[row.Name] = true
					}
				}
				compare(t, where+"'s timings block", have, "the timings it reads", want)
			}
		}
	}
	for _, o := range objects {
		if seen[o] == 0 {
			t.Errorf("no module has a %s with a timings block: the test reads the wrong files", o)
		}
	}
}

func compare(t *testing.T, haveName string, have map[string]bool, wantName string, want map[string]bool) {
	t.Helper()
	for _, k := range sortedKeys(want) {
		if !have[k] {
			t.Errorf("%s lack %s (one of %s)", haveName, k, wantName)
		}
	}
	for _, k := range sortedKeys(have) {
		if !want[k] {
			t.Errorf("%s have %s, which is not one of %s", haveName, k, wantName)
		}
	}
}

// jsonKeys are the JSON keys of a Go type, embedded structs' at their parent's level and
// nested objects' as parent.key.
func jsonKeys(t reflect.Type, prefix string) map[string]bool {
	keys := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			for k := range jsonKeys(f.Type, prefix) {
				keys[k] = true
			}
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		keys[prefix+name] = true
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			for k := range jsonKeys(ft, prefix+name+".") {
				keys[k] = true
			}
		}
	}
	return keys
}

// typeKeys are an object type's attribute names, nested objects' (also in lists and
// maps) as parent.key.
func typeKeys(t cty.Type, prefix string) map[string]bool {
	keys := map[string]bool{}
	switch {
	case t.IsListType() || t.IsSetType() || t.IsMapType():
		return typeKeys(t.ElementType(), prefix)
	case t.IsObjectType():
		for name, at := range t.AttributeTypes() {
			keys[prefix+name] = true
			for k := range typeKeys(at, prefix+name+".") {
				keys[k] = true
			}
		}
	}
	return keys
}

func topKeys(keys map[string]bool) []string {
	var top []string
	for _, k := range sortedKeys(keys) {
		if !strings.Contains(k, ".") {
			top = append(top, k)
		}
	}
	return top
}

// variableType is the type constraint of the variable name of the module in dir.
func variableType(t *testing.T, dir, name string) cty.Type {
	t.Helper()
	for _, f := range parseDir(t, dir) {
		for _, b := range f.Body.Blocks {
			if b.Type != "variable" || b.Labels[0] != name {
				continue
			}
			a, ok := b.Body.Attributes["type"]
			if !ok {
				t.Fatalf("%s: variable %q has no type", dir, name)
			}
			typ, _, diags := typeexpr.TypeConstraintWithDefaults(a.Expr)
			if diags.HasErrors() {
				t.Fatalf("%s: variable %q: %s", dir, name, diags.Error())
			}
			return typ
		}
	}
	t.Fatalf("%s has no variable %q", dir, name)
	return cty.NilType
}

type resourceBlock struct {
	File, Type string
	Body       *hclsyntax.Body
}

// resources are the resource blocks of the module in dir.
func resources(t *testing.T, dir string) []resourceBlock {
	var out []resourceBlock
	for _, f := range parseDir(t, dir) {
		for _, b := range f.Body.Blocks {
			if b.Type == "resource" {
				out = append(out, resourceBlock{File: f.Name, Type: b.Labels[0], Body: b.Body})
			}
		}
	}
	return out
}

type parsedFile struct {
	Name string
	Body *hclsyntax.Body
}

func parseDir(t *testing.T, dir string) []parsedFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no .tf files in %s (%v)", dir, err)
	}
	parser := hclparse.NewParser()
	var out []parsedFile
	for _, p := range paths {
		f, diags := parser.ParseHCLFile(p)
		if diags.HasErrors() {
			t.Fatalf("%s: %s", p, diags.Error())
		}
		out = append(out, parsedFile{Name: filepath.Base(p), Body: f.Body.(*hclsyntax.Body)})
	}
	return out
}

// refersTo tells whether expr reads something named name: an attribute (x.name) or a
// map element (x["name"]).
func refersTo(expr hclsyntax.Expression, name string) bool {
	for _, tr := range expr.Variables() {
		for _, step := range tr {
			switch s := step.(type) {
			case hcl.TraverseAttr:
				if s.Name == name {
					return true
				}
			case hcl.TraverseIndex:
				if s.Key.Type() == cty.String && s.Key.AsString() == name {
					return true
				}
			}
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
