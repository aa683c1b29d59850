package main

import (
	"path/filepath"
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
