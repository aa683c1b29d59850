package deploybody

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// Revert states, as the guard script says them.
const (
	revertDisarmed  = "disarmed"
	revertSwitching = "switching" // armed; the switch it guards still runs
	// revertUnconfirmed: armed; the switch ended, but the login that asked was made
	// before its end, so it proves nothing about the new system.
	revertUnconfirmed = "unconfirmed"
	revertBegun       = "begun"
	revertReverted    = "reverted"
	revertStoodDown   = "stood-down"
	revertBroken      = "broken" // its unit found a tool missing and never ran
	revertDied        = "died"   // it began, and its unit stopped before it ended
	revertGone        = "gone"   // no such revert: another run disarmed it, or /run was emptied
	revertBusy        = "busy"   // the guard stayed taken
)

// revertAnswer is what the guard script said about one revert, and what the node runs.
type revertAnswer struct {
	state   string // one of the revert states
	detail  string // the exit code of a revert's switch, or why it stood down
	running string
	profile string // where the system profile points (system-<n>-link)
}

// final tells whether the revert's fate is sealed: nothing changes it any more.
func (a revertAnswer) final() bool {
	switch a.state {
	case revertDisarmed, revertReverted, revertStoodDown, revertGone, revertBroken, revertDied:
		return true
	}
	return false
}

// generation is the system profile's generation in the answer, 0 when unknown.
func (a revertAnswer) generation() int {
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(path.Base(a.profile), "system-"), "-link"))
	if err != nil {
		return 0
	}
	return n
}

// parseRevertAnswer reads the answer of `disarm`.
func parseRevertAnswer(out string) revertAnswer {
	var a revertAnswer
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(l), " ")
		switch {
		case i == 0:
			a.state, a.detail = k, v
		case k == "running":
			a.running = v
		case k == "profile":
			a.profile = v
		}
	}
	return a
}

// earlierRevert is one revert of an earlier run, as `pending` lists it: previous is
// the system it goes back to, guarded the one whose switch it guards.
type earlierRevert struct {
	unit, previous, guarded string
	answer                  revertAnswer
}

// pendingAnswer is the answer of `pending`.
type pendingAnswer struct {
	reverts   []earlierRevert
	switching []string // detached switches still running
	running   string
	profile   string
	busy      bool
}

func parsePendingAnswer(out string) pendingAnswer {
	var p pendingAnswer
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "busy":
			p.busy = true
		case "revert":
			if len(f) < 5 {
				continue
			}
			e := earlierRevert{unit: f[1], previous: strings.TrimPrefix(f[2], "-"), guarded: strings.TrimPrefix(f[3], "-")}
			e.answer.state = f[4]
			e.answer.detail = strings.Join(f[5:], " ")
			p.reverts = append(p.reverts, e)
		case "switching":
			if len(f) > 1 {
				p.switching = append(p.switching, f[1])
			}
		case "running":
			if len(f) > 1 {
				p.running = f[1]
			}
		case "profile":
			if len(f) > 1 {
				p.profile = f[1]
			}
		}
	}
	return p
}

// revertGuard runs one operation of RevertGuardScript on the node: over a new
// connection of sr when sr is set (the arming run's confirming login), else over the
// run's own. ctx is not the run's: the node must be told also when the run was
// interrupted. One call is bounded like a lock operation.
func (e *runEnv) revertGuard(ctx context.Context, sr SelfReverter, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, lockCallLimit)
	defer cancel()
	argv := append([]string{"sh", "-c", records.RevertGuardScript, "sh"}, args...)
	opts := RunOptions{Path: records.ToolPath, Privileged: true} // the lock's directory is root's
	var res RunResult
	var err error
	if sr != nil {
		res, err = sr.RunFresh(ctx, argv, opts)
	} else {
		res, err = e.t.Run(ctx, argv, opts)
	}
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) == "" {
		return "", nodeScriptError("the revert guard", res)
	}
	return string(res.Stdout), nil
}

// nodeScriptError is the error of a node-side script (what: "the revert guard", "the
// lock script") that failed: the command it missed, when that was why (requireTools),
// else its exit code and first line of stderr.
func nodeScriptError(what string, res RunResult) error {
	stderr := string(res.Stderr)
	if i := strings.Index(stderr, "missing command "); i >= 0 && res.ExitCode == 127 {
		cmd, path, _ := strings.Cut(strings.TrimPrefix(judge.FirstLine(stderr[i:], ""), "missing command "), " ")
		path = strings.TrimSuffix(strings.TrimPrefix(path, "(PATH="), ")")
		return fmt.Errorf("%s on the node needs %s, which is not on its PATH (%s): %w", what, cmd, path, ErrMissingCommand)
	}
	return fmt.Errorf("%s on the node exited %d: %s", what, res.ExitCode, judge.FirstLine(stderr, "no output"))
}
