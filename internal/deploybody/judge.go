package deploybody

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// The phases that classify the watch, give the verdict and render the report.

func (r *run) loopBudget(unit string) int {
	if b, ok := r.o.LoopBudgets[unit]; ok {
		return b
	}
	if b, ok := r.budgetCache[unit]; ok {
		return b
	}
	budget, _, err := unitFileLoopBudget(r.tree, r.toplevel, unit)
	if err != nil {
		r.warn(PhaseClassify, err.Error())
	}
	r.budgetCache[unit] = budget
	return budget
}

func (r *run) classifySamples() *Verdict {
	return classify(classifyInput{
		Samples:          r.watchSamples,
		Window:           r.watchSampleCount(),
		Owns:             r.closure.owns,
		SkippedInJournal: r.skippedInJournal(),
		FailedBefore:     r.failedBefore,
		Budget:           r.loopBudget,
		JobFirstSeen:     r.jobs.firstSeen,
		StaleJob:         r.o.Timings.StaleJob,
		Now:              r.o.Clock.Now(),
		Strict:           r.o.Strict,
		VerdictOnly:      r.verdictOnly,
		Restarted:        r.restarted,
	})
}

// maxJournalLookups bounds how many units' journals the classify phase reads.
const maxJournalLookups = 32

// skippedInJournal asks the node's journal about the wanted units whose state cannot tell
// a condition skip from a unit never started (see skippedOnCondition). A journal that
// cannot be read leaves the unit unclassified rather than guessed.
func (r *run) skippedInJournal() map[string]bool {
	out := map[string]bool{}
	if len(r.watchSamples) == 0 {
		return out
	}
	last := r.watchSamples[len(r.watchSamples)-1]
	var names []string
	for name, st := range last.Units {
		if r.closure.wants(name) && ValidUnitName(name) && mayBeForgottenSkip(st) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) > maxJournalLookups {
		r.warn(PhaseClassify, fmt.Sprintf("%d units may have been skipped on a condition; read the journal of the first %d", len(names), maxJournalLookups))
		names = names[:maxJournalLookups]
	}
	if len(names) == 0 {
		return out
	}
	cmds := make([][]string, len(names))
	for i, name := range names {
		cmds[i] = []string{"journalctl", "--no-pager", "-o", "cat", "-b", "-n", "50", "-u", name}
	}
	answers, err := r.remoteBatch(cmds...)
	if err != nil {
		return out
	}
	for i, res := range answers {
		if res.ExitCode == 0 && lastStartSkipped(string(res.Stdout)) {
			out[names[i]] = true
		}
	}
	return out
}

func (r *run) classify() (string, error) {
	v := r.classifySamples()
	if !v.Unreachable {
		// The last watch sample read the system state at the end of the window; ask
		// again only when that sample went unanswered.
		var state, unread string
		if n := len(r.watchSamples); n > 0 && r.watchSamples[n-1].Answered {
			state, unread = r.watchSamples[n-1].SystemState, r.watchSamples[n-1].SystemStateUnread
		} else if res, err := r.remote(cmdSystemState...); err != nil {
			unread = err.Error()
		} else {
			state, unread = systemState(res)
		}
		if unread != "" {
			v.SystemState = "unread"
			v.Unread = append(v.Unread, "system state: "+unread)
		} else {
			v.SystemState = state
		}
	}
	v.Checks = r.checks.results()
	r.res.Verdict = v
	return fmt.Sprintf("%d failed, %d set aside, %d looping, %d cycling, %d never spawned", len(v.Failed), len(v.SetAside), len(v.RestartLoops), len(v.Cycling), len(v.NeverSpawnedClosure)+len(v.NeverSpawnedHost)), nil
}

func (r *run) verdict() (string, error) {
	v := r.res.Verdict
	reasons, fails := decide(v)
	v.Reasons = reasons
	v.OK = !fails
	if fails {
		r.verdictFailed = &DeployError{
			Node:  r.o.Node,
			Phase: PhaseVerdict,
			Err:   errors.New("the verdict fails the node: " + strings.Join(reasons, "; ")),
			Hint:  r.verdictHint(v),
		}
		return "fails: " + strings.Join(reasons, "; "), nil
	}
	for _, reason := range reasons {
		r.warn(PhaseVerdict, "lenient mode: "+reason)
	}
	if len(reasons) > 0 {
		return "ok (lenient) with warnings", nil
	}
	return "ok", nil
}

func (r *run) verdictHint(v *Verdict) string {
	if v.Unreachable {
		return "check that the node is running and reachable; the verdict could not be taken"
	}
	hint := "read `journalctl -u <unit>` on the node, fix the configuration and apply again; strict = false keeps the names but only warns"
	if failed := FailedChecks(v); len(failed) > 0 && len(v.Failed) == 0 && len(v.NeverSpawnedClosure) == 0 {
		hint = "the units are up but the check named above failed: run it by hand (on the node, or the probe from the deployer) to see why, " +
			"fix the service and apply again; strict = false keeps the result but only warns"
	}
	if !r.verdictOnly {
		hint = "the node keeps the new boot entry; " + hint
	}
	return hint
}

func (r *run) report() (string, error) {
	v := r.res.Verdict
	if !r.verdictOnly {
		r.res.Changes = r.computeChanges()
	}
	r.res.Report = renderReport(r.o.Node, v) + renderChecks(v.Checks) + renderChanges(r.res.Changes)
	fields := map[string]any{
		"system_state":          v.SystemState,
		"failed":                failedNames(v.Failed),
		"set_aside":             v.SetAside,
		"restart_loops":         loopNames(v.RestartLoops),
		"cycling":               v.Cycling,
		"never_spawned_closure": spawnNames(v.NeverSpawnedClosure),
		"never_spawned_host":    spawnNames(v.NeverSpawnedHost),
		"skipped_on_condition":  v.SkippedOnCondition,
		"unread":                v.Unread,
		"unreachable":           v.Unreachable,
		"failed_checks":         FailedChecks(v),
	}
	r.log(LevelInfo, PhaseReport, r.res.Report, fields)
	if v.OK {
		return "verdict ok", nil
	}
	return "verdict fails", nil
}

func failedNames(f []FailedUnit) []string {
	var out []string
	for _, u := range f {
		out = append(out, u.Unit)
	}
	return out
}

func loopNames(l []LoopingUnit) []string {
	var out []string
	for _, u := range l {
		out = append(out, u.Unit)
	}
	return out
}

func spawnNames(s []SpawnFault) []string {
	var out []string
	for _, u := range s {
		out = append(out, u.Unit)
	}
	sort.Strings(out)
	return out
}
