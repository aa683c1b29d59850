package deploybody

import (
	"context"
	"errors"
	"fmt"
)

// The phase that snapshots unit states before the switch, so the verdict can tell what the switch changed.

// snapshot is what the node looked like before the switch (in verdict-only mode:
// before the pass's restarts).
type snapshot struct {
	// running is the system the node ran.
	running string
	// toplevel is the system a verdict-only pass without a toplevel judges (the one
	// the node runs); "" otherwise.
	toplevel string
	// failedBefore is the set of failed units; nil when unread.
	failedBefore map[string]bool
	// jobs are the jobs seen so far (a job's age counts from here).
	jobs jobTracker
	// unitDigests are the running system's unit files (name → sha256), read in a
	// deploy for the summary of changes; nil when unread.
	unitDigests map[string]string
}

// snapshotUnitStates reads the running system, the failed units and the job queue in
// one round trip (in a deploy also the digests of the running system's unit files).
func (e *runEnv) snapshotUnitStates(ctx context.Context, toplevel string) (snapshot, string, error) {
	var snap snapshot
	cmds := [][]string{cmdReadRunning, cmdListFailed, cmdListJobs}
	if !e.verdictOnly {
		cmds = append(cmds, cmdUnitDigests)
	}
	answers, err := e.remoteBatch(ctx, toplevel, cmds...)
	if err != nil {
		return snap, "", withHint(fmt.Errorf("reading /run/current-system and the unit states: %w", err), "")
	}
	if len(answers) > 3 {
		snap.unitDigests, _ = parseUnitDigests(answers[3])
	}
	snap.running = runningSystem(answers[0])
	if e.verdictOnly {
		switch {
		case toplevel == "" && snap.running == "":
			return snap, "", withHint(errors.New("no toplevel was given and the node runs no NixOS system (/run/current-system is missing)"), "set toplevel to the system the node should run")
		case toplevel == "":
			snap.toplevel = snap.running
		case snap.running != toplevel:
			msg := fmt.Sprintf("node %s runs %s, not the toplevel %s this verdict judges", e.o.Node, describeSystem(snap.running), toplevel)
			if e.o.Strict {
				return snap, "", withHint(errors.New(msg),
					"deploy that toplevel first (wire toplevel to the node switch's toplevel so the pass runs after it), or set strict = false to judge its units on the system the node runs")
			}
			e.warn(ctx, PhaseSnapshotUnitStates, msg+"; its units are judged on the system the node runs (strict = false)")
		}
	}
	failed, reason := e.parseFailed(ctx, answers[1])
	if reason != "" {
		e.warn(ctx, PhaseSnapshotUnitStates, "unit states before the switch are unread ("+reason+"): failed units cannot be told new or old")
		return snap, "unread: " + reason, nil
	}
	snap.failedBefore = map[string]bool{}
	for _, u := range failed {
		snap.failedBefore[u] = true
	}
	if jobs, reason := parseJobs(answers[2]); reason == "" {
		snap.jobs.observe(jobs, e.o.Clock.Now())
	}
	return snap, fmt.Sprintf("%d failed units before", len(failed)), nil
}
