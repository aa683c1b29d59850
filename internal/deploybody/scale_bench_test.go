package deploybody

// BenchmarkScale measures how the engine's cost grows with the number of nodes: N fake
// nodes (fakenode_test.go: the node answers in memory, its clock moves only when the
// body sleeps, so the figures are the engine's own work and none of a node's) deploy
// the same closure, and the benchmark reports per node the CPU time, the peak RSS, the
// goroutines and the open files at their peak. Two ways to run them:
//
//   - all: every node at once, what a front end does with no bound on its parallelism
//     (the worst case for goroutines and open files);
//   - parallel=10: ten at a time, the default of both front ends (the command's
//     --parallel, Terraform's -parallelism).
//
// Run with (lab/bench-scale.sh prints the table)
//
//	go test ./internal/deploybody -run '^$' -bench Scale -benchtime 1x
//
// The peak RSS of each size is the process's VmHWM after it was reset
// (/proc/self/clear_refs), so it includes the test binary's own heap; the per-node figure
// is the growth over the one-node run, divided by the added nodes.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/scalemeter"
)

// scaleUnits are what each node's new system activates: a handful of ordinary units.
var scaleUnits = map[string]unitSpec{
	"fedi-web.service":    {b: runs},
	"fedi-setup.service":  {b: exitsOK},
	"fedi-worker.service": {b: runs},
	"fedi-cache.service":  {b: runs},
}

// writeScaleClosure lays out the closure every node deploys (as writeClosure does).
func writeScaleClosure(b *testing.B, root string) {
	b.Helper()
	units := filepath.Join(root, testEtcOutput, "etc", "systemd", "system")
	wants := filepath.Join(units, "multi-user.target.wants")
	for _, dir := range []string{wants, filepath.Join(root, testToplevel, "sw", "bin")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.Symlink(testEtcOutput+"/etc", filepath.Join(root, testToplevel, "etc")); err != nil {
		b.Fatal(err)
	}
	for name := range scaleUnits {
		if err := os.WriteFile(filepath.Join(units, name), []byte(plainService), 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Symlink("../"+name, filepath.Join(wants, name)); err != nil {
			b.Fatal(err)
		}
	}
}

// scaleNode is one fake node, ready to deploy, with its own clock.
func scaleNode(i int, root string) (*fakeNode, Options) {
	clock := newFakeClock()
	node := newFakeNode(clock)
	node.name = fmt.Sprintf("fedi-n%d", i)
	node.running, node.profile = testPrevious, testPrevious
	node.store[testPrevious] = true
	node.closures[testToplevel] = scaleUnits
	opts := Options{
		Node:      node.name,
		Toplevel:  testToplevel,
		Strict:    true,
		LocalRoot: root,
		Clock:     clock,
		Logger:    LoggerFunc(func(context.Context, Level, string, string, map[string]any) {}),
	}
	return node, opts
}

func BenchmarkScale(b *testing.B) {
	root := b.TempDir()
	writeScaleClosure(b, root)
	for _, mode := range []struct {
		name     string
		parallel int // 0: all at once
	}{{"all", 0}, {"parallel=10", 10}} {
		var base scalemeter.Figures
		for _, n := range []int{1, 10, 100, 500} {
			b.Run(fmt.Sprintf("%s/nodes=%d", mode.name, n), func(b *testing.B) {
				var f scalemeter.Figures
				for range b.N {
					f = scalemeter.Measure(func() { deployFleet(b, n, mode.parallel, root) })
				}
				if n == 1 {
					base = f
				}
				f.Report(b, n, base)
			})
		}
	}
}

// deployFleet deploys n fake nodes, parallel at a time (all when 0), and fails b on any
// node whose deploy did not pass.
func deployFleet(b *testing.B, n, parallel int, root string) {
	if parallel <= 0 {
		parallel = n
	}
	sem := make(chan struct{}, parallel)
	var failed atomic.Int32
	var firstErr sync.Once
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			node, opts := scaleNode(i, root)
			res, err := Deploy(context.Background(), node, opts)
			if err != nil || res.Verdict == nil || !res.Verdict.OK {
				failed.Add(1)
				firstErr.Do(func() { b.Errorf("node %s: %v (%+v)", node.name, err, res) })
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		b.Fatalf("%d of %d nodes failed", failed.Load(), n)
	}
}
