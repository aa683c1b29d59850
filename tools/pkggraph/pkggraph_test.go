package main

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The deploy body's data flow shows (docs/design.md#phases): no file calls back into an
// earlier phase's file or into a file that calls it, and no struct holds a context
// (the context is a parameter of each phase).
func TestDeployBodyHasNoBackArrows(t *testing.T) {
	r, err := analyze(filepath.Join("..", "..", "internal", "deploybody"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.edges) < 20 {
		t.Fatalf("only %d calls between the deploy body's files: the measure found too little to judge", len(r.edges))
	}
	for _, e := range r.edges {
		if e.back || e.inCycle {
			t.Errorf("%s calls %s %d times: a back-arrow (files ranked %s)", e.from, e.to, e.refs, r.orderString())
		}
	}
	for _, s := range r.structs {
		if s.holdsContext {
			t.Errorf("struct %s holds a context.Context: pass it as a parameter", s.name)
		}
	}
}

// The deploy body's rooms below it: judging (pure over what the node printed) and the
// node's records (their files, scripts and formats). Each has no back-arrow and no
// cycle between its files, holds no context in a struct, and imports neither the body
// nor the other room: the body calls them, never the other way round.
var deployBodyRooms = []string{"judge", "records"}

func TestDeployBodyRoomsSitBelowTheBody(t *testing.T) {
	const module = "github.com/fediversity/terraform-provider-fediversity/"
	body := filepath.Join("..", "..", "internal", "deploybody")
	for _, room := range deployBodyRooms {
		dir := filepath.Join(body, room)
		r, err := analyze(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.funcs) == 0 {
			t.Fatalf("%s: no functions found: the measure found nothing to judge", dir)
		}
		for _, e := range r.edges {
			if e.back || e.inCycle {
				t.Errorf("%s: %s calls %s %d times: a back-arrow (files ranked %s)", room, e.from, e.to, e.refs, r.orderString())
			}
		}
		for _, s := range r.structs {
			if s.holdsContext {
				t.Errorf("%s: struct %s holds a context.Context: pass it as a parameter", room, s.name)
			}
		}
		forbidden := []string{module + "internal/deploybody"}
		for _, other := range deployBodyRooms {
			if other != room {
				forbidden = append(forbidden, module+"internal/deploybody/"+other)
			}
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		if len(files) == 0 {
			t.Fatalf("%s: no Go files", dir)
		}
		for _, f := range files {
			parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range parsed.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, bad := range forbidden {
					if path == bad {
						t.Errorf("%s imports %s: the body's rooms sit below it and beside each other", f, path)
					}
				}
			}
		}
	}
}

// The measure sees a back-arrow and a cycle when there is one.
func TestAnalyzeFindsBackArrows(t *testing.T) {
	r, err := analyze(filepath.Join("testdata", "cyclic"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range r.edges {
		if e.back {
			got = append(got, e.from+"->"+e.to)
		}
	}
	if strings.Join(got, " ") != "second.go->first.go" {
		t.Fatalf("back-arrows = %v (order %s), want second.go->first.go", got, r.orderString())
	}
	if r.cycleEdges() != 2 {
		t.Fatalf("cycle edges = %d, want 2", r.cycleEdges())
	}
	if len(r.structs) == 0 || !r.structs[0].holdsContext {
		t.Fatalf("structs = %+v, want run holding a context", r.structs)
	}
}
