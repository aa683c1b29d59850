package noderun

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// node is a stand-in for a node's connection: the run only hands it to Prepare and the
// body (fakes here, whose faults a real node cannot show on demand) and closes it.
type node struct {
	deploybody.Transport // nil: a call the run must not make panics
	closed               int
}

func (n *node) Node() string { return "web01" }
func (n *node) Close() error { n.closed++; return nil }

func TestRunSequence(t *testing.T) {
	refused := errors.New("connection refused")
	cases := []struct {
		name string
		run  func(*node, *[]string) Run
		// check judges the outcome; bodyRan is whether the body ran.
		check func(t *testing.T, out Outcome, bodyRan bool, n *node)
	}{
		{"a node not reached runs nothing and says where", func(_ *node, _ *[]string) Run {
			return Run{Open: func() (deploybody.Transport, error) { return nil, refused }, ConnectHint: "check the roster"}
		}, func(t *testing.T, out Outcome, bodyRan bool, _ *node) {
			var de *deploybody.DeployError
			if out.Connected || bodyRan || !errors.As(out.Err, &de) || de.Phase != PhaseConnect || de.Hint != "check the roster" || !errors.Is(out.Err, refused) {
				t.Fatalf("outcome %+v (body ran: %v): want phase connect with the hint, nothing run", out, bodyRan)
			}
		}},
		{"prepare completes the options the body gets, on the node's own connection", func(n *node, seen *[]string) Run {
			return Run{Prepare: func(_ context.Context, t deploybody.Transport, opts *deploybody.Options) (*deploybody.Result, error) {
				if t != deploybody.Transport(n) {
					*seen = append(*seen, "prepare got another transport")
				}
				opts.Toplevel = "/nix/store/aaaa-last-good"
				return nil, nil
			}}
		}, func(t *testing.T, out Outcome, bodyRan bool, n *node) {
			if !bodyRan || out.Err != nil || out.Result.Toplevel != "/nix/store/aaaa-last-good" || n.closed != 1 {
				t.Fatalf("outcome %+v, closed %d times: want the body run with prepare's toplevel and the connection closed once", out, n.closed)
			}
		}},
		{"prepare's result ends the run (a resumed node)", func(_ *node, _ *[]string) Run {
			return Run{Prepare: func(context.Context, deploybody.Transport, *deploybody.Options) (*deploybody.Result, error) {
				return &deploybody.Result{Warnings: []string{"resumed"}}, nil
			}}
		}, func(t *testing.T, out Outcome, bodyRan bool, _ *node) {
			if bodyRan || !out.Prepared || !slices.Equal(out.Warnings(), []string{"resumed"}) {
				t.Fatalf("outcome %+v (body ran: %v): want prepare's result, the body not run", out, bodyRan)
			}
		}},
		{"a rollback point on a node that is not Incus runs nothing", func(_ *node, _ *[]string) Run {
			return Run{SnapshotKeep: 3}
		}, func(t *testing.T, out Outcome, bodyRan bool, _ *node) {
			var de *deploybody.DeployError
			if bodyRan || out.Result != nil || !errors.As(out.Err, &de) || de.Phase != PhaseConnect || !strings.Contains(out.Err.Error(), "ncus") {
				t.Fatalf("outcome %+v (body ran: %v): want a refusal naming Incus, nothing run", out, bodyRan)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := &node{}
			var seen []string
			r := c.run(n, &seen)
			r.Node = "web01"
			if r.Open == nil {
				r.Open = func() (deploybody.Transport, error) { return n, nil }
			}
			r.CloseAfter = true
			bodyRan := false
			r.Body = func(_ context.Context, _ deploybody.Transport, opts deploybody.Options) (*deploybody.Result, error) {
				bodyRan = true
				return &deploybody.Result{Node: opts.Node, Toplevel: opts.Toplevel}, nil
			}
			out := r.Do(context.Background())
			if len(seen) > 0 {
				t.Fatal(seen)
			}
			c.check(t, out, bodyRan, n)
		})
	}
}

// The run's own warnings come before the body's, in one list for both front ends.
func TestOutcomeWarningsInOrder(t *testing.T) {
	out := Outcome{RunWarnings: []Warning{{Fact: "kept its earlier rollback point", Detail: "node web01 ran …"}},
		Result: &deploybody.Result{Warnings: []string{"took over the node lock"}}}
	want := []string{"kept its earlier rollback point: node web01 ran …", "took over the node lock"}
	if got := out.Warnings(); !slices.Equal(got, want) {
		t.Fatalf("Warnings() = %q, want %q", got, want)
	}
}
