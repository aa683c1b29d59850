package deploybody

import (
	"fmt"
	"strings"
	"time"
)

// The phases that let units settle and then watch them for loops and cycling.

func (r *run) settle() (string, error) {
	return r.o.Timings.Settle.String(), r.o.Clock.Sleep(r.ctx, r.o.Timings.Settle)
}

// ---- watch ----

func (r *run) watchSampleCount() int {
	n := int(r.o.Timings.Watch/r.o.Timings.SampleInterval) + 1
	if n < 2 {
		n = 2
	}
	if n > maxSamples {
		n = maxSamples
	}
	return n
}

func (r *run) watch() (string, error) {
	window := r.watchSampleCount()
	// Samples are taken on a fixed grid (start + i*sample_interval), so the time a
	// sample takes does not stretch the window: the watch lasts its configured length
	// plus one sample.
	start := r.o.Clock.Now()
	for i := 0; i < window; i++ {
		if i > 0 {
			wait := start.Add(time.Duration(i) * r.o.Timings.SampleInterval).Sub(r.o.Clock.Now())
			if wait > 0 {
				if err := r.o.Clock.Sleep(r.ctx, wait); err != nil {
					return "", err
				}
			} else if err := r.ctx.Err(); err != nil {
				return "", err
			}
		}
		r.watchSamples = append(r.watchSamples, r.takeSample())
	}
	note := fmt.Sprintf("%d samples", window)
	if !r.verdictOnly {
		return note, nil
	}
	// A loop budget delays the loop verdict of its unit (never removes it): keep
	// watching while a looping unit is within its budget, for at most chain_wait.
	extensionEnd := r.o.Clock.Now().Add(r.o.Timings.ChainWait)
	extra := 0
	for extra < maxSamples {
		pending := loopersWithinBudget(r.classifySamples())
		if len(pending) == 0 || !r.o.Clock.Now().Before(extensionEnd) {
			break
		}
		if extra == 0 {
			r.log(LevelInfo, PhaseWatch, "units loop within their budget; watching longer", map[string]any{"units": pending})
		}
		if err := r.o.Clock.Sleep(r.ctx, r.o.Timings.SampleInterval); err != nil {
			return "", err
		}
		r.watchSamples = append(r.watchSamples, r.takeSample())
		extra++
	}
	if extra > 0 {
		note += fmt.Sprintf(", %d more while looping units were within their budget", extra)
	}
	return note, nil
}

// takeSample reads the failed units, the states of every unit the verdict looks at,
// the job list and the system state, in one round trip where the transport allows. A
// transport fault leaves the sample unanswered.
func (r *run) takeSample() sample {
	s := sample{At: r.o.Clock.Now()}
	interest := map[string]bool{}
	for _, u := range r.closure.concreteUnits() {
		interest[u] = true
	}
	for _, u := range append(append(append([]string{}, r.restarted...), r.o.SecretChain...), sortedKeys(r.seenFailed)...) {
		if ValidUnitName(u) {
			interest[u] = true
		}
	}
	shown := sortedKeys(interest)
	cmds := [][]string{cmdListFailed, cmdListJobs, cmdSystemState}
	for start := 0; start < len(shown); start += showUnitsBatch {
		cmds = append(cmds, cmdShow(shown[start:min(start+showUnitsBatch, len(shown))]))
	}
	// The node checks that fall due ride in the same round trip (their answers last).
	nShown := len(cmds)
	r.checks.begin(s.At)
	checkCmds, dueNodes, dueProbes := nodeCommands(r.checks.due(s.At))
	cmds = append(cmds, checkCmds...)
	answers, err := r.remoteBatch(cmds...)
	r.runProbes(dueProbes, s.At)
	if err != nil {
		r.log(LevelDebug, PhaseWatch, "sample unanswered", map[string]any{"error": err.Error()})
		return s
	}
	r.recordNodeAnswers(dueNodes, answers[nShown:], s.At)
	answers = answers[:nShown]
	s.Answered = true
	s.Failed, s.FailedUnread = r.parseFailed(answers[0])
	s.Units = map[string]UnitState{}
	for _, res := range answers[3:] {
		states, reason := r.parseShowAnswer(res)
		if reason != "" {
			s.Units, s.UnitsUnread = nil, reason
			break
		}
		for name, st := range states {
			s.Units[name] = st
		}
	}
	// A unit that failed since the last sample and that the sample did not show yet.
	var newly []string
	for _, u := range s.Failed {
		if !interest[u] {
			newly = append(newly, u)
		}
		r.seenFailed[u] = true
	}
	if len(newly) > 0 && s.UnitsUnread == "" {
		states, reason, err := r.showUnits(newly)
		switch {
		case err != nil:
			s.Answered = false
			return s
		case reason != "":
			s.Units, s.UnitsUnread = nil, reason
		default:
			for name, st := range states {
				s.Units[name] = st
			}
		}
	}
	s.SystemState, s.SystemStateUnread = systemState(answers[2])
	jobs, reason := parseJobs(answers[1])
	if reason != "" {
		s.JobsUnread = reason
		return s
	}
	s.Jobs = append([]Job{}, jobs...)
	r.jobs.observe(jobs, s.At)
	return s
}

// parseFailed reads the answer to cmdListFailed: the failed units, or why they are unread.
func (r *run) parseFailed(res RunResult) (units []string, unread string) {
	if reason := unreadReason(res); reason != "" {
		return nil, reason
	}
	units, rejected := parseUnitList(string(res.Stdout))
	for _, name := range rejected {
		r.log(LevelWarn, PhaseWatch, "ignoring an invalid unit name read from the node", map[string]any{"name": name})
	}
	return append([]string{}, units...), ""
}

// parseJobs reads the answer to cmdListJobs: the jobs, or why they are unread.
func parseJobs(res RunResult) (jobs []Job, unread string) {
	if reason := unreadReason(res); reason != "" {
		return nil, reason
	}
	jobs, _, err := parseListJobs(string(res.Stdout))
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
		return "", firstLine(string(res.Stderr), "no answer")
	}
	return state, ""
}

// parseShowAnswer reads the answer to cmdShow: the unit states, or why they are unread.
func (r *run) parseShowAnswer(res RunResult) (states map[string]UnitState, unread string) {
	if reason := unreadReason(res); reason != "" {
		return nil, reason
	}
	parsed, rejected, err := parseShow(string(res.Stdout))
	if err != nil {
		return nil, err.Error()
	}
	for _, name := range rejected {
		r.log(LevelWarn, PhaseWatch, "ignoring an invalid unit name read from the node", map[string]any{"name": name})
	}
	states = map[string]UnitState{}
	for _, st := range parsed {
		states[st.ID] = st
	}
	return states, ""
}

func (r *run) readFailedUnits() (units []string, unread string, err error) {
	res, err := r.remote(cmdListFailed...)
	if err != nil {
		return nil, "", err
	}
	units, unread = r.parseFailed(res)
	return units, unread, nil
}

// showUnitsBatch keeps each command line short.
const showUnitsBatch = 200

// showUnits reads `systemctl show` for units. unread is set when systemd did not
// answer; err only for transport faults.
func (r *run) showUnits(units []string) (states map[string]UnitState, unread string, err error) {
	states = map[string]UnitState{}
	for start := 0; start < len(units); start += showUnitsBatch {
		res, err := r.remote(cmdShow(units[start:min(start+showUnitsBatch, len(units))])...)
		if err != nil {
			return nil, "", err
		}
		part, reason := r.parseShowAnswer(res)
		if reason != "" {
			return nil, reason, nil
		}
		for name, st := range part {
			states[name] = st
		}
	}
	return states, "", nil
}
