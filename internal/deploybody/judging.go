package deploybody

import (
	"context"
	"fmt"
	"sort"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// What the watch (its loop-budget extension) and the classify phase judge the node on,
// and how they turn it into the input of classify.

// judgeIn is what a node is judged on: the earlier phases' outputs.
type judgeIn struct {
	toplevel string
	closure  *closureUnits
	// failedBefore are the units failed at the snapshot (nil: unread).
	failedBefore map[string]bool
	jobs         judge.JobTracker
	restarted    []string
	budgets      *loopBudgets
	samples      []judge.Sample
}

// loopBudgets looks up each unit's loop budget once: the options' override, else the
// unit file's X-LoopBudget=.
type loopBudgets struct {
	overrides map[string]int
	tree      localTree
	toplevel  string
	cache     map[string]int
}

func newLoopBudgets(o Options, tree localTree, toplevel string) *loopBudgets {
	return &loopBudgets{overrides: o.LoopBudgets, tree: tree, toplevel: toplevel, cache: map[string]int{}}
}

// budget is unit's loop budget; warning says why a unit file could not be read.
func (b *loopBudgets) budget(unit string) (budget int, warning string) {
	if v, ok := b.overrides[unit]; ok {
		return v, ""
	}
	if v, ok := b.cache[unit]; ok {
		return v, ""
	}
	budget, _, err := unitFileLoopBudget(b.tree, b.toplevel, unit)
	if err != nil {
		warning = err.Error()
	}
	b.cache[unit] = budget
	return budget, warning
}

// classifySamples classifies the samples so far (classify's input, made of in).
func (e *runEnv) classifySamples(ctx context.Context, in judgeIn) *judge.Verdict {
	return judge.Classify(judge.ClassifyInput{
		Samples:          in.samples,
		Window:           e.watchSampleCount(),
		Owns:             in.closure.owns,
		SkippedInJournal: e.skippedInJournal(ctx, in),
		FailedBefore:     in.failedBefore,
		Budget: func(unit string) int {
			budget, warning := in.budgets.budget(unit)
			if warning != "" {
				e.warn(ctx, PhaseClassify, warning)
			}
			return budget
		},
		JobFirstSeen: in.jobs.FirstSeen,
		StaleJob:     e.o.Timings.StaleJob,
		Now:          e.o.Clock.Now(),
		Strict:       e.o.Strict,
		VerdictOnly:  e.verdictOnly,
		Restarted:    in.restarted,
	})
}

// watchSampleCount is the watch's window in samples: how many trailing samples count
// as "now" for a loop.
func (e *runEnv) watchSampleCount() int {
	n := int(e.o.Timings.Watch/e.o.Timings.SampleInterval) + 1
	if n < 2 {
		n = 2
	}
	if n > maxSamples {
		n = maxSamples
	}
	return n
}

// maxJournalLookups bounds how many units' journals the classify phase reads.
const maxJournalLookups = 32

// skippedInJournal asks the node's journal about the wanted units whose state cannot tell
// a condition skip from a unit never started (see judge.SkippedOnCondition). A journal that
// cannot be read leaves the unit unclassified rather than guessed.
func (e *runEnv) skippedInJournal(ctx context.Context, in judgeIn) map[string]bool {
	out := map[string]bool{}
	if len(in.samples) == 0 {
		return out
	}
	last := in.samples[len(in.samples)-1]
	var names []string
	for name, st := range last.Units {
		if in.closure.wants(name) && judge.ValidUnitName(name) && judge.MayBeForgottenSkip(st) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) > maxJournalLookups {
		e.warn(ctx, PhaseClassify, fmt.Sprintf("%d units may have been skipped on a condition; read the journal of the first %d", len(names), maxJournalLookups))
		names = names[:maxJournalLookups]
	}
	if len(names) == 0 {
		return out
	}
	cmds := make([][]string, len(names))
	for i, name := range names {
		cmds[i] = []string{"journalctl", "--no-pager", "-o", "cat", "-b", "-n", "50", "-u", name}
	}
	answers, err := e.remoteBatch(ctx, in.toplevel, cmds...)
	if err != nil {
		return out
	}
	for i, res := range answers {
		if res.ExitCode == 0 && judge.LastStartSkipped(string(res.Stdout)) {
			out[names[i]] = true
		}
	}
	return out
}
