// Command pkggraph measures one Go package: its structs (fields, methods, and whether
// one holds a context.Context), its longest and most complex functions (cyclomatic
// complexity counted as gocyclo does), and the calls between its files, with the
// back-arrows among them. Usage, from the repository's root:
//
//	go run ./tools/pkggraph internal/deploybody
//
// The files are ranked: deploy.go (the driver) first, then the files of the step
// table's phase functions in step order, then the other files in topological order
// (ties alphabetical). A call into a lower-ranked file is a back-arrow; a call from A
// into B where B also reaches A is a cycle edge. Its test holds the deploy body to no
// back-arrow, no cycle and no struct that holds a context.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run ./tools/pkggraph <package dir>")
		os.Exit(2)
	}
	r, err := analyze(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r.print(os.Stdout)
}

func (r *report) print(w io.Writer) {
	fmt.Fprintln(w, "== structs with methods or 8+ fields (fields, methods, files with methods)")
	for _, s := range r.structs {
		if s.methods == 0 && s.fields < 8 {
			continue
		}
		name := s.name
		if s.holdsContext {
			name += " (holds a context.Context)"
		}
		fmt.Fprintf(w, "%-40s %3d fields %3d methods over %d files\n", name, s.fields, s.methods, s.files)
	}
	fmt.Fprintln(w, "== longest functions (lines, cyclomatic complexity)")
	for i, f := range r.byLength() {
		if i == 15 {
			break
		}
		fmt.Fprintf(w, "%4d lines  cyclo %3d  %-40s %s\n", f.lines, f.cyclo, f.name, f.file)
	}
	fmt.Fprintln(w, "== most complex functions")
	for i, f := range r.byComplexity() {
		if i == 5 {
			break
		}
		fmt.Fprintf(w, "cyclo %3d  %4d lines  %-40s %s\n", f.cyclo, f.lines, f.name, f.file)
	}
	fmt.Fprintln(w, "== file order:", r.orderString())
	fmt.Fprintln(w, "== file call graph (from -> to: references; * back-arrow, ~ in a cycle)")
	for _, e := range r.edges {
		back, cyc := " ", " "
		if e.back {
			back = "*"
		}
		if e.inCycle {
			cyc = "~"
		}
		fmt.Fprintf(w, "  %s%s %-20s -> %-20s %d\n", back, cyc, e.from, e.to, e.refs)
	}
	fmt.Fprintf(w, "== %d file edges, %d step-order back-arrows, %d edges in cycles\n", len(r.edges), r.backArrows(), r.cycleEdges())
}
