package deploybody

import (
	"errors"
	"fmt"
	"strings"
)

// The phase that snapshots unit states before the switch, so the verdict can tell what the switch changed.

// runningSystem reads the answer to cmdReadRunning: "" when no NixOS system runs yet.
func runningSystem(res RunResult) string {
	running := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 || running == "/run/current-system" {
		return ""
	}
	return running
}

func (r *run) snapshotUnitStates() (string, error) {
	// One round trip: the running system, the failed units and the job queue (and, in
	// a deploy, the digests of the running system's unit files for the changes).
	cmds := [][]string{cmdReadRunning, cmdListFailed, cmdListJobs}
	if !r.verdictOnly {
		cmds = append(cmds, cmdUnitDigests)
	}
	answers, err := r.remoteBatch(cmds...)
	if err != nil {
		return "", withHint(fmt.Errorf("reading /run/current-system and the unit states: %w", err), "")
	}
	if len(answers) > 3 {
		r.prevUnitDigests, _ = parseUnitDigests(answers[3])
	}
	running := runningSystem(answers[0])
	if r.verdictOnly {
		r.res.RunningSystem = running
		switch {
		case r.toplevel == "" && running == "":
			return "", withHint(errors.New("no toplevel was given and the node runs no NixOS system (/run/current-system is missing)"), "set toplevel to the system the node should run")
		case r.toplevel == "":
			r.setToplevel(running)
		case running != r.toplevel:
			msg := fmt.Sprintf("node %s runs %s, not the toplevel %s this verdict judges", r.o.Node, describeSystem(running), r.toplevel)
			if r.o.Strict {
				return "", withHint(errors.New(msg),
					"deploy that toplevel first (wire toplevel to the node switch's toplevel so the pass runs after it), or set strict = false to judge its units on the system the node runs")
			}
			r.warn(PhaseSnapshotUnitStates, msg+"; its units are judged on the system the node runs (strict = false)")
		}
	} else {
		r.res.PreviousSystem = running
	}
	failed, reason := r.parseFailed(answers[1])
	if reason != "" {
		r.warn(PhaseSnapshotUnitStates, "unit states before the switch are unread ("+reason+"): failed units cannot be told new or old")
		return "unread: " + reason, nil
	}
	r.failedBefore = map[string]bool{}
	for _, u := range failed {
		r.failedBefore[u] = true
	}
	if jobs, reason := parseJobs(answers[2]); reason == "" {
		r.jobs.observe(jobs, r.o.Clock.Now())
	}
	return fmt.Sprintf("%d failed units before", len(failed)), nil
}
