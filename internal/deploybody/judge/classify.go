package judge

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Sample is one look at the node during the watch. A nil map or list means "not read";
// its *Unread field then says why.
type Sample struct {
	At           time.Time
	Answered     bool
	Units        map[string]UnitState
	UnitsUnread  string
	Failed       []string
	FailedUnread string
	Jobs         []Job
	JobsUnread   string
	// SystemState is what `systemctl is-system-running` said (SystemStateUnread: why
	// it is unread).
	SystemState       string
	SystemStateUnread string
}

// ClassifyInput is everything classification needs; Classify is pure so tables can
// test it.
type ClassifyInput struct {
	Samples []Sample
	// Window is how many trailing samples count as "now" for StillLooping (0: all).
	Window int
	// Owns reports whether the deployed configuration defines a unit.
	Owns func(unit string) bool
	// SkippedInJournal are units whose last start the node's journal reports as
	// "skipped because of an unmet condition check" (see SkippedOnCondition).
	SkippedInJournal map[string]bool
	// FailedBefore is the set of units failed at the snapshot; nil when the snapshot
	// could not be read.
	FailedBefore map[string]bool
	// Budget returns a unit's loop budget.
	Budget           func(unit string) int
	JobFirstSeen     map[int]time.Time
	StaleJob         time.Duration
	Now              time.Time
	Strict           bool
	VerdictOnly      bool
	SystemState      string
	SystemStateError string
	Restarted        []string
}

// FailedOriginUnknown marks a failed unit when the snapshot could not be read.
const FailedOriginUnknown FailureOrigin = "unknown (snapshot unread)"

// Classify sorts the observed units into the verdict classes (docs/design.md#verdict-classes). It does not decide
// whether the run fails: Decide does. Each class has its own piece below.
func Classify(in ClassifyInput) *Verdict {
	v := &Verdict{Strict: in.Strict, VerdictOnly: in.VerdictOnly, Samples: len(in.Samples), Restarted: in.Restarted}
	answered := answeredSamples(in.Samples)
	v.Answered = len(answered)
	if len(answered) == 0 {
		v.Unreachable = true
		v.SystemState = "unreachable"
		return v
	}
	v.SystemState = in.SystemState
	v.ShuttingDown = in.SystemState == SystemStopping || stoppingSamples(answered) > 0
	if in.SystemStateError != "" {
		v.SystemState = "unread"
		v.Unread = append(v.Unread, "system state: "+in.SystemStateError)
	}
	obs := observe(answered)
	v.Unread = append(v.Unread, obs.unread()...)
	if obs.unitsRead {
		v.Failed = []FailedUnit{}
		v.RestartLoops = []LoopingUnit{}
		v.Cycling = []string{}
		v.NeverSpawnedClosure = []SpawnFault{}
		v.NeverSpawnedHost = []SpawnFault{}
		v.SkippedOnCondition = []string{}
	}
	recent := recentStates(answered, in.Window)
	setAside := map[string]bool{}
	for _, name := range sortedObservationNames(obs.states) {
		states := obs.states[name]
		classifyRestarts(v, name, states, recent[name], in.Budget)
		last := states[len(states)-1]
		owned := in.Owns(name)
		if classifyNeverSpawned(v, last, owned) {
			continue
		}
		classifyLastState(v, in, name, last, owned, setAside)
	}
	classifyUnshownFailed(v, in, obs, setAside)
	if obs.failedRead || len(setAside) > 0 {
		v.SetAside = sortedKeys(setAside)
	}
	if obs.jobsRead {
		v.StaleJobs = staleStartJobs(obs.lastJobs, in.JobFirstSeen, in.Now, in.StaleJob)
	}
	return v
}

// SystemStopping is what `systemctl is-system-running` says while the node shuts down.
const SystemStopping = "stopping"

// stoppingSamples counts the answered samples in which systemd said it was stopping.
func stoppingSamples(answered []Sample) int {
	n := 0
	for _, s := range answered {
		if s.SystemState == SystemStopping {
			n++
		}
	}
	return n
}

func answeredSamples(samples []Sample) []Sample {
	var answered []Sample
	for _, s := range samples {
		if s.Answered {
			answered = append(answered, s)
		}
	}
	return answered
}

// observations is what the answered samples read, source by source.
type observations struct {
	// states are each unit's states, in sample order.
	states                          map[string][]UnitState
	unitsRead, failedRead, jobsRead bool
	// lastFailed and lastJobs are the last read failed list and job list.
	lastFailed []string
	lastJobs   []Job
	// why the last sample that did not read a source did not.
	unitsUnread, failedUnread, jobsUnread string
}

func observe(answered []Sample) observations {
	o := observations{states: map[string][]UnitState{}}
	for _, s := range answered {
		if s.Units != nil {
			o.unitsRead = true
			for name, st := range s.Units {
				o.states[name] = append(o.states[name], st)
			}
		} else {
			o.unitsUnread = s.UnitsUnread
		}
		if s.Failed != nil {
			o.failedRead, o.lastFailed = true, s.Failed
		} else {
			o.failedUnread = s.FailedUnread
		}
		if s.Jobs != nil {
			o.jobsRead, o.lastJobs = true, s.Jobs
		} else {
			o.jobsUnread = s.JobsUnread
		}
	}
	return o
}

// unread names the sources no sample read, each with its reason.
func (o observations) unread() []string {
	var out []string
	if !o.unitsRead {
		out = append(out, "unit states: "+orUnknown(o.unitsUnread))
	}
	if !o.failedRead {
		out = append(out, "failed units: "+orUnknown(o.failedUnread))
	}
	if !o.jobsRead {
		out = append(out, "jobs: "+orUnknown(o.jobsUnread))
	}
	return out
}

// recentStates are each unit's states in the last window samples (all when window is 0).
func recentStates(answered []Sample, window int) map[string][]UnitState {
	recent := map[string][]UnitState{}
	for i, s := range answered {
		if window > 0 && i < len(answered)-window {
			continue
		}
		for name, st := range s.Units {
			recent[name] = append(recent[name], st)
		}
	}
	return recent
}

// classifyRestarts names a unit in a restart loop (with its budget, and whether it
// still loops in the recent window), or else one that cycled.
func classifyRestarts(v *Verdict, name string, states, recent []UnitState, budget func(string) int) {
	last := states[len(states)-1]
	switch {
	case looped(states):
		b := budget(name)
		v.RestartLoops = append(v.RestartLoops, LoopingUnit{
			Unit: name, NRestarts: last.NRestarts, Budget: b,
			PastBudget: last.NRestarts > b, StillLooping: looped(recent),
		})
	case activatedAgain(states):
		v.Cycling = append(v.Cycling, name)
	}
}

// classifyNeverSpawned names an owned, broken unit whose process never ran its
// program, as the closure's fault or the host's. It reports whether it did.
func classifyNeverSpawned(v *Verdict, last UnitState, owned bool) bool {
	broken := last.ActiveState == "failed" || last.SubState == "auto-restart"
	if !broken || !owned {
		return false
	}
	fault, host, ok := spawnFault(last)
	switch {
	case !ok:
		return false
	case host:
		v.NeverSpawnedHost = append(v.NeverSpawnedHost, fault)
	default:
		v.NeverSpawnedClosure = append(v.NeverSpawnedClosure, fault)
	}
	return true
}

// classifyLastState names a unit by its last state: failed (owned), set aside (failed,
// not owned) or skipped on a condition.
func classifyLastState(v *Verdict, in ClassifyInput, name string, last UnitState, owned bool, setAside map[string]bool) {
	switch {
	case last.ActiveState == "failed" && owned:
		v.Failed = append(v.Failed, FailedUnit{Unit: name, Result: last.Result, Origin: failureOrigin(in.FailedBefore, name)})
	case last.ActiveState == "failed":
		setAside[name] = true
	case SkippedOnCondition(last, in.SkippedInJournal[name]):
		v.SkippedOnCondition = append(v.SkippedOnCondition, name)
	}
}

// classifyUnshownFailed judges a unit in the failed list that no sample showed by
// ownership alone.
func classifyUnshownFailed(v *Verdict, in ClassifyInput, obs observations, setAside map[string]bool) {
	for _, name := range obs.lastFailed {
		if _, shown := obs.states[name]; shown {
			continue
		}
		owned := in.Owns(name)
		if owned && obs.unitsRead {
			v.Failed = append(v.Failed, FailedUnit{Unit: name, Origin: failureOrigin(in.FailedBefore, name)})
		} else if !owned {
			setAside[name] = true
		}
	}
}

// failureOrigin says whether unit was failed already at the snapshot (failedBefore;
// nil when unread).
func failureOrigin(failedBefore map[string]bool, unit string) FailureOrigin {
	switch {
	case failedBefore == nil:
		return FailedOriginUnknown
	case failedBefore[unit]:
		return FailedBeforeSwitch
	default:
		return FailedNew
	}
}

// staleStartJobs are the start jobs the run has seen for at least threshold, by unit.
func staleStartJobs(jobs []Job, firstSeen map[int]time.Time, now time.Time, threshold time.Duration) []StaleJob {
	stale := []StaleJob{}
	for _, job := range jobs {
		if job.Type != "start" {
			continue
		}
		seen, ok := firstSeen[job.ID]
		if !ok {
			continue
		}
		if age := now.Sub(seen); age >= threshold {
			stale = append(stale, StaleJob{Unit: job.Unit, JobID: job.ID, Age: age})
		}
	}
	sort.Slice(stale, func(i, j int) bool { return stale[i].Unit < stale[j].Unit })
	return stale
}

func orUnknown(reason string) string {
	if reason == "" {
		return "no answer"
	}
	return reason
}

func sortedObservationNames(m map[string][]UnitState) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// looped reports whether the observations show a restart loop: SubState=auto-restart
// at some sample, or NRestarts rising.
func looped(obs []UnitState) bool {
	if len(obs) == 0 {
		return false
	}
	if obs[len(obs)-1].NRestarts > obs[0].NRestarts {
		return true
	}
	for _, o := range obs {
		if o.SubState == "auto-restart" {
			return true
		}
	}
	return false
}

// activatedAgain reports whether the unit was started anew between two samples (a new
// invocation or a new main process start).
func activatedAgain(obs []UnitState) bool {
	for i := 1; i < len(obs); i++ {
		prev, cur := obs[i-1], obs[i]
		if prev.InvocationID != "" && cur.InvocationID != "" && prev.InvocationID != cur.InvocationID {
			return true
		}
		if prev.ExecMainStartMono != 0 && cur.ExecMainStartMono != 0 && prev.ExecMainStartMono != cur.ExecMainStartMono {
			return true
		}
	}
	return false
}

// spawnFault recognises a unit whose process never ran its program, and says whether
// the host (not the closure) caused it.
func spawnFault(s UnitState) (fault SpawnFault, host bool, ok bool) {
	if s.Result == "resources" {
		return SpawnFault{Unit: s.ID, Reason: "resources"}, true, true
	}
	const cldExited = 1
	if s.ExecMainCode == cldExited && s.ExecMainStatus >= 200 && s.ExecMainStatus <= 245 {
		return SpawnFault{Unit: s.ID, Status: s.ExecMainStatus, Reason: spawnStatusName(s.ExecMainStatus)},
			hostFaultStatuses[s.ExecMainStatus], true
	}
	return SpawnFault{}, false, false
}

// Decide is the one place that says whether a verdict fails the run. reasons are the
// findings that count against the node; fails is true when they fail the run: in
// strict mode any reason does, in lenient mode only an unreachable node does (the
// reasons then become warnings). Set-aside units, host faults, cycling units, stale
// jobs, condition skips and (outside verdict-only, or within budget) restart loops are
// named but never fail.
func Decide(v *Verdict) (reasons []string, fails bool) {
	if v.Unreachable {
		return []string{fmt.Sprintf("the node answered none of the %d samples: unreachable", v.Samples)}, true
	}
	if v.ShuttingDown {
		// First, and failing in lenient mode too: whatever else the samples saw, the
		// node was going down, and the units it stopped were stopped by the shutdown.
		reasons = append(reasons, fmt.Sprintf("the node was shutting down (systemd said %q; %d of %d samples answered): a poweroff or reboot began during the watch", SystemStopping, v.Answered, v.Samples))
	}
	if len(v.ActivationFailed) > 0 {
		reasons = append(reasons, "the activation script failed (switch-to-configuration exit 2), though the node runs the new system: "+strings.Join(v.ActivationFailed, "; "))
	}
	for _, u := range v.Unread {
		reasons = append(reasons, "could not read "+u)
	}
	for _, f := range v.Failed {
		reasons = append(reasons, fmt.Sprintf("unit %s failed (%s)", f.Unit, describeFailure(f, v.VerdictOnly)))
	}
	for _, f := range v.NeverSpawnedClosure {
		reasons = append(reasons, fmt.Sprintf("unit %s never spawned: %d/%s, a fault of the closure", f.Unit, f.Status, f.Reason))
	}
	if v.VerdictOnly {
		for _, l := range v.RestartLoops {
			switch {
			case l.StillLooping && l.PastBudget:
				reasons = append(reasons, fmt.Sprintf("unit %s still loops past its loop budget (%d restarts, %s)", l.Unit, l.NRestarts, describeBudget(l.Budget)))
			case l.StillLooping:
				reasons = append(reasons, fmt.Sprintf("unit %s still loops after the watch was extended by chain_wait (%d restarts, %s not used up)", l.Unit, l.NRestarts, describeBudget(l.Budget)))
			}
		}
	}
	reasons = append(reasons, checkReasons(v.Checks, len(reasons) == 0)...)
	return reasons, v.ShuttingDown || v.Strict && len(reasons) > 0
}

// describeFailure words a failed unit's result and origin. A verdict-only pass switches
// nothing: its "before" is the start of the pass, and it blames no closure.
func describeFailure(f FailedUnit, verdictOnly bool) string {
	var parts []string
	if f.Result != "" {
		parts = append(parts, "Result="+f.Result)
	}
	switch {
	case f.Origin == FailedNew:
		parts = append(parts, "new in this run")
	case f.Origin == FailedBeforeSwitch && verdictOnly:
		parts = append(parts, "already failed when the pass began")
	case f.Origin == FailedBeforeSwitch:
		parts = append(parts, "already failed before the switch, so the new closure may not be the cause")
	default:
		parts = append(parts, string(f.Origin))
	}
	return strings.Join(parts, ", ")
}

// LoopersWithinBudget are units still looping whose budget is not used up: their
// verdict is delayed (verdict-only mode), never dropped.
func LoopersWithinBudget(v *Verdict) []string {
	var names []string
	for _, l := range v.RestartLoops {
		if l.StillLooping && !l.PastBudget {
			names = append(names, l.Unit)
		}
	}
	return names
}

// RenderReport writes the verdict for an operator. An unread class says "unread",
// never "none".
func RenderReport(node string, v *Verdict) string {
	var b strings.Builder
	mode := "strict"
	if !v.Strict {
		mode = "lenient"
	}
	pass := "deploy"
	if v.VerdictOnly {
		pass = "verdict-only"
	}
	fmt.Fprintf(&b, "verdict for node %s (%s pass, %s): ", node, pass, mode)
	if v.Unreachable {
		fmt.Fprintf(&b, "UNREACHABLE: the node answered none of %d samples\n", v.Samples)
		return b.String()
	}
	if v.OK {
		b.WriteString("ok")
	} else {
		b.WriteString("FAILED")
	}
	fmt.Fprintf(&b, "; system state %s; %d/%d samples answered\n", v.SystemState, v.Answered, v.Samples)
	if v.Activation != "" && v.Activation != ActivationSwitched {
		fmt.Fprintf(&b, "  %-22s %s\n", "activation:", v.Activation)
	}
	line := func(label string, read bool, items []string) {
		switch {
		case !read:
			fmt.Fprintf(&b, "  %-22s unread\n", label+":")
		case len(items) == 0:
			fmt.Fprintf(&b, "  %-22s none\n", label+":")
		default:
			fmt.Fprintf(&b, "  %-22s %s\n", label+":", strings.Join(items, ", "))
		}
	}
	unitsRead := v.Failed != nil
	var failed, loops, closure, host, stale []string
	for _, f := range v.Failed {
		failed = append(failed, fmt.Sprintf("%s (%s)", f.Unit, f.Origin))
	}
	for _, l := range v.RestartLoops {
		loops = append(loops, fmt.Sprintf("%s (%d restarts, %s)", l.Unit, l.NRestarts, describeBudget(l.Budget)))
	}
	for _, f := range v.NeverSpawnedClosure {
		closure = append(closure, fmt.Sprintf("%s (%d/%s)", f.Unit, f.Status, f.Reason))
	}
	for _, f := range v.NeverSpawnedHost {
		host = append(host, fmt.Sprintf("%s (%d/%s)", f.Unit, f.Status, f.Reason))
	}
	for _, j := range v.StaleJobs {
		stale = append(stale, fmt.Sprintf("%s (job %d, %s)", j.Unit, j.JobID, j.Age.Round(time.Second)))
	}
	line("failed", unitsRead, failed)
	line("set aside", v.SetAside != nil, v.SetAside)
	line("restart loops", unitsRead, loops)
	line("cycling", unitsRead, v.Cycling)
	line("stale start jobs", v.StaleJobs != nil, stale)
	line("never spawned (closure)", unitsRead, closure)
	line("never spawned (host)", unitsRead, host)
	line("skipped on condition", unitsRead, v.SkippedOnCondition)
	line("restarted", true, v.Restarted)
	if len(v.NotRestarted) > 0 {
		line("not restarted", true, v.NotRestarted)
	}
	for _, u := range v.Unread {
		fmt.Fprintf(&b, "  unread: %s\n", u)
	}
	for _, r := range v.Reasons {
		fmt.Fprintf(&b, "  reason: %s\n", r)
	}
	return b.String()
}

// SkippedOnCondition tells a unit whose start was skipped because a Condition…= was
// false. systemd reports ConditionResult=no also for units whose conditions were never
// checked, so it takes one more fact: either the check has a timestamp, or the node's
// journal says the last start was skipped on a condition. The journal is needed because
// systemd (252, as on the lab nodes) garbage-collects a skipped unit: when it is shown
// again every timestamp is 0 and it looks exactly like a unit that was never started.
func SkippedOnCondition(st UnitState, journalSaysSkipped bool) bool {
	if st.ConditionResult != "no" || st.ActiveState == "failed" {
		return false
	}
	return st.ConditionTimestampMono > 0 || (journalSaysSkipped && st.InvocationID == "")
}

// MayBeForgottenSkip is a unit whose state cannot tell "skipped on a condition" from
// "never started": the journal must decide.
func MayBeForgottenSkip(st UnitState) bool {
	return st.ConditionResult == "no" && st.ConditionTimestampMono == 0 &&
		st.ActiveState == "inactive" && st.InvocationID == ""
}

// journalSkipMarker is what systemd logs when a start is skipped on a condition.
const journalSkipMarker = "skipped because of an unmet condition check"

// LastStartSkipped reads `journalctl -o cat -u <unit>` output and reports whether the
// unit's most recent start attempt was skipped on a condition (a later "Starting"/
// "Started"/"Failed" line means it was not).
func LastStartSkipped(journal string) bool {
	lines := strings.Split(strings.TrimSpace(journal), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		switch {
		case strings.Contains(l, journalSkipMarker):
			return true
		case strings.HasPrefix(l, "Starting "), strings.HasPrefix(l, "Started "),
			strings.HasPrefix(l, "Failed "), strings.Contains(l, "Failed with result"),
			strings.HasPrefix(l, "Finished "), strings.Contains(l, "Deactivated successfully"):
			return false
		}
	}
	return false
}

// describeBudget words a loop budget: a unit with none set has "no loop budget", not
// "budget 0".
func describeBudget(b int) string {
	if b <= 0 {
		return "no loop budget set"
	}
	return fmt.Sprintf("loop budget %d", b)
}

// sortedKeys lists a set's members sorted; an empty set gives an empty list, not nil
// (a verdict's read-but-empty list says "none").
func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
