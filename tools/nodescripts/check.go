package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

const module = "github.com/fediversity/terraform-provider-fediversity/"

// Where a script runs decides what it may call by bare name.
const (
	login = "login" // SSH or Incus exec: a default NixOS system's commands
	unit  = "unit"  // a systemd unit: systemd's own bin only
)

// unitScripts are the scripts the Go code hands to systemd-run itself (as argv, not
// inside another script, where the check sees systemd-run on its own).
var unitScripts = map[string]bool{"remote.DetachedScript": true}

// dynamicScripts are the places that run a script the source builds at run time, and
// why that is safe: what they run is checked where it is made.
var dynamicScripts = map[string]string{
	"remote.BatchCommand": "frames commands that are each checked where they are made (the frame is printf, a shell builtin)",
	"remote.WithPath":     "puts PATH assignments and export (shell builtins, inlinePath) in front of a /bin/sh script that is checked where it is made",
}

// knownFaults are faults found in files another change owns, reported but not failing
// the check until that change lands; each must still occur (a fixed one fails the
// check until it is removed here), so the list cannot go stale.
var knownFaults = map[string]string{}

// skippedDirs hold test helpers that run on the deployer or only in the lab's tests.
var skippedDirs = map[string]bool{"internal/labtest": true, "internal/provider/acctest": true}

// shellBuiltins are what dash and bash run without looking anything up (NixOS's
// /bin/sh is bash).
var shellBuiltins = setOf(strings.Fields(`: . [ alias bg break cd command continue echo eval exec exit export false fg getopts
	hash jobs kill local printf pwd read readonly return set shift test times trap true type ulimit umask unalias unset wait`))

// Script is one node-side script found in the source.
type Script struct {
	Name  string // how the source names it (package.Name, or package.func for a literal)
	Pos   string
	Where string
	Text  string
	Calls []string // external commands it calls, as written
}

// Command is one argv the source sends (no shell), or one command a script calls.
type Command struct {
	Pos, Name, Where string
}

// Report is what Check found.
type Report struct {
	Scripts  []*Script
	Commands []Command
	Faults   []string
	// Known are the faults knownFaults sets aside, each with its owner.
	Known []string
}

// setKnownAside moves the known faults out of Faults; a known fault that no longer
// occurs becomes a fault of its own.
func (c *checker) setKnownAside() {
	seen := map[string]bool{}
	var faults []string
	for _, f := range c.rep.Faults {
		known := ""
		for k, owner := range knownFaults {
			if strings.Contains(f, k) {
				known, seen[k] = owner, true
			}
		}
		if known != "" {
			c.rep.Known = append(c.rep.Known, f+" [known: "+known+"]")
			continue
		}
		faults = append(faults, f)
	}
	for _, k := range sortedKeys(knownFaults) {
		if !seen[k] {
			faults = append(faults, "the known fault "+strconv.Quote(k)+" no longer occurs: remove it from knownFaults in tools/nodescripts")
		}
	}
	c.rep.Faults = faults
}

// Print writes the report: each script, where it runs and what it calls.
func (r *Report) Print(w io.Writer) {
	for _, s := range r.Scripts {
		fmt.Fprintf(w, "%s (%s, %s)\n", s.Name, s.Where, s.Pos)
		if len(s.Calls) == 0 {
			fmt.Fprintln(w, "    calls: shell builtins only")
			continue
		}
		fmt.Fprintf(w, "    calls: %s\n", strings.Join(s.Calls, " "))
	}
	names := map[string][]string{}
	for _, c := range r.Commands {
		names[c.Name] = append(names[c.Name], c.Pos)
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintln(w, "argv commands (no shell):")
	for _, k := range keys {
		fmt.Fprintf(w, "    %s (%d places)\n", k, len(names[k]))
	}
}

// allowed are the commands a login and a unit may call by bare name.
type allowed struct{ login, unit map[string]bool }

// readDefaultCommands reads lab/nixos/default-commands: every command is a login's;
// the group that holds systemctl (systemd's package) is also a unit's.
func readDefaultCommands(path string) (allowed, error) {
	f, err := os.Open(path)
	if err != nil {
		return allowed{}, err
	}
	defer func() { _ = f.Close() }()
	a := allowed{login: map[string]bool{}, unit: map[string]bool{}}
	var groups [][]string
	inGroup := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "":
		case strings.HasPrefix(l, "#"):
			inGroup = false
		default:
			if !inGroup {
				groups = append(groups, nil)
				inGroup = true
			}
			groups[len(groups)-1] = append(groups[len(groups)-1], l)
			a.login[l] = true
		}
	}
	for _, g := range groups {
		if contains(g, "systemctl") {
			for _, c := range g {
				a.unit[c] = true
			}
		}
	}
	if len(a.login) == 0 || !a.unit["systemctl"] {
		return a, fmt.Errorf("%s: no commands, or no group with systemctl", path)
	}
	return a, sc.Err()
}

// pkg is one parsed Go package.
type pkg struct {
	dir, name string
	files     []*ast.File
	fset      *token.FileSet
	// values are the package-level constants and variables with one initializer.
	values map[string]ast.Expr
}

// Check reads every Go package under root's internal/ and cmd/ and checks what they send.
func Check(root string) (*Report, error) {
	al, err := readDefaultCommands(filepath.Join(root, "lab/nixos/default-commands"))
	if err != nil {
		return nil, err
	}
	pkgs, err := parsePackages(root)
	if err != nil {
		return nil, err
	}
	c := &checker{al: al, pkgs: pkgs, rep: &Report{}, seen: map[string]bool{}}
	for _, dir := range sortedKeys(pkgs) {
		c.scanPackage(pkgs[dir])
	}
	c.resolveForwarders()
	sort.Slice(c.rep.Scripts, func(i, j int) bool { return c.rep.Scripts[i].Name < c.rep.Scripts[j].Name })
	c.setKnownAside()
	return c.rep, nil
}

func parsePackages(root string) (map[string]*pkg, error) {
	pkgs := map[string]*pkg{}
	fset := token.NewFileSet()
	for _, top := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				rel, _ := filepath.Rel(root, path)
				if d.Name() == "testdata" || skippedDirs[filepath.ToSlash(rel)] {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			rel = filepath.ToSlash(rel)
			p := pkgs[rel]
			if p == nil {
				p = &pkg{dir: rel, name: f.Name.Name, fset: fset, values: map[string]ast.Expr{}}
				pkgs[rel] = p
			}
			p.files = append(p.files, f)
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || (gd.Tok != token.CONST && gd.Tok != token.VAR) {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					if len(vs.Names) == len(vs.Values) {
						for i, n := range vs.Names {
							p.values[n.Name] = vs.Values[i]
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return pkgs, nil
}

type checker struct {
	al   allowed
	pkgs map[string]*pkg
	rep  *Report
	seen map[string]bool
	// forwarders are functions that pass one of their parameters on as a script:
	// package dir → function name → parameter index.
	forwarders []forwarder
}

type forwarder struct {
	p     *pkg
	fn    string
	index int
}

// scope is what an expression is evaluated in: its package, its file's imports, and
// the enclosing function's local constants and parameters.
type scope struct {
	p       *pkg
	imports map[string]string // import name → package dir
	locals  map[string]ast.Expr
	params  map[string]int
	fn      string
}

func fileImports(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !strings.HasPrefix(path, module) {
			continue
		}
		dir := strings.TrimPrefix(path, module)
		name := filepath.Base(dir)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		m[name] = dir
	}
	return m
}

func (c *checker) scanPackage(p *pkg) {
	for _, f := range p.files {
		imports := fileImports(f)
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				s := &scope{p: p, imports: imports, locals: map[string]ast.Expr{}, params: map[string]int{}, fn: funcName(d)}
				i := 0
				if d.Type.Params != nil {
					for _, fld := range d.Type.Params.List {
						for _, n := range fld.Names {
							s.params[n.Name] = i
							i++
						}
						if len(fld.Names) == 0 {
							i++
						}
					}
				}
				if d.Body != nil {
					c.scanNode(s, d.Body)
				}
			case *ast.GenDecl:
				s := &scope{p: p, imports: imports, locals: map[string]ast.Expr{}, params: map[string]int{}, fn: "(package)"}
				c.scanNode(s, d)
			}
		}
	}
}

func funcName(d *ast.FuncDecl) string {
	if d.Recv != nil && len(d.Recv.List) > 0 {
		t := d.Recv.List[0].Type
		if st, ok := t.(*ast.StarExpr); ok {
			t = st.X
		}
		if id, ok := t.(*ast.Ident); ok {
			return id.Name + "." + d.Name.Name
		}
	}
	return d.Name.Name
}

// argvFuncs are the calls whose arguments are an argv run on a node.
var argvFuncs = map[string]bool{"Run": true, "RunFresh": true, "runSys": true, "runScript": true, "remote": true,
	"Exec": true, "exec": true, "OpenExec": true}

func (c *checker) scanNode(s *scope, n ast.Node) {
	ast.Inspect(n, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.DeclStmt:
			if gd, ok := x.Decl.(*ast.GenDecl); ok {
				for _, spec := range gd.Specs {
					if vs, ok := spec.(*ast.ValueSpec); ok && len(vs.Names) == len(vs.Values) {
						for i, nm := range vs.Names {
							s.locals[nm.Name] = vs.Values[i]
						}
					}
				}
			}
		case *ast.AssignStmt:
			if x.Tok == token.DEFINE && len(x.Lhs) == len(x.Rhs) {
				for i, l := range x.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						s.locals[id.Name] = x.Rhs[i]
					}
				}
			}
		case *ast.CompositeLit:
			c.scanList(s, x.Elts, false)
		case *ast.CallExpr:
			c.scanList(s, x.Args, true)
			if argvFuncs[callName(x)] {
				c.scanArgv(s, x)
			}
		case *ast.KeyValueExpr:
			if id, ok := x.Key.(*ast.Ident); ok && id.Name == "Command" {
				if argv, ok := c.evalList(s, x.Value); ok && len(argv) > 0 {
					c.command(s, x.Pos(), argv[0])
				}
			}
		}
		return true
	})
}

func callName(call *ast.CallExpr) string {
	switch f := call.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

// scanList finds `"sh", "-c", X` in a list of expressions.
func (c *checker) scanList(s *scope, list []ast.Expr, call bool) {
	for i := 0; i+2 < len(list); i++ {
		a, ok1 := c.eval(s, list[i])
		b, ok2 := c.eval(s, list[i+1])
		if !ok1 || !ok2 || (a != "sh" && a != "/bin/sh") || b != "-c" {
			continue
		}
		x := list[i+2]
		name := c.nameOf(s, x)
		text, ok := c.eval(s, x)
		if !ok {
			if id, isID := x.(*ast.Ident); isID {
				if idx, isParam := s.params[id.Name]; isParam {
					c.forwarders = append(c.forwarders, forwarder{p: s.p, fn: lastName(s.fn), index: idx})
					continue
				}
			}
			key := s.p.name + "." + s.fn
			if _, listed := dynamicScripts[key]; listed {
				continue
			}
			if _, listed := dynamicScripts[name]; listed {
				continue
			}
			c.fault(s, x.Pos(), fmt.Sprintf("cannot read the script %s sent in %s: make it a constant, or list it in tools/nodescripts dynamicScripts with why it is safe", exprString(x), key))
			continue
		}
		where := login
		if unitScripts[name] {
			where = unit
		}
		c.script(s, x.Pos(), name, where, text)
	}
}

func lastName(fn string) string {
	if i := strings.LastIndex(fn, "."); i >= 0 {
		return fn[i+1:]
	}
	return fn
}

// resolveForwarders checks the scripts given to functions that pass a parameter on to
// "sh -c": at every call of such a function in its package.
func (c *checker) resolveForwarders() {
	for _, fw := range c.forwarders {
		for _, f := range fw.p.files {
			imports := fileImports(f)
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				s := &scope{p: fw.p, imports: imports, locals: map[string]ast.Expr{}, params: map[string]int{}, fn: funcName(fd)}
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					switch x := n.(type) {
					case *ast.DeclStmt, *ast.AssignStmt:
						c.collectLocal(s, x)
					case *ast.CallExpr:
						if callName(x) == fw.fn && fw.index < len(x.Args) {
							arg := x.Args[fw.index]
							if text, ok := c.eval(s, arg); ok {
								c.script(s, arg.Pos(), c.nameOf(s, arg), login, text)
							} else if _, isParam := s.params[exprString(arg)]; !isParam {
								c.fault(s, arg.Pos(), "cannot read the script "+exprString(arg)+" given to "+fw.fn)
							}
						}
					}
					return true
				})
			}
		}
	}
}

func (c *checker) collectLocal(s *scope, n ast.Node) {
	switch x := n.(type) {
	case *ast.DeclStmt:
		if gd, ok := x.Decl.(*ast.GenDecl); ok {
			for _, spec := range gd.Specs {
				if vs, ok := spec.(*ast.ValueSpec); ok && len(vs.Names) == len(vs.Values) {
					for i, nm := range vs.Names {
						s.locals[nm.Name] = vs.Values[i]
					}
				}
			}
		}
	case *ast.AssignStmt:
		if x.Tok == token.DEFINE && len(x.Lhs) == len(x.Rhs) {
			for i, l := range x.Lhs {
				if id, ok := l.(*ast.Ident); ok {
					s.locals[id.Name] = x.Rhs[i]
				}
			}
		}
	}
}

// scanArgv checks the command of an argv given to a call that runs it on a node.
func (c *checker) scanArgv(s *scope, call *ast.CallExpr) {
	for i, arg := range call.Args {
		if argv, ok := c.evalList(s, arg); ok && len(argv) > 0 {
			c.command(s, arg.Pos(), argv[0])
			return
		}
		// runSys(ctx, r, stdin, "cmd", args…) and remote(ctx, toplevel, "cmd", …): the
		// first string argument after the others is the command.
		if v, ok := c.eval(s, arg); ok && i > 0 && !strings.HasPrefix(v, "/nix/") && looksLikeCommand(v) {
			c.command(s, arg.Pos(), v)
			return
		}
	}
}

func looksLikeCommand(v string) bool {
	return v != "" && !strings.ContainsAny(v, " \n=$") && !strings.HasPrefix(v, "-")
}

func (c *checker) command(s *scope, pos token.Pos, name string) {
	if name == "sh" || name == "/bin/sh" {
		return // its script is checked on its own
	}
	p := s.p.fset.Position(pos)
	at := fmt.Sprintf("%s:%d", filepath.ToSlash(p.Filename), p.Line)
	c.rep.Commands = append(c.rep.Commands, Command{Pos: at, Name: name, Where: login})
	if !c.ok(name, login) {
		c.rep.Faults = append(c.rep.Faults, fmt.Sprintf("%s: the command %q is not in a default NixOS system (lab/nixos/default-commands)", at, name))
	}
}

func (c *checker) ok(name, where string) bool {
	if strings.HasPrefix(name, "/") || shellBuiltins[name] {
		return true
	}
	if where == unit {
		return c.al.unit[name]
	}
	return c.al.login[name] || c.al.unit[name]
}

func (c *checker) fault(s *scope, pos token.Pos, msg string) {
	p := s.p.fset.Position(pos)
	c.rep.Faults = append(c.rep.Faults, fmt.Sprintf("%s:%d: %s", filepath.ToSlash(p.Filename), p.Line, msg))
}

// nameOf is how the source names an expression: package.Name for a constant, else
// package.function for a literal.
func (c *checker) nameOf(s *scope, x ast.Expr) string {
	switch e := x.(type) {
	case *ast.Ident:
		if _, local := s.locals[e.Name]; local {
			return s.p.name + "." + s.fn + "." + e.Name
		}
		return s.p.name + "." + e.Name
	case *ast.SelectorExpr:
		if id, ok := e.X.(*ast.Ident); ok {
			return id.Name + "." + e.Sel.Name
		}
	case *ast.IndexExpr:
		return c.nameOf(s, e.X) + "[" + exprString(e.Index) + "]"
	}
	return s.p.name + "." + s.fn
}

func exprString(x ast.Expr) string {
	switch e := x.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.BasicLit:
		return e.Value
	case *ast.IndexExpr:
		return exprString(e.X) + "[" + exprString(e.Index) + "]"
	case *ast.CallExpr:
		return exprString(e.Fun) + "(…)"
	}
	return fmt.Sprintf("%T", x)
}

// eval evaluates a string expression from the source's constants, if it can.
func (c *checker) eval(s *scope, x ast.Expr) (string, bool) {
	return c.evalDepth(s, x, 0)
}

func (c *checker) evalDepth(s *scope, x ast.Expr, depth int) (string, bool) {
	if depth > 40 {
		return "", false
	}
	switch e := x.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		v, err := strconv.Unquote(e.Value)
		return v, err == nil
	case *ast.ParenExpr:
		return c.evalDepth(s, e.X, depth+1)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		a, ok1 := c.evalDepth(s, e.X, depth+1)
		b, ok2 := c.evalDepth(s, e.Y, depth+1)
		return a + b, ok1 && ok2
	case *ast.Ident:
		if v, ok := s.locals[e.Name]; ok {
			return c.evalDepth(s, v, depth+1)
		}
		if v, ok := s.p.values[e.Name]; ok {
			return c.evalDepth(&scope{p: s.p, imports: s.imports, locals: map[string]ast.Expr{}}, v, depth+1)
		}
	case *ast.SelectorExpr:
		if id, ok := e.X.(*ast.Ident); ok {
			if dir, ok := s.imports[id.Name]; ok {
				if p := c.pkgs[dir]; p != nil {
					if v, ok := p.values[e.Sel.Name]; ok {
						return c.evalDepth(c.pkgScope(p, v), v, depth+1)
					}
				}
			}
		}
	case *ast.IndexExpr:
		list, ok := c.evalListDepth(s, e.X, depth+1)
		idx, ok2 := e.Index.(*ast.BasicLit)
		if ok && ok2 {
			if i, err := strconv.Atoi(idx.Value); err == nil && i < len(list) {
				return list[i], true
			}
		}
	case *ast.CallExpr:
		// strconv.Itoa(<integer constant>)
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok && exprString(sel) == "strconv.Itoa" && len(e.Args) == 1 {
			if n, ok := c.evalInt(s, e.Args[0], depth+1); ok {
				return strconv.Itoa(n), true
			}
		}
		// strings.Join(<list>, <sep>)
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok && exprString(sel) == "strings.Join" && len(e.Args) == 2 {
			list, ok1 := c.evalListDepth(s, e.Args[0], depth+1)
			sep, ok2 := c.evalDepth(s, e.Args[1], depth+1)
			if ok1 && ok2 {
				return strings.Join(list, sep), true
			}
		}
	}
	return "", false
}

// evalInt evaluates an integer constant (a literal, or a name of one).
func (c *checker) evalInt(s *scope, x ast.Expr, depth int) (int, bool) {
	if depth > 40 {
		return 0, false
	}
	switch e := x.(type) {
	case *ast.BasicLit:
		n, err := strconv.Atoi(e.Value)
		return n, e.Kind == token.INT && err == nil
	case *ast.Ident:
		if v, ok := s.locals[e.Name]; ok {
			return c.evalInt(s, v, depth+1)
		}
		if v, ok := s.p.values[e.Name]; ok {
			return c.evalInt(s, v, depth+1)
		}
	}
	return 0, false
}

// pkgScope is the scope of a package-level value of p (its file's imports).
func (c *checker) pkgScope(p *pkg, v ast.Expr) *scope {
	for _, f := range p.files {
		if f.Pos() <= v.Pos() && v.End() <= f.End() {
			return &scope{p: p, imports: fileImports(f), locals: map[string]ast.Expr{}}
		}
	}
	return &scope{p: p, imports: map[string]string{}, locals: map[string]ast.Expr{}}
}

func (c *checker) evalList(s *scope, x ast.Expr) ([]string, bool) { return c.evalListDepth(s, x, 0) }

// evalListDepth evaluates a []string: a composite literal, a name of one, or
// append(<list>, …) (its first argument).
func (c *checker) evalListDepth(s *scope, x ast.Expr, depth int) ([]string, bool) {
	if depth > 40 {
		return nil, false
	}
	switch e := x.(type) {
	case *ast.CompositeLit:
		if at, ok := e.Type.(*ast.ArrayType); !ok || exprString(at.Elt) != "string" {
			return nil, false
		}
		var out []string
		for _, el := range e.Elts {
			v, ok := c.evalDepth(s, el, depth+1)
			if !ok {
				// the rest is not known; what is before still names the command
				return out, len(out) > 0
			}
			out = append(out, v)
		}
		return out, len(out) > 0
	case *ast.Ident:
		if v, ok := s.locals[e.Name]; ok {
			return c.evalListDepth(s, v, depth+1)
		}
		if v, ok := s.p.values[e.Name]; ok {
			return c.evalListDepth(c.pkgScope(s.p, v), v, depth+1)
		}
	case *ast.SelectorExpr:
		if id, ok := e.X.(*ast.Ident); ok {
			if dir, ok := s.imports[id.Name]; ok {
				if p := c.pkgs[dir]; p != nil {
					if v, ok := p.values[e.Sel.Name]; ok {
						return c.evalListDepth(c.pkgScope(p, v), v, depth+1)
					}
				}
			}
		}
	case *ast.CallExpr:
		if id, ok := e.Fun.(*ast.Ident); ok && id.Name == "append" && len(e.Args) > 0 {
			return c.evalListDepth(s, e.Args[0], depth+1)
		}
	}
	return nil, false
}

// script records one script and checks what it calls.
func (c *checker) script(s *scope, pos token.Pos, name, where, text string) {
	key := name + "\x00" + text
	if c.seen[key] {
		return
	}
	c.seen[key] = true
	p := s.p.fset.Position(pos)
	at := fmt.Sprintf("%s:%d", filepath.ToSlash(p.Filename), p.Line)
	sc := &Script{Name: name, Pos: at, Where: where, Text: text}
	c.rep.Scripts = append(c.rep.Scripts, sc)
	calls := map[string]bool{}
	c.shell(sc, name, where, text, calls, 0)
	sc.Calls = sortedKeys(calls)
}

// shell parses a script and checks every command it calls.
func (c *checker) shell(sc *Script, name, where, text string, calls map[string]bool, depth int) {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(text), name)
	if err != nil {
		c.rep.Faults = append(c.rep.Faults, fmt.Sprintf("%s: %s does not parse as a POSIX shell script: %v", sc.Pos, name, err))
		return
	}
	funcs := map[string]bool{}
	syntax.Walk(f, func(n syntax.Node) bool {
		if fd, ok := n.(*syntax.FuncDecl); ok {
			funcs[fd.Name.Value] = true
		}
		return true
	})
	syntax.Walk(f, func(n syntax.Node) bool {
		call, ok := n.(*syntax.CallExpr)
		if !ok {
			return true
		}
		if len(call.Args) == 0 {
			// PATH=…: a script that puts a system's sw/bin on its PATH finds what a
			// login finds from then on.
			for _, a := range call.Assigns {
				if a.Name.Value == "PATH" && a.Value != nil && strings.Contains(wordText(a.Value), "sw/bin") {
					where = login
				}
			}
			return true
		}
		c.words(sc, name, where, call.Args, funcs, calls, depth)
		return true
	})
}

// words checks one simple command: its command word, and the command it runs in turn
// (exec, command, sudo, timeout, nice, env, systemd-run, sh -c, find -exec).
func (c *checker) words(sc *Script, name, where string, args []*syntax.Word, funcs, calls map[string]bool, depth int) {
	if len(args) == 0 {
		return
	}
	cmd, lit := wordLit(args[0])
	if !lit {
		// "$1/bin/switch-to-configuration", "$prev/bin/…": an absolute path under a
		// store path argument; "$@", "$bc": run as given (checked where it is made).
		if t := wordText(args[0]); strings.Contains(t, "/bin/") {
			calls[t] = true
		}
		return
	}
	if funcs[cmd] {
		return
	}
	rest := args[1:]
	switch cmd {
	case "exec", "nice", "nohup", "setsid":
		c.words(sc, name, where, rest, funcs, calls, depth)
		return
	case "command":
		if len(rest) > 0 {
			if f, _ := wordLit(rest[0]); f == "-v" || f == "-V" {
				return
			}
		}
		c.words(sc, name, where, rest, funcs, calls, depth)
		return
	case "sudo", "timeout", "env", "systemd-run":
		if !c.ok(cmd, where) {
			c.rep.Faults = append(c.rep.Faults, fmt.Sprintf("%s: %s calls %q, which a NixOS %s does not have", sc.Pos, name, cmd, describeWhere(where)))
		}
		calls[cmd] = true
		inner := where
		if cmd == "systemd-run" {
			inner = unit
		}
		for i := 0; i < len(rest); i++ {
			w, isLit := wordLit(rest[i])
			if !isLit {
				if strings.HasPrefix(wordText(rest[i]), "--") || strings.HasPrefix(wordText(rest[i]), "-") {
					continue
				}
				c.words(sc, name, inner, rest[i:], funcs, calls, depth)
				return
			}
			if w == "--" {
				c.words(sc, name, inner, rest[i+1:], funcs, calls, depth)
				return
			}
			if strings.HasPrefix(w, "-") || strings.Contains(w, "=") || (cmd == "timeout" && isDuration(w)) {
				if cmd == "timeout" && (w == "-k" || w == "-s") {
					i++
				}
				continue
			}
			c.words(sc, name, inner, rest[i:], funcs, calls, depth)
			return
		}
		return
	case "sh", "/bin/sh", "bash":
		if len(rest) >= 2 {
			if f, _ := wordLit(rest[0]); f == "-c" {
				if inner, ok := wordLit(rest[1]); ok && depth < 4 {
					if cmd == "sh" && !c.ok("sh", where) {
						c.rep.Faults = append(c.rep.Faults, fmt.Sprintf("%s: %s calls a bare sh, which a NixOS %s does not have (use /bin/sh)", sc.Pos, name, describeWhere(where)))
					}
					c.shell(sc, name, where, inner, calls, depth+1)
					return
				}
			}
		}
	case "find":
		for i, a := range rest {
			if w, _ := wordLit(a); (w == "-exec" || w == "-execdir") && i+1 < len(rest) {
				c.words(sc, name, where, rest[i+1:], funcs, calls, depth)
			}
		}
	case "xargs":
		for i, a := range rest {
			if w, ok := wordLit(a); ok && !strings.HasPrefix(w, "-") {
				c.words(sc, name, where, rest[i:], funcs, calls, depth)
				break
			}
		}
	}
	if !shellBuiltins[cmd] {
		calls[cmd] = true
	}
	if !c.ok(cmd, where) {
		c.rep.Faults = append(c.rep.Faults, fmt.Sprintf("%s: %s calls %q, which a NixOS %s does not have", sc.Pos, name, cmd, describeWhere(where)))
	}
}

func describeWhere(where string) string {
	if where == unit {
		return "systemd unit (its PATH is systemd's bin only)"
	}
	return "login (lab/nixos/default-commands)"
}

func isDuration(w string) bool {
	w = strings.TrimRight(w, "smhd")
	_, err := strconv.ParseFloat(w, 64)
	return err == nil
}

// wordLit is a word's value when it is made of literal and quoted literal parts only.
func wordLit(w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, p := range w.Parts {
		switch x := p.(type) {
		case *syntax.Lit:
			b.WriteString(x.Value)
		case *syntax.SglQuoted:
			b.WriteString(x.Value)
		case *syntax.DblQuoted:
			for _, q := range x.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(l.Value)
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

// wordText prints a word as written.
func wordText(w *syntax.Word) string {
	var b strings.Builder
	_ = syntax.NewPrinter().Print(&b, w)
	return b.String()
}

func setOf(xs []string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
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
