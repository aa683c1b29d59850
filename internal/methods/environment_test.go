package methods

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every environment variable the code reads is declared (a method's coordinate or the
// process'), with a description and a default, and every declared coordinate is read
// somewhere: the catalog's key sets and the code cannot drift apart. The reads are
// found in the source, not listed by hand: os.Getenv and os.LookupEnv with a literal, a
// constant, or a variable that ranges over a list of literals; a function that hands
// one of its parameters to them (then its callers' literals are the names); and
// os.LookupEnv handed as a function (then that function's calls of it). A read whose
// name cannot be found that way fails the test, naming where it is, so a new way of
// reading the environment cannot slip by. Test code, the lab and the tools are not the
// product and are left out.
func TestEveryEnvironmentReadIsDeclared(t *testing.T) {
	reads := environmentReads(t, repoRoot(t))
	declared := Declared()
	for name, where := range reads {
		c, ok := declared[name]
		switch {
		case !ok:
			t.Errorf("%s reads %s, which no method and not the process declares: add it to a method's Environment (or to Process) in internal/methods, with a description and a default", where, name)
		case c.Description == "" || c.Default == "":
			t.Errorf("coordinate %s lacks a description or a default", name)
		}
	}
	for name := range declared {
		if _, ok := reads[name]; !ok {
			t.Errorf("coordinate %s is declared, but no code reads it: remove it", name)
		}
	}
	if len(reads) < 10 {
		t.Fatalf("found only %d environment reads: the scan is broken", len(reads))
	}
}

// The operator methods are offered only to a group that runs an application; every
// method has a setup, arguments and a description, and its key set holds the process'.
func TestCatalogForGroup(t *testing.T) {
	all := Names(ForGroup(Group{RunsApplication: true}))
	if want := []string{"ssh", "tf", "tf-incus", "tf-incus-operator", "k8s", "k8s-operator"}; !slices.Equal(all, want) {
		t.Fatalf("methods of a group with an application: %v, want %v", all, want)
	}
	if got := Names(ForGroup(Group{})); !slices.Equal(got, []string{"ssh", "tf", "tf-incus", "k8s"}) {
		t.Fatalf("methods of a group without an application: %v", got)
	}
	for _, m := range Catalog {
		if m.Setup == "" || len(m.Arguments) == 0 || m.Description == "" || len(m.Environment) == 0 {
			t.Errorf("method %s lacks its setup, arguments, description or environment", m.Name)
		}
		if !slices.Contains(m.KeySet(), "TMPDIR") {
			t.Errorf("method %s's key set lacks the process' coordinates", m.Name)
		}
	}
}

func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		dir = filepath.Dir(dir)
	}
	t.Fatal("go.mod not found above the test's directory")
	return ""
}

// environmentReads maps each environment variable the product's code reads to one place
// that reads it.
func environmentReads(t *testing.T, root string) map[string]string {
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			switch rel {
			case "lab", "tools", "test", ".git", "internal/labtest", "internal/provider/acctest":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Every string constant and every package-level list of string literals, by name.
	consts, lists := map[string]string{}, map[string][]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range g.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if s, ok := stringLit(vs.Values[i]); ok && g.Tok == token.CONST {
						consts[name.Name] = s
					}
					if l, ok := stringList(vs.Values[i]); ok {
						lists[name.Name] = l
					}
				}
			}
		}
	}

	reads := map[string]string{}
	var unresolved []string
	// forwarders: a function (by name) that reads the environment with its parameter at
	// an index; lookups: a function whose parameter at an index is os.LookupEnv.
	type param struct {
		fn    string
		index int
	}
	forwarders, lookups := map[param]bool{}, map[param]bool{}
	isEnvFunc := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		return ok && x.Name == "os" && (sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv")
	}
	calleeName := func(e ast.Expr) string {
		switch f := e.(type) {
		case *ast.Ident:
			return f.Name
		case *ast.SelectorExpr:
			return f.Sel.Name
		}
		return ""
	}
	// resolve names the variable of expression e in function fn: a literal, a constant,
	// a range over a list, or a parameter of fn (then fn forwards).
	resolve := func(fn *ast.FuncDecl, e ast.Expr, where string) bool {
		if s, ok := stringLit(e); ok {
			reads[s] = where
			return true
		}
		var name string
		switch x := e.(type) {
		case *ast.Ident:
			name = x.Name
		case *ast.SelectorExpr:
			name = x.Sel.Name
		default:
			return false
		}
		if s, ok := consts[name]; ok {
			reads[s] = where
			return true
		}
		if fn == nil {
			return false
		}
		if i := paramIndex(fn, name); i >= 0 {
			forwarders[param{fn.Name.Name, i}] = true
			return true
		}
		// A range variable over a list of literals (inline, or a package-level list): the
		// names of every such range of fn with that variable.
		found := false
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			r, ok := n.(*ast.RangeStmt)
			if !ok {
				return true
			}
			if v, ok := r.Value.(*ast.Ident); ok && v.Name == name {
				l, ok := stringList(r.X)
				if !ok {
					if id, isID := r.X.(*ast.Ident); isID {
						l, ok = lists[id.Name]
					}
				}
				if ok {
					for _, s := range l {
						reads[s] = where
					}
					found = true
				}
			}
			return true
		})
		return found
	}
	// Passes until no new forwarder or lookup function is found.
	for pass := 0; pass < 5; pass++ {
		unresolved = unresolved[:0]
		before := len(forwarders) + len(lookups)
		for _, f := range files {
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					where := fset.Position(call.Pos()).String()
					if rel, err := filepath.Rel(root, where); err == nil {
						where = rel
					}
					callee := calleeName(call.Fun)
					switch {
					case isEnvFunc(call.Fun) && len(call.Args) == 1:
						if !resolve(fn, call.Args[0], where) {
							unresolved = append(unresolved, where)
						}
					case lookups[param{callee, -1}]:
					default:
						for i, a := range call.Args {
							if isEnvFunc(a) {
								lookups[param{callee, i}] = true
							}
							if forwarders[param{callee, i}] && !resolve(fn, a, where) {
								unresolved = append(unresolved, where)
							}
						}
						// A call of a parameter that is os.LookupEnv.
						if id, ok := call.Fun.(*ast.Ident); ok && len(call.Args) == 1 {
							if i := paramIndex(fn, id.Name); i >= 0 && lookups[param{fn.Name.Name, i}] {
								if !resolve(fn, call.Args[0], where) {
									unresolved = append(unresolved, where)
								}
							}
						}
					}
					return true
				})
			}
		}
		if len(forwarders)+len(lookups) == before && pass > 0 {
			break
		}
	}
	for _, u := range unresolved {
		t.Errorf("%s reads the environment with a name this test cannot resolve: read it with a literal or a constant, or teach the test the new way", u)
	}
	return reads
}

func paramIndex(fn *ast.FuncDecl, name string) int {
	i := 0
	for _, field := range fn.Type.Params.List {
		for _, n := range field.Names {
			if n.Name == name {
				return i
			}
			i++
		}
		if len(field.Names) == 0 {
			i++
		}
	}
	return -1
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

func stringList(e ast.Expr) ([]string, bool) {
	cl, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil, false
	}
	var out []string
	for _, el := range cl.Elts {
		s, ok := stringLit(el)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, len(out) > 0
}
