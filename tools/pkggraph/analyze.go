package main

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// report is what analyze measured of one package.
type report struct {
	structs []structRow
	funcs   []funcRow
	order   []string // the files, ranked
	edges   []edge   // sorted by the rank of from, then of to
}

type structRow struct {
	name            string
	fields, methods int
	files           int // files holding its methods
	holdsContext    bool
}

type funcRow struct {
	name, file   string
	lines, cyclo int
}

type edge struct {
	from, to string
	refs     int
	back     bool // to ranks before from
	inCycle  bool // to also reaches from
}

func (r *report) byLength() []funcRow {
	out := append([]funcRow(nil), r.funcs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].lines > out[j].lines })
	return out
}

func (r *report) byComplexity() []funcRow {
	out := append([]funcRow(nil), r.funcs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].cyclo > out[j].cyclo })
	return out
}

func (r *report) orderString() string { return strings.Join(r.order, " ") }

func (r *report) backArrows() int {
	n := 0
	for _, e := range r.edges {
		if e.back {
			n++
		}
	}
	return n
}

func (r *report) cycleEdges() int {
	n := 0
	for _, e := range r.edges {
		if e.inCycle {
			n++
		}
	}
	return n
}

// analyze type-checks the non-test files of the package in dir and measures them.
func analyze(dir string) (*report, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
			if err != nil {
				return nil, err
			}
			files = append(files, f)
		}
	}
	fileOf := func(p token.Pos) string { return filepath.Base(fset.File(p).Name()) }
	sort.Slice(files, func(i, j int) bool { return fileOf(files[i].Pos()) < fileOf(files[j].Pos()) })
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check(dir, fset, files, info)
	if err != nil {
		return nil, fmt.Errorf("type-checking %s: %w", dir, err)
	}
	r := &report{structs: structRows(pkg, fileOf)}
	funcFile := map[types.Object]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				funcFile[info.Defs[fd.Name]] = fileOf(fd.Pos())
				r.funcs = append(r.funcs, funcRow{funcName(fd), fileOf(fd.Pos()),
					fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1, cyclo(fd)})
			}
		}
	}
	refs := fileReferences(files, info, funcFile, fileOf)
	r.order = rankFiles(files, info, funcFile, fileOf, refs)
	rank := map[string]int{}
	for i, f := range r.order {
		rank[f] = i
	}
	for k, n := range refs {
		r.edges = append(r.edges, edge{from: k[0], to: k[1], refs: n, back: rank[k[1]] < rank[k[0]], inCycle: reaches(refs, k[1], k[0])})
	}
	sort.Slice(r.edges, func(i, j int) bool {
		a, b := r.edges[i], r.edges[j]
		if rank[a.from] != rank[b.from] {
			return rank[a.from] < rank[b.from]
		}
		return rank[a.to] < rank[b.to]
	})
	return r, nil
}

func structRows(pkg *types.Package, fileOf func(token.Pos) string) []structRow {
	var rows []structRow
	scope := pkg.Scope()
	for _, n := range scope.Names() {
		tn, ok := scope.Lookup(n).(*types.TypeName)
		if !ok {
			continue
		}
		named, ok := tn.Type().(*types.Named)
		if !ok {
			continue
		}
		st, ok := named.Underlying().(*types.Struct)
		if !ok {
			continue
		}
		row := structRow{name: n, fields: st.NumFields(), methods: named.NumMethods()}
		files := map[string]bool{}
		for i := 0; i < named.NumMethods(); i++ {
			files[fileOf(named.Method(i).Pos())] = true
		}
		row.files = len(files)
		for i := 0; i < st.NumFields(); i++ {
			if st.Field(i).Type().String() == "context.Context" {
				row.holdsContext = true
			}
		}
		rows = append(rows, row)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].methods > rows[j].methods })
	return rows
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// fileReferences counts, per pair of files, the references from one to the functions
// and methods of the other.
func fileReferences(files []*ast.File, info *types.Info, funcFile map[types.Object]string, fileOf func(token.Pos) string) map[[2]string]int {
	refs := map[[2]string]int{}
	for _, f := range files {
		from := fileOf(f.Pos())
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				if to, ok := funcFile[info.Uses[id]]; ok && to != from {
					refs[[2]string{from, to}]++
				}
			}
			return true
		})
	}
	return refs
}

// rankFiles orders the files: deploy.go, the phase functions' files in step-table order,
// then the rest in topological order.
func rankFiles(files []*ast.File, info *types.Info, funcFile map[types.Object]string, fileOf func(token.Pos) string, refs map[[2]string]int) []string {
	order := []string{"deploy.go"}
	ranked := map[string]bool{"deploy.go": true}
	for _, f := range stepFiles(files, info, funcFile) {
		if !ranked[f] {
			ranked[f] = true
			order = append(order, f)
		}
	}
	var rest []string
	for _, f := range files {
		if !ranked[fileOf(f.Pos())] {
			rest = append(rest, fileOf(f.Pos()))
		}
	}
	// Kahn's algorithm, ties alphabetical; a cycle is broken at its first file.
	for len(rest) > 0 {
		sort.Strings(rest)
		pick := 0
		for i, f := range rest {
			free := true
			for _, g := range rest {
				if g != f && refs[[2]string{g, f}] > 0 {
					free = false
				}
			}
			if free {
				pick = i
				break
			}
		}
		order = append(order, rest[pick])
		rest = append(rest[:pick], rest[pick+1:]...)
	}
	return order
}

// stepFiles are the files of the step table's phase functions, in step order: for each
// entry of a []step literal, the file of the first package function it names.
func stepFiles(files []*ast.File, info *types.Info, funcFile map[types.Object]string) []string {
	var out []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			at, ok := cl.Type.(*ast.ArrayType)
			if !ok || fmt.Sprint(at.Elt) != "step" {
				return true
			}
			for _, el := range cl.Elts {
				entry, ok := el.(*ast.CompositeLit)
				if !ok || len(entry.Elts) < 2 {
					continue
				}
				found := ""
				ast.Inspect(entry.Elts[1], func(n ast.Node) bool {
					if id, ok := n.(*ast.Ident); ok && found == "" {
						found = funcFile[info.Uses[id]]
					}
					return found == ""
				})
				if found != "" {
					out = append(out, found)
				}
			}
			return false
		})
	}
	return out
}

func reaches(refs map[[2]string]int, a, b string) bool {
	seen := map[string]bool{a: true}
	stack := []string{a}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if x == b {
			return true
		}
		for k := range refs {
			if k[0] == x && !seen[k[1]] {
				seen[k[1]] = true
				stack = append(stack, k[1])
			}
		}
	}
	return false
}

// cyclo is the cyclomatic complexity of a function as gocyclo counts it: one, plus
// one per if, for, case, select case, && and ||.
func cyclo(fd *ast.FuncDecl) int {
	c := 1
	ast.Inspect(fd, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil {
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}
