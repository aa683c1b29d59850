package deploybody

import (
	"context"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// batchingNode is the simulated node reached through a transport that implements
// BatchRunner (the SSH and Incus transports do, with one remote shell per batch; their
// framing is tested against a real shell in internal/transport/remote). It answers a
// batch by running each command on the simulated node at the same moment, and counts
// round trips: one per batch, one per plain Run.
type batchingNode struct {
	*fakeNode
	roundTrips int
	batches    [][][]string
}

func (b *batchingNode) Run(ctx context.Context, argv []string, opts RunOptions) (RunResult, error) {
	b.count(nil)
	return b.fakeNode.Run(ctx, argv, opts)
}

func (b *batchingNode) RunBatch(ctx context.Context, cmds [][]string, opts RunOptions) ([]RunResult, error) {
	b.count(cmds)
	out := make([]RunResult, 0, len(cmds))
	for _, c := range cmds {
		res, err := b.fakeNode.Run(ctx, c, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// count counts a round trip (and keeps a batch's commands) under the node's lock: the
// snapshot's read runs beside the push.
func (b *batchingNode) count(batch [][]string) {
	b.stateMu.Lock()
	defer b.stateMu.Unlock()
	b.roundTrips++
	if batch != nil {
		b.batches = append(b.batches, batch)
	}
}

// The verdict must not depend on whether the transport batches its reads, and a
// batching transport must take each watch sample in one round trip.
func TestBatchingTransportGivesTheSameVerdictInFewerRoundTrips(t *testing.T) {
	cases := map[string]struct {
		units map[string]unitSpec
		setup func(*scenario)
	}{
		"failed strict": {units: map[string]unitSpec{"web.service": {b: fails}, "db.service": {b: runs}}},
		"restart loop":  {units: map[string]unitSpec{"loop.service": {b: loops, every: time.Second}, "ok.service": {b: runs}}},
		"host fault":    {units: map[string]unitSpec{"rt.service": {b: spawnFails, status: 214}, "ok.service": {b: runs}}},
		"cycling and stale job": {
			units: map[string]unitSpec{"socketish.service": {b: cycles, every: 3 * time.Second}, "slow.service": {b: stuck}},
			setup: func(s *scenario) { s.opts.Timings.StaleJob = 8 * time.Second },
		},
		"condition skip": {units: map[string]unitSpec{"skip.service": {b: conditionSkip}, "ok.service": {b: runs}}},
		"severed bus": {
			units: map[string]unitSpec{"web.service": {b: fails}},
			setup: func(s *scenario) { s.node.severBusAtSwitch = true },
		},
		"already failed before": {
			units: map[string]unitSpec{"web.service": {b: fails}},
			setup: func(s *scenario) { s.node.setUnit("web.service", unitSpec{b: fails}) },
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			plain := newScenario(t, c.units)
			batched := newScenario(t, c.units)
			if c.setup != nil {
				c.setup(plain)
				c.setup(batched)
			}
			plainRes, plainErr := plain.deploy()
			plainTrips := 0
			for _, cl := range plain.node.calls {
				if cl.what == "run" {
					plainTrips++
				}
			}
			bn := &batchingNode{fakeNode: batched.node}
			batchedRes, batchedErr := Deploy(context.Background(), bn, batched.opts)

			if (plainErr == nil) != (batchedErr == nil) {
				t.Fatalf("errors differ: plain %v, batched %v", plainErr, batchedErr)
			}
			if !reflect.DeepEqual(plainRes.Verdict, batchedRes.Verdict) {
				t.Fatalf("verdicts differ:\nplain   %+v\nbatched %+v", plainRes.Verdict, batchedRes.Verdict)
			}
			if plainRes.Report != batchedRes.Report {
				t.Fatalf("reports differ:\n%s\n---\n%s", plainRes.Report, batchedRes.Report)
			}
			if bn.roundTrips >= plainTrips {
				t.Fatalf("batched run took %d round trips, the plain one %d", bn.roundTrips, plainTrips)
			}
			samples := 0
			for _, b := range bn.batches {
				if slices.Equal(b[0], cmdManagerState) {
					samples++
				}
			}
			var watchNote string
			for _, p := range batchedRes.Phases {
				if p.Name == PhaseWatch {
					watchNote = p.Note
				}
			}
			if want := strings.Fields(watchNote); len(want) == 0 || want[0] != strconv.Itoa(samples) {
				t.Fatalf("watch note %q, but %d batched samples", watchNote, samples)
			}
		})
	}
}

// The watch samples on a fixed grid: a sample that takes time does not stretch the
// window (the body sleeps only what is left of each interval).
func TestWatchKeepsItsWindowWhenSamplesTakeTime(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"ok.service": {b: runs}})
	s.opts.Timings.Settle = time.Second
	s.opts.Timings.Watch = 4 * time.Second
	s.opts.Timings.SampleInterval = time.Second
	slow := &slowNode{batchingNode: &batchingNode{fakeNode: s.node}, cost: 300 * time.Millisecond}
	res, err := Deploy(context.Background(), slow, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Phases {
		if p.Name == PhaseWatch {
			// 5 samples at 0, 1, 2, 3, 4 s, each taking 0.3 s: 4.3 s, not 5 × 1.3 s.
			if p.Duration != 4*time.Second+300*time.Millisecond {
				t.Fatalf("watch took %s on the simulated clock, want 4.3s", p.Duration)
			}
			return
		}
	}
	t.Fatal("no watch phase")
}

// slowNode is a batching node whose every round trip takes cost on the simulated clock.
type slowNode struct {
	*batchingNode
	cost time.Duration
}

func (s *slowNode) Run(ctx context.Context, argv []string, opts RunOptions) (RunResult, error) {
	s.roundTrip()
	return s.batchingNode.Run(ctx, argv, opts)
}

func (s *slowNode) RunBatch(ctx context.Context, cmds [][]string, opts RunOptions) ([]RunResult, error) {
	s.roundTrip()
	return s.batchingNode.RunBatch(ctx, cmds, opts)
}

// roundTrip advances the simulated clock by one round trip's cost, under the node's
// and the clock's locks: the snapshot's read runs beside the push.
func (s *slowNode) roundTrip() {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	defer s.clock.hold()()
	s.clock.now = s.clock.now.Add(s.cost)
}
