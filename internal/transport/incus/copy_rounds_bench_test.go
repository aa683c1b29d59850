package incus

// BenchmarkLabCopyRounds copies the same small closure into a lab node again and again,
// each round as a deploy's push does it: a fresh transport whose exec session is open,
// the snapshot's read beside the push (a recorded exec: the session is busy), and the
// closure's copy (a streamed exec: four websocket handshakes, each a new connection to
// incusd). The node forgets the closure between rounds, so every round streams it.
// It reports the median and the worst round and their ratio: a round stalled behind
// incusd's accept loop (internal/incusapi/lazyconn.go) took 30 s where the median is
// under 2 s. Run with lab/bench-incus-exec.sh, or
//
//	FEDIVERSITY_LAB=1 go test ./internal/transport/incus -run '^$' -bench LabCopyRounds -benchtime 100x

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

func BenchmarkLabCopyRounds(b *testing.B) {
	labtest.Require(b)
	node := labtest.Nodes(b)[0]
	top := labtest.BuildClosure(b, labtest.ClosureGood)
	closure, err := nixstore.Closure(context.Background(), top)
	if err != nil {
		b.Fatal(err)
	}
	c := mustClient(b)
	ctx := context.Background()
	var rounds []time.Duration
	b.ResetTimer()
	for round := range b.N {
		b.StopTimer()
		tr, err := New(Config{Client: c, Instance: node.Instance, Project: node.Project, Node: node.Name})
		if err != nil {
			b.Fatal(err)
		}
		// The session opens, and the node forgets the closure (nothing roots it).
		if _, err := tr.Run(ctx, append([]string{"nix-store", "--delete"}, closure...), deploybody.RunOptions{}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		var beside sync.WaitGroup
		beside.Go(func() {
			_, _ = tr.RunBatch(ctx, [][]string{{"systemctl", "is-system-running"}, {"readlink", "/run/current-system"}}, deploybody.RunOptions{})
		})
		stats, err := tr.CopyClosure(ctx, top)
		beside.Wait()
		took := time.Since(start)
		b.StopTimer()
		_ = tr.Close()
		if err != nil {
			b.Fatalf("round %d: %v", round, err)
		}
		if stats.PathsMissing == 0 {
			b.Fatalf("round %d: the node still held the closure; nothing was streamed", round)
		}
		rounds = append(rounds, took)
		if took > 5*time.Second {
			b.Logf("round %d: the copy took %s", round, took.Round(time.Millisecond))
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(rounds)
	median, worst := rounds[len(rounds)/2], rounds[len(rounds)-1]
	b.ReportMetric(float64(median.Milliseconds()), "median-ms")
	b.ReportMetric(float64(worst.Milliseconds()), "worst-ms")
	b.ReportMetric(float64(worst)/float64(median), "worst/median")
}
