package submission

import (
	"fmt"
	"strings"
)

// Where a problem was found. The provider maps each to the attribute the operator fixes.
const (
	InSubmission   = "submission"
	InBaked        = "baked configuration"
	InMerged       = "merged configuration"
	InNodePlan     = "node plan"
	InMethod       = "method"
	InIdentityKeys = "identity_keys"
)

// PathError is one problem at one place of a JSON document. Path is a JSON path
// ("$.applications.mastodon.enable"); for a node plan it is written
// "$.nodes.<node>.<path in that node's plan>".
type PathError struct {
	In      string // one of the In* constants
	Node    string // set for InNodePlan
	Path    string
	Problem string
	Fix     string // what the operator can do; may be empty

	// Source and SourcePath say, for a node plan's problem, which document the value
	// came from (InBaked or InSubmission) and where it is in it.
	Source     string
	SourcePath string

	syntax bool // a JSON syntax error: Parse adds the offset
}

func (e *PathError) Error() string {
	var b strings.Builder
	if e.In != "" {
		b.WriteString(e.In)
		if e.Node != "" {
			fmt.Fprintf(&b, " of node %s", e.Node)
		}
		b.WriteString(", ")
	}
	fmt.Fprintf(&b, "at %s: %s", e.Path, e.Problem)
	if e.Fix != "" {
		b.WriteString(". ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Errors is every problem found in one evaluation, in a stable order. The evaluation
// goes on past the first problem where it can, so that the operator fixes all in one go.
type Errors []*PathError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

func (es *Errors) add(in, node, path, problem, fix string) {
	*es = append(*es, &PathError{In: in, Node: node, Path: path, Problem: problem, Fix: fix})
}

// withIn labels a parse error with the document it came from.
func withIn(err error, in string) Errors {
	if pe, ok := err.(*PathError); ok {
		c := *pe
		c.In = in
		return Errors{&c}
	}
	return Errors{{In: in, Path: "$", Problem: err.Error()}}
}
