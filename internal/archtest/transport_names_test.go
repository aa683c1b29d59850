package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestTransportsAreNamedInTheirPlaces holds docs/transports.md#adding-a-transport true: outside
// the transports' own packages (internal/transport) and the node spec (internal/nodespec),
// only the files listed here name a transport: its blocks' models and schemas in the
// provider, its kind, or its spec type. Every other file reaches a node through the
// spec and kit.TransportBlocks, so a new transport does not touch it.
func TestTransportsAreNamedInTheirPlaces(t *testing.T) {
	allowed := map[string]string{
		// The one place each front end decodes a transport.
		"internal/provider/kit/transport_blocks.go": "the provider's transport blocks (TransportBlocks)",
		"internal/fleet/roster.go":                  "the command's roster: SSH settings at a node's top level",
		// One transport's own needs, which another transport does not share.
		"internal/provider/kit/transport_open.go":       "the provider's SSH pool and credentials, its Incus project and remote guard",
		"internal/provider/spire/spire_common.go":       "the spire node is reached over SSH, always",
		"internal/fleet/group.go":                       "the command's Incus remote and SSH credentials checks",
		"internal/provider/node/resource_incus_node.go": "fediversity_incus_node makes Incus instances: it imports an incus:// address only",
	}
	named := map[string]bool{
		"SSHBlockModel": true, "IncusBlockModel": true, "SSHBlockSchema": true, "IncusBlockSchema": true,
		"SSHBlockFromTarget": true, "IncusBlockFromTarget": true, "KindSSH": true, "KindIncus": true,
	}
	root := filepath.Join("..", "..")
	found := map[string][]string{}
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				if rel == "internal/transport" || rel == "internal/nodespec" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Ident:
					if named[n.Name] {
						found[rel] = append(found[rel], n.Name)
					}
				case *ast.SelectorExpr:
					// nodespec.SSH, nodespec.Incus: a transport's spec type.
					if x, ok := n.X.(*ast.Ident); ok && x.Name == "nodespec" && (n.Sel.Name == "SSH" || n.Sel.Name == "Incus") {
						found[rel] = append(found[rel], "nodespec."+n.Sel.Name)
					}
				case *ast.BinaryExpr:
					// t.Kind == "ssh": a transport's kind by name.
					if kindCompared(n.X, n.Y) || kindCompared(n.Y, n.X) {
						found[rel] = append(found[rel], "Kind == name")
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var files []string
	for f := range found {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		if _, ok := allowed[f]; !ok {
			t.Errorf("%s names a transport (%s): decode it through kit.TransportBlocks or nodespec.Spec, or list the file here and in docs/transports.md#adding-a-transport", f, strings.Join(found[f], ", "))
		}
	}
	for f, why := range allowed {
		if len(found[f]) == 0 {
			t.Errorf("%s (%s) names no transport any more: drop it from this list and from docs/transports.md#adding-a-transport", f, why)
		}
	}
}

func kindCompared(sel, lit ast.Expr) bool {
	s, ok := sel.(*ast.SelectorExpr)
	if !ok || s.Sel.Name != "Kind" {
		return false
	}
	l, ok := lit.(*ast.BasicLit)
	if !ok || l.Kind != token.STRING {
		return false
	}
	v, _ := strconv.Unquote(l.Value)
	return v == "ssh" || v == "incus"
}
