package deploybody

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// The phases that let units settle, watch them for loops and cycling, and run the
// operator's checks.

func (e *runEnv) settle(ctx context.Context) (string, error) {
	return e.o.Timings.Settle.String(), e.sleep(ctx, e.o.Timings.Settle)
}

// ---- watch ----

// watched is what the watch produces: its samples, and the jobs seen up to the last.
type watched struct {
	samples []judge.Sample
	jobs    judge.JobTracker
}

// watcher is one watch in progress: what its samples read, and what they saw so far.
type watcher struct {
	in     judgeIn
	checks *judge.CheckRun
	// seenFailed holds every unit a sample found failed: later samples show them.
	seenFailed map[string]bool
	out        watched
}

// watch samples the node for timings.watch (in verdict-only mode longer, while a
// looping unit is within its budget). The node checks that fall due ride in its
// samples.
func (e *runEnv) watch(ctx context.Context, in judgeIn, checks *judge.CheckRun) (watched, string, error) {
	w := &watcher{in: in, checks: checks, seenFailed: map[string]bool{},
		out: watched{jobs: judge.JobTracker{FirstSeen: maps.Clone(in.jobs.FirstSeen)}}}
	window := e.watchSampleCount()
	// Samples are taken on a fixed grid (start + i*sample_interval), so the time a
	// sample takes does not stretch the window: the watch lasts its configured length
	// plus one sample.
	start := e.o.Clock.Now()
	for i := 0; i < window; i++ {
		if i > 0 {
			wait := start.Add(time.Duration(i) * e.o.Timings.SampleInterval).Sub(e.o.Clock.Now())
			if wait > 0 {
				if err := e.sleep(ctx, wait); err != nil {
					return w.out, "", err
				}
			} else if err := ctx.Err(); err != nil {
				return w.out, "", err
			}
		}
		w.out.samples = append(w.out.samples, e.takeSample(ctx, w))
	}
	note := fmt.Sprintf("%d samples", window)
	if !e.verdictOnly {
		return w.out, note, nil
	}
	// A loop budget delays the loop verdict of its unit (never removes it): keep
	// watching while a looping unit is within its budget, for at most chain_wait.
	extensionEnd := e.o.Clock.Now().Add(e.o.Timings.ChainWait)
	extra := 0
	for extra < maxSamples {
		in := w.in
		in.samples, in.jobs = w.out.samples, w.out.jobs
		pending := judge.LoopersWithinBudget(e.classifySamples(ctx, in))
		if len(pending) == 0 || !e.o.Clock.Now().Before(extensionEnd) {
			break
		}
		if extra == 0 {
			e.log(ctx, LevelInfo, PhaseWatch, "units loop within their budget; watching longer", map[string]any{"units": pending})
		}
		if err := e.sleep(ctx, e.o.Timings.SampleInterval); err != nil {
			return w.out, "", err
		}
		w.out.samples = append(w.out.samples, e.takeSample(ctx, w))
		extra++
	}
	if extra > 0 {
		note += fmt.Sprintf(", %d more while looping units were within their budget", extra)
	}
	return w.out, note, nil
}

// takeSample reads systemd's state and counts, the states of every unit the verdict
// looks at, and (only when systemd counts some) the failed units and the jobs: in one
// round trip where the transport allows, and a second when there are failed units or
// jobs to list. A transport fault leaves the sample unanswered.
func (e *runEnv) takeSample(ctx context.Context, w *watcher) judge.Sample {
	s := judge.Sample{At: e.o.Clock.Now()}
	interest := e.unitsOfInterest(w)
	cmds := sampleCommands(sortedKeys(interest))
	// The node checks that fall due ride in the same round trip (their answers last).
	nShown := len(cmds)
	w.checks.Begin(s.At)
	checkCmds, dueNodes, dueProbes := judge.NodeCommands(w.checks.Due(s.At))
	cmds = append(cmds, checkCmds...)
	answers, err := e.remoteBatch(ctx, w.in.toplevel, cmds...)
	w.checks.RunProbes(ctx, dueProbes, s.At)
	if err != nil {
		e.log(ctx, LevelDebug, PhaseWatch, "sample unanswered", map[string]any{"error": err.Error()})
		return s
	}
	w.checks.RecordNodeAnswers(dueNodes, checkAnswers(answers[nShown:]), s.At)
	answers = answers[:nShown]
	s.Answered = true
	s.Units = map[string]judge.UnitState{}
	for _, res := range answers[1:] {
		states, reason := e.parseShowAnswer(ctx, res)
		if reason != "" {
			s.Units, s.UnitsUnread = nil, reason
			break
		}
		for name, st := range states {
			s.Units[name] = st
		}
	}
	manager, reason := parseManagerState(answers[0])
	var jobs []judge.Job
	if reason != "" {
		s.FailedUnread, s.JobsUnread, s.SystemStateUnread = reason, reason, reason
	} else {
		s.SystemState = manager.state
		var lists [][]string
		if manager.failed > 0 {
			lists = append(lists, cmdListFailed)
		}
		if manager.jobs > 0 {
			lists = append(lists, cmdListJobs)
		}
		listed, err := e.remoteBatch(ctx, w.in.toplevel, lists...)
		if err != nil {
			e.log(ctx, LevelDebug, PhaseWatch, "sample unanswered", map[string]any{"error": err.Error()})
			s.Answered = false
			return s
		}
		s.Failed = []string{}
		if manager.failed > 0 {
			s.Failed, s.FailedUnread = e.parseFailed(ctx, listed[0])
			listed = listed[1:]
		}
		if manager.jobs > 0 {
			jobs, s.JobsUnread = parseJobs(listed[0])
		}
	}
	if !e.showNewlyFailed(ctx, w, &s, interest) {
		s.Answered = false
		return s
	}
	if s.JobsUnread != "" {
		return s
	}
	s.Jobs = append([]judge.Job{}, jobs...)
	w.out.jobs.Observe(jobs, s.At)
	return s
}

// unitsOfInterest are the units a sample shows: the closure's, the restarted ones, the
// secret chain and every unit an earlier sample found failed.
func (e *runEnv) unitsOfInterest(w *watcher) map[string]bool {
	interest := map[string]bool{}
	for _, u := range w.in.closure.concreteUnits() {
		interest[u] = true
	}
	for _, u := range append(append(append([]string{}, w.in.restarted...), e.o.SecretChain...), sortedKeys(w.seenFailed)...) {
		if judge.ValidUnitName(u) {
			interest[u] = true
		}
	}
	return interest
}

// sampleCommands are a sample's first reads: systemd's state and counts, then the
// states of shown. A healthy node (no failed unit, no job) needs nothing else: two
// systemctl a sample, where listing the failed units and the jobs and asking the state
// each time took four (docs/testing.md#node-execs).
func sampleCommands(shown []string) [][]string {
	cmds := [][]string{cmdManagerState}
	for start := 0; start < len(shown); start += showUnitsBatch {
		cmds = append(cmds, cmdShow(shown[start:min(start+showUnitsBatch, len(shown))]))
	}
	return cmds
}

// showNewlyFailed adds to s the states of the units that failed since the last sample
// and that s did not show yet (interest), and remembers every failed unit for the next
// samples. It is false when the node did not answer.
func (e *runEnv) showNewlyFailed(ctx context.Context, w *watcher, s *judge.Sample, interest map[string]bool) bool {
	var newly []string
	for _, u := range s.Failed {
		if !interest[u] {
			newly = append(newly, u)
		}
		w.seenFailed[u] = true
	}
	if len(newly) == 0 || s.UnitsUnread != "" {
		return true
	}
	states, reason, err := e.showUnits(ctx, w.in.toplevel, newly)
	switch {
	case err != nil:
		return false
	case reason != "":
		s.Units, s.UnitsUnread = nil, reason
	default:
		for name, st := range states {
			s.Units[name] = st
		}
	}
	return true
}

// ---- checks ----

// attemptDueChecks runs the checks that are due: node checks in one batch, then probes.
func (e *runEnv) attemptDueChecks(ctx context.Context, toplevel string, checks *judge.CheckRun) error {
	now := e.o.Clock.Now()
	cmds, nodes, probes := judge.NodeCommands(checks.Due(now))
	if len(cmds) > 0 {
		answers, err := e.remoteBatch(ctx, toplevel, cmds...)
		if err != nil {
			return err
		}
		checks.RecordNodeAnswers(nodes, checkAnswers(answers), now)
	}
	checks.RunProbes(ctx, probes, now)
	return nil
}

// runChecks is the checks phase: what the watch did not settle is retried here until
// each check passes or its timeout runs out.
func (e *runEnv) runChecks(ctx context.Context, toplevel string, checks *judge.CheckRun) (string, error) {
	if checks.None() {
		return "no checks", nil
	}
	checks.Begin(e.o.Clock.Now())
	for i := 0; i < maxSamples; i++ {
		now := e.o.Clock.Now()
		at, ok := checks.NextDue(now)
		if !ok {
			break
		}
		if wait := at.Sub(now); wait > 0 {
			if err := e.sleep(ctx, wait); err != nil {
				return "", err
			}
		}
		if err := e.attemptDueChecks(ctx, toplevel, checks); err != nil {
			// A node that stops answering fails the node checks it owes; the verdict's
			// samples say whether the node itself is unreachable.
			checks.FailUnansweredNodeChecks(e.o.Clock.Now(), "the node did not answer: "+err.Error())
		}
	}
	results := checks.Results()
	passed := 0
	for _, c := range results {
		if c.OK {
			passed++
		}
	}
	return fmt.Sprintf("%d of %d passed", passed, len(results)), nil
}

// checkAnswers hands the node's answers to the node checks to the judge.
func checkAnswers(answers []RunResult) []judge.CheckAnswer {
	out := make([]judge.CheckAnswer, len(answers))
	for i, a := range answers {
		out[i] = judge.CheckAnswer(a)
	}
	return out
}
