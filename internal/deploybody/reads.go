package deploybody

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// The reads of the node's systemd that several phases share, and how their answers are
// read: an answer systemd did not give is "unread" (with the reason), never empty.

// parseFailed reads the answer to cmdListFailed: the failed units, or why they are unread.
func (e *runEnv) parseFailed(ctx context.Context, res RunResult) (units []string, unread string) {
	if reason := unreadReason(res); reason != "" {
		return nil, reason
	}
	units, rejected := judge.ParseUnitList(string(res.Stdout))
	for _, name := range rejected {
		e.log(ctx, LevelWarn, PhaseWatch, "ignoring an invalid unit name read from the node", map[string]any{"name": name})
	}
	return append([]string{}, units...), ""
}

// parseJobs reads the answer to cmdListJobs: the jobs, or why they are unread.
func parseJobs(res RunResult) (jobs []judge.Job, unread string) {
	if reason := unreadReason(res); reason != "" {
		return nil, reason
	}
	jobs, _, err := judge.ParseListJobs(string(res.Stdout))
	if err != nil {
		return nil, err.Error()
	}
	return jobs, ""
}

// systemState reads the answer to cmdSystemState: the state systemd reports about
// itself, or why it is unread ("offline"/"unknown" with an error means systemd did
// not answer).
func systemState(res RunResult) (state, unread string) {
	state = strings.TrimSpace(string(res.Stdout))
	if state == "" || ((state == "offline" || state == "unknown") && strings.TrimSpace(string(res.Stderr)) != "") {
		return "", judge.FirstLine(string(res.Stderr), "no answer")
	}
	return state, ""
}

// managerState is the answer to cmdManagerState.
type managerState struct {
	state        string // as `systemctl is-system-running` prints it: the same property
	failed, jobs int
}

// parseManagerState reads the answer to cmdManagerState, or why it is unread: an answer
// without all three properties, or with a count that is not one, is unread, never
// taken for "none".
func parseManagerState(res RunResult) (m managerState, unread string) {
	if reason := unreadReason(res); reason != "" {
		return m, reason
	}
	seen := 0
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		key, value, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		var err error
		switch key {
		case "SystemState":
			m.state = value
		case "NFailedUnits":
			m.failed, err = strconv.Atoi(value)
		case "NJobs":
			m.jobs, err = strconv.Atoi(value)
		default:
			continue
		}
		if err != nil || m.failed < 0 || m.jobs < 0 {
			return managerState{}, fmt.Sprintf("systemd's %s is %.20q, not a count", key, value)
		}
		seen++
	}
	if seen != 3 || m.state == "" {
		return managerState{}, fmt.Sprintf("systemctl show of the manager answered %.80q, not its SystemState, NFailedUnits and NJobs", strings.TrimSpace(string(res.Stdout)))
	}
	return m, ""
}

// parseShowAnswer reads the answer to cmdShow: the unit states, or why they are unread.
func (e *runEnv) parseShowAnswer(ctx context.Context, res RunResult) (states map[string]judge.UnitState, unread string) {
	if reason := unreadReason(res); reason != "" {
		return nil, reason
	}
	parsed, rejected, err := judge.ParseShow(string(res.Stdout))
	if err != nil {
		return nil, err.Error()
	}
	for _, name := range rejected {
		e.log(ctx, LevelWarn, PhaseWatch, "ignoring an invalid unit name read from the node", map[string]any{"name": name})
	}
	states = map[string]judge.UnitState{}
	for _, st := range parsed {
		states[st.ID] = st
	}
	return states, ""
}

// readFailedUnits reads the failed units: unread is set when systemd did not answer;
// err only for transport faults.
func (e *runEnv) readFailedUnits(ctx context.Context, toplevel string) (units []string, unread string, err error) {
	res, err := e.remote(ctx, toplevel, cmdListFailed...)
	if err != nil {
		return nil, "", err
	}
	units, unread = e.parseFailed(ctx, res)
	return units, unread, nil
}

// showUnitsBatch keeps each command line short.
const showUnitsBatch = 200

// showUnits reads `systemctl show` for units. unread is set when systemd did not
// answer; err only for transport faults.
func (e *runEnv) showUnits(ctx context.Context, toplevel string, units []string) (states map[string]judge.UnitState, unread string, err error) {
	states = map[string]judge.UnitState{}
	for start := 0; start < len(units); start += showUnitsBatch {
		res, err := e.remote(ctx, toplevel, cmdShow(units[start:min(start+showUnitsBatch, len(units))])...)
		if err != nil {
			return nil, "", err
		}
		part, reason := e.parseShowAnswer(ctx, res)
		if reason != "" {
			return nil, reason, nil
		}
		for name, st := range part {
			states[name] = st
		}
	}
	return states, "", nil
}

// runningSystem reads the answer to cmdReadRunning: "" when no NixOS system runs yet.
func runningSystem(res RunResult) string {
	running := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 || running == "/run/current-system" {
		return ""
	}
	return running
}

// unreadReason says why a systemctl command's output cannot be used, or "" when it
// can. Any non-zero exit of show/list-units/list-jobs means systemd did not answer
// (typically "Failed to connect to bus").
func unreadReason(res RunResult) string {
	if res.ExitCode == 0 {
		return ""
	}
	return judge.FirstLine(string(res.Stderr), fmt.Sprintf("systemctl exited %d", res.ExitCode))
}
