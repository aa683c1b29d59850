package fleet

// BenchmarkScale measures how the command's own work grows with the number of nodes:
// the roster of N Incus nodes read and checked (LoadRoster), the group planned (Plan),
// the rollout planned in waves (a canary, then waves of a quarter of the nodes, a budget of 10 %), and run
// by runRollout at the default parallelism with a deployer that answers in memory. A
// node's own deploy is the engine's, measured per node by deploybody's BenchmarkScale:
// the fake deployer here stands for it so that what is left is what the command adds
// per node (its goroutines, its outcomes, its waves, its sorting). Run with
// lab/bench-scale.sh, or
//
//	go test ./internal/fleet -run '^$' -bench Scale -benchtime 1x

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/noderun"
	"github.com/fediversity/terraform-provider-fediversity/internal/scalemeter"
)

// scaleRoster writes a roster of n Incus nodes and returns its file.
func scaleRoster(b *testing.B, n int) string {
	b.Helper()
	var nodes []string
	for i := range n {
		nodes = append(nodes, fmt.Sprintf(`"n%04d": {"incus": {"instance": "n%04d"}, "toplevel": "/nix/store/0000000000000000000000000000000a-nixos-system-n%04d"}`, i, i, i))
	}
	file := filepath.Join(b.TempDir(), "roster.json")
	if err := os.WriteFile(file, []byte(`{"nodes": {`+strings.Join(nodes, ",")+`}}`), 0o600); err != nil {
		b.Fatal(err)
	}
	return file
}

func BenchmarkScale(b *testing.B) {
	var base scalemeter.Figures
	for _, n := range []int{1, 10, 100, 500} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			file := scaleRoster(b, n)
			var f scalemeter.Figures
			for range b.N {
				f = scalemeter.Measure(func() { runGroupInMemory(b, file, n) })
			}
			if n == 1 {
				base = f
			}
			f.Report(b, n, base)
		})
	}
}

// runGroupInMemory is the command's run of the roster in file, every node's deploy
// answered in memory with a passing verdict.
func runGroupInMemory(b *testing.B, file string, n int) {
	r, err := LoadRoster(file)
	if err != nil {
		b.Fatal(err)
	}
	g := &Group{Roster: r, Rollout: &Rollout{Canary: ParseNodeSelection("1"), WaveSize: scaleAmount(b, "25%"), FailureBudget: scaleAmount(b, "10%")}}
	nodes, _, err := g.Plan()
	if err != nil {
		b.Fatal(err)
	}
	plan, _ := g.Rollout.Plan(nodes, r.NodeNames())
	outcomes, res := runRollout(context.Background(), plan, DefaultParallel, func(_ context.Context, node string) Outcome {
		spec := r.Spec(node)
		return Outcome{Node: node, Outcome: noderun.Outcome{Result: &deploybody.Result{Node: node, Toplevel: spec.Toplevel, Verdict: &judge.Verdict{OK: true}}}}
	}, nil)
	if len(outcomes) != n || !res.Complete() {
		b.Fatalf("%d outcomes of %d nodes, complete %v", len(outcomes), n, res.Complete())
	}
	for _, o := range outcomes {
		if !o.OK() {
			b.Fatalf("node %s did not pass", o.Node)
		}
	}
}

func scaleAmount(b *testing.B, v string) Amount {
	a, err := ParseAmount(v)
	if err != nil {
		b.Fatal(err)
	}
	return a
}
