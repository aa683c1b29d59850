package deploybody

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Deploy builds (or takes) the node's toplevel, copies it, switches the node to it and
// judges the node. It runs every phase of FR-003 in order. The Result is returned
// even with an error, filled as far as the run got. A verdict that fails the run does
// so only after the boot entry is finalized (FR-004).
func Deploy(ctx context.Context, t Transport, o Options) (*Result, error) {
	return newRun(ctx, t, o, false).execute()
}

// VerdictOnly judges a running node without building, copying or switching: it waits
// for the secret chain, restarts failed units the closure wants, settles, watches and
// gives the verdict (FR-007).
func VerdictOnly(ctx context.Context, t Transport, o Options) (*Result, error) {
	return newRun(ctx, t, o, true).execute()
}

// unreachableSampleLimit is how many unanswered samples in a row make a node
// unreachable in the chain wait.
const unreachableSampleLimit = 3

// maxSamples bounds every sampling loop in count, whatever the timings say.
const maxSamples = 2000

type run struct {
	ctx         context.Context
	t           Transport
	o           Options
	verdictOnly bool
	tree        localTree
	res         *Result

	toplevel      string
	nodeSilent    bool // verdict-only: the node did not answer in wait-for-node
	switchResult  SwitchResult
	closure       *closureUnits
	failedBefore  map[string]bool
	restarted     []string
	jobs          jobTracker
	watchSamples  []sample
	budgetCache   map[string]int
	verdictFailed error
	// failedAfterSwitch is the failed-unit list read with the running system after the
	// switch, for the restart phase (one round trip less).
	failedAfterSwitch *RunResult
	// seenFailed holds every unit a watch sample found failed: later samples show them.
	seenFailed map[string]bool
}

func newRun(ctx context.Context, t Transport, o Options, verdictOnly bool) *run {
	o = o.withDefaults(t)
	return &run{
		ctx:         ctx,
		t:           t,
		o:           o,
		verdictOnly: verdictOnly,
		tree:        localTree{root: o.LocalRoot},
		res:         &Result{Node: o.Node},
		budgetCache: map[string]int{},
		seenFailed:  map[string]bool{},
	}
}

type step struct {
	name string
	body func() (note string, err error)
}

// skippedInVerdictOnly are the phases that build, copy or switch.
var skippedInVerdictOnly = map[string]bool{
	PhaseBuild: true, PhasePushClosure: true, PhaseSwitch: true, PhaseReadSwitchResult: true,
	PhaseDetectUnconfirmed: true, PhaseFinalizeBootEntry: true,
}

func (r *run) execute() (*Result, error) {
	steps := []step{
		{PhaseBuild, r.build},
		{PhaseWaitForNode, r.waitForNode},
		{PhasePushClosure, r.pushClosure},
		{PhaseWaitForSecretChain, r.waitForSecretChain},
		{PhaseSnapshotUnitStates, r.snapshotUnitStates},
		{PhaseSwitch, r.switchSystem},
		{PhaseReadSwitchResult, r.readSwitchResult},
		{PhaseDetectUnconfirmed, r.detectUnconfirmedSwitch},
		{PhaseCollectOwnedUnits, r.collectOwnedUnits},
		{PhaseRestartFailedUnits, r.restartFailedUnits},
		{PhaseSettle, r.settle},
		{PhaseWatch, r.watch},
		{PhaseClassify, r.classify},
		{PhaseVerdict, r.verdict},
		{PhaseReport, r.report},
		{PhaseFinalizeBootEntry, r.finalizeBootEntry},
		{PhaseConclude, r.conclude},
	}
	for _, s := range steps {
		if r.verdictOnly && skippedInVerdictOnly[s.name] {
			r.res.Phases = append(r.res.Phases, PhaseTiming{Name: s.name, Note: skippedInVerdictOnlyNote})
			continue
		}
		if err := r.phase(s); err != nil {
			return r.res, err
		}
	}
	return r.res, nil
}

// phase times, logs and records one phase, and turns its error into a DeployError.
func (r *run) phase(s step) error {
	start := r.o.Clock.Now()
	r.log(LevelInfo, s.name, "phase started", nil)
	note, err := s.body()
	if err == nil {
		err = r.ctx.Err()
	}
	elapsed := r.o.Clock.Now().Sub(start)
	if err != nil {
		deployErr := r.asDeployError(s.name, err)
		if note == "" {
			note = "failed: " + deployErr.Err.Error()
		}
		r.res.Phases = append(r.res.Phases, PhaseTiming{Name: s.name, Duration: elapsed, Note: note})
		r.log(LevelWarn, s.name, "phase failed", map[string]any{"duration": elapsed.String(), "error": deployErr.Error()})
		return deployErr
	}
	r.res.Phases = append(r.res.Phases, PhaseTiming{Name: s.name, Duration: elapsed, Note: note})
	r.log(LevelInfo, s.name, "phase finished", map[string]any{"duration": elapsed.String(), "note": note})
	return nil
}

// hintedError carries what the operator can do about an error.
type hintedError struct {
	err  error
	hint string
}

func (h *hintedError) Error() string { return h.err.Error() }
func (h *hintedError) Unwrap() error { return h.err }

func withHint(err error, hint string) error { return &hintedError{err: err, hint: hint} }

func (r *run) asDeployError(phase string, err error) *DeployError {
	var deployErr *DeployError
	if errors.As(err, &deployErr) {
		return deployErr
	}
	hint := ""
	var hinted *hintedError
	if errors.As(err, &hinted) {
		hint = hinted.hint
		err = hinted.err
	}
	if hint == "" && errors.Is(err, ErrUnreachable) {
		hint = "check that the node is running and reachable with the transport's settings, then apply again"
	}
	if hint == "" && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		hint = "the operation's time limit ran out; raise the resource's timeouts or the matching timing"
	}
	return &DeployError{Node: r.o.Node, Phase: phase, Err: err, Hint: hint}
}

func (r *run) log(level Level, phase, message string, fields map[string]any) {
	if fields == nil {
		fields = map[string]any{}
	}
	fields["node"] = r.o.Node
	r.o.Logger.Log(r.ctx, level, phase, message, fields)
}

func (r *run) warn(phase, message string) {
	r.res.Warnings = append(r.res.Warnings, message)
	r.log(LevelWarn, phase, message, nil)
}

// searchPath is put before the node's PATH for every remote command, so a node whose
// own PATH resolves nothing still finds the closure's tools.
func (r *run) searchPath() []string {
	var p []string
	if r.toplevel != "" {
		p = append(p, r.toplevel+"/sw/bin")
	}
	return append(p, "/run/current-system/sw/bin", "/usr/bin", "/bin")
}

func (r *run) remote(argv ...string) (RunResult, error) {
	return r.t.Run(r.ctx, argv, RunOptions{Path: r.searchPath()})
}

// remoteBatch runs cmds in one round trip when the transport is a BatchRunner, else one
// by one. The results are in the order of cmds; err is only for transport faults.
func (r *run) remoteBatch(cmds ...[]string) ([]RunResult, error) {
	if b, ok := r.t.(BatchRunner); ok && len(cmds) > 1 {
		res, err := b.RunBatch(r.ctx, cmds, RunOptions{Path: r.searchPath()})
		if err == nil && len(res) != len(cmds) {
			err = fmt.Errorf("the transport answered %d of a batch of %d commands", len(res), len(cmds))
		}
		return res, err
	}
	out := make([]RunResult, 0, len(cmds))
	for _, c := range cmds {
		res, err := r.remote(c...)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// The reads the body sends to a node.
var (
	cmdReadRunning = []string{"readlink", "-f", "/run/current-system"}
	cmdListFailed  = []string{"systemctl", "list-units", "--state=failed", "--no-legend", "--plain", "--full"}
	cmdListJobs    = []string{"systemctl", "list-jobs", "--no-legend", "--no-pager"}
	cmdSystemState = []string{"systemctl", "is-system-running"}
)

func cmdShow(units []string) []string {
	return append([]string{"systemctl", "show", "-p", strings.Join(showProperties, ","), "--"}, units...)
}

// ---- build ----

func (r *run) build() (string, error) {
	if r.o.Toplevel != "" {
		if !validStorePath(r.o.Toplevel) {
			return "", withHint(fmt.Errorf("toplevel %q is not a clean absolute store path", r.o.Toplevel), "set toplevel to the store path of the built system")
		}
		r.setToplevel(r.o.Toplevel)
		return "prebuilt toplevel", nil
	}
	if r.o.Cache != nil && r.o.CacheKey != "" {
		toplevel, ok, why := r.o.Cache.Lookup(r.o.CacheKey)
		if why != "" {
			r.warn(PhaseBuild, "evaluation cache: "+why)
		}
		if ok {
			r.setToplevel(toplevel)
			r.res.CacheHit = true
			return "evaluation cache hit", nil
		}
	}
	if r.o.Build == nil {
		return "", withHint(errors.New("no toplevel was given and there is no way to build one"), "set toplevel to a prebuilt system, or configure the build")
	}
	toplevel, err := r.o.Build(r.ctx)
	if err != nil {
		return "", withHint(fmt.Errorf("building the system: %w", err), "fix the evaluation or build error; nothing was copied to the node")
	}
	toplevel = strings.TrimSpace(toplevel)
	if !validStorePath(toplevel) {
		return "", withHint(fmt.Errorf("the build returned %q, which is not a clean absolute store path", toplevel), "the build must print the toplevel's store path")
	}
	r.setToplevel(toplevel)
	if r.o.Cache != nil && r.o.CacheKey != "" {
		if err := r.o.Cache.Store(r.o.CacheKey, toplevel, r.o.Clock.Now()); err != nil {
			r.warn(PhaseBuild, "evaluation cache not written (not an error): "+err.Error())
		}
	}
	return "built", nil
}

func (r *run) setToplevel(toplevel string) {
	r.toplevel = toplevel
	r.res.Toplevel = toplevel
}

// ---- wait for node ----

func (r *run) waitForNode() (string, error) {
	deadline := r.o.Clock.Now().Add(r.o.Timings.NodeWait)
	var lastErr error
	for attempt := 1; attempt <= maxSamples; attempt++ {
		lastErr = r.t.Reach(r.ctx)
		if lastErr == nil {
			return fmt.Sprintf("answered at attempt %d", attempt), nil
		}
		if errors.Is(lastErr, ErrRefused) {
			return "", withHint(fmt.Errorf("the node refused the connection: %w", lastErr),
				"retrying will not help: fix the host key pin or the credentials named above, then apply again")
		}
		if r.verdictOnly && errors.Is(lastErr, ErrSystemdUnanswered) {
			// The node answers; only its systemd does not. The verdict shows the unit
			// states as unread instead of calling the node unreachable.
			r.warn(PhaseWaitForNode, "the node answers but its systemd does not: "+lastErr.Error())
			return "node answered; systemd did not (unit states will be unread)", nil
		}
		if r.ctx.Err() != nil || !r.o.Clock.Now().Before(deadline) {
			break
		}
		r.log(LevelDebug, PhaseWaitForNode, "node not answering yet", map[string]any{"attempt": attempt, "error": lastErr.Error()})
		if err := r.o.Clock.Sleep(r.ctx, r.o.Timings.SampleInterval); err != nil {
			return "", err
		}
	}
	if r.verdictOnly {
		r.nodeSilent = true
		r.warn(PhaseWaitForNode, fmt.Sprintf("node did not answer within node_wait (%s): %v", r.o.Timings.NodeWait, lastErr))
		return "node silent; the chain wait samples it", nil
	}
	return "", withHint(fmt.Errorf("node did not answer within node_wait (%s): %w", r.o.Timings.NodeWait, lastErr),
		"check that the node is up and the transport's address and credentials; raise timings.node_wait if it boots slowly")
}

// ---- push closure ----

// macListScript prints "<interface dir> <address>" for each network interface.
const macListScript = `for f in /sys/class/net/*/address; do [ -r "$f" ] && printf '%s %s\n' "${f%/address}" "$(cat "$f")"; done; true`

func (r *run) pushClosure() (string, error) {
	if err := r.checkHardwareAddresses(); err != nil {
		return "", err
	}
	stats, err := r.t.CopyClosure(r.ctx, r.toplevel)
	if err != nil {
		return "", withHint(fmt.Errorf("copying %s: %w", r.toplevel, err), "check the node's free space and the transport; nothing was switched")
	}
	r.res.Copy = stats
	return fmt.Sprintf("%d of %d paths sent, %d bytes", stats.PathsMissing, stats.PathsTotal, stats.BytesSent), nil
}

// checkHardwareAddresses refuses a closure whose link files match a permanent
// hardware address the node does not have (it would rename or misconfigure the wrong
// interface), before anything is copied.
func (r *run) checkHardwareAddresses() error {
	requirements, err := readLinkRequirements(r.tree, r.toplevel)
	if err != nil {
		return withHint(err, "the toplevel's files must be readable on the deployer (see local_root)")
	}
	if len(requirements) == 0 {
		return nil
	}
	res, err := r.remote("sh", "-c", macListScript)
	if err != nil {
		return withHint(fmt.Errorf("reading the node's hardware addresses: %w", err), "the closure's link files need them; check the transport")
	}
	nodeMACs := map[string]bool{}
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 2 {
			if mac, ok := normalizeMAC(fields[1]); ok {
				nodeMACs[mac] = true
			}
		}
	}
	for _, req := range requirements {
		found := false
		for _, mac := range req.MACs {
			found = found || nodeMACs[mac]
		}
		if !found {
			return withHint(
				fmt.Errorf("refusing the closure before the copy: link file %s matches PermanentMACAddress=%s, which node %s does not have (it has %s)",
					req.File, strings.Join(req.MACs, " "), r.o.Node, strings.Join(sortedKeys(nodeMACs), ", ")),
				"the closure was built for other hardware: correct the node's hardware address in its configuration, or deploy it to the machine that has it")
		}
	}
	return nil
}

// ---- snapshot ----

// runningSystem reads the answer to cmdReadRunning: "" when no NixOS system runs yet.
func runningSystem(res RunResult) string {
	running := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 || running == "/run/current-system" {
		return ""
	}
	return running
}

func (r *run) snapshotUnitStates() (string, error) {
	// One round trip: the running system, the failed units and the job queue.
	answers, err := r.remoteBatch(cmdReadRunning, cmdListFailed, cmdListJobs)
	if err != nil {
		return "", withHint(fmt.Errorf("reading /run/current-system and the unit states: %w", err), "")
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
			r.warn(PhaseSnapshotUnitStates, fmt.Sprintf("node runs %s, not the toplevel %s this verdict judges", running, r.toplevel))
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

// ---- switch ----

func (r *run) switchSystem() (string, error) {
	sr, err := r.t.Switch(r.ctx, r.toplevel, "switch", r.o.Timings.SwitchTimeout)
	if err != nil {
		return "", withHint(fmt.Errorf("switch-to-configuration switch: %w", err),
			"the node may run either system: read the node's journal for switch-to-configuration, then apply again (raise timings.switch_timeout if it was cut short)")
	}
	r.switchResult = sr
	r.res.SwitchExitCode = sr.ExitCode
	r.res.SwitchStderr = sr.Stderr
	r.res.SwitchReconnects = sr.Reconnected
	note := fmt.Sprintf("exit %d", sr.ExitCode)
	if sr.Reconnected {
		note += "; connection dropped and was re-established, result read after reconnecting"
	}
	return note, nil
}

func (r *run) readSwitchResult() (string, error) {
	sr := r.switchResult
	switch sr.ExitCode {
	case 0:
		return "all units started", nil
	case 4:
		return "some units failed (exit 4); the verdict names them", nil
	case 100:
		r.warn(PhaseReadSwitchResult, "switch-to-configuration says the node needs a reboot to run the new system fully (exit 100)")
		return "reboot needed (exit 100)", nil
	default:
		r.warn(PhaseReadSwitchResult, fmt.Sprintf("switch-to-configuration exited %d: %s", sr.ExitCode, firstLine(sr.Stderr, "no output")))
		return fmt.Sprintf("exit %d", sr.ExitCode), nil
	}
}

// ---- detect unconfirmed ----

func (r *run) detectUnconfirmedSwitch() (string, error) {
	// One round trip: the running system, and the failed units the restart phase needs.
	answers, err := r.remoteBatch(cmdReadRunning, cmdListFailed)
	if err != nil {
		return "", withHint(fmt.Errorf("reading /run/current-system after the switch: %w", err),
			"the node may run either system; the boot entry was not finalized")
	}
	running := runningSystem(answers[0])
	r.failedAfterSwitch = &answers[1]
	r.res.RunningSystem = running
	if running == r.toplevel {
		r.res.Confirmed = true
		return "node runs the new toplevel", nil
	}
	revertTo := running
	if revertTo == "" {
		revertTo = r.res.PreviousSystem
	}
	if revertTo == "" {
		return "", withHint(fmt.Errorf("the switch never activated: the node runs no NixOS system after switching to %s, and there is no previous system to point the boot entry back at", r.toplevel),
			"read switch-to-configuration's output and the node's journal; check the boot entry by hand before a reboot")
	}
	if err := r.t.RevertBoot(r.ctx, revertTo); err != nil {
		return "", withHint(fmt.Errorf("the switch never activated (node runs %s, not %s) and reverting the boot entry to %s failed: %w", describeSystem(running), r.toplevel, revertTo, err),
			"the boot entry may point at the new system: set the system profile back by hand before the node reboots")
	}
	r.res.BootReverted = true
	return "", withHint(fmt.Errorf("the switch never activated: node runs %s, not %s; the boot entry was reverted to %s", describeSystem(running), r.toplevel, revertTo),
		"read switch-to-configuration's output (switch stderr) and the node's journal; the node keeps running its previous system")
}

func describeSystem(s string) string {
	if s == "" {
		return "no NixOS system"
	}
	return s
}

// ---- collect owned units ----

func (r *run) collectOwnedUnits() (string, error) {
	c, err := readClosureUnits(r.tree, r.toplevel)
	if err != nil {
		return "", withHint(err, "the toplevel's files must be readable on the deployer (see local_root)")
	}
	r.closure = c
	for _, name := range c.rejected {
		r.warn(PhaseCollectOwnedUnits, fmt.Sprintf("closure entry %q is not a valid unit name; ignored", name))
	}
	return fmt.Sprintf("%d owned, %d wanted", len(c.owned), len(c.wanted)), nil
}

// ---- restart ----

func (r *run) restartFailedUnits() (string, error) {
	var (
		failed []string
		reason string
		err    error
	)
	if r.failedAfterSwitch != nil { // read with the running system, just before
		failed, reason = r.parseFailed(*r.failedAfterSwitch)
		r.failedAfterSwitch = nil
	} else {
		failed, reason, err = r.readFailedUnits()
	}
	if err != nil {
		return "", withHint(fmt.Errorf("reading failed units: %w", err), "")
	}
	if reason != "" {
		r.warn(PhaseRestartFailedUnits, "failed units unread ("+reason+"); restarted nothing")
		return "unread: " + reason, nil
	}
	var candidates []string
	for _, u := range failed {
		if (r.verdictOnly && r.closure.wants(u)) || (!r.verdictOnly && r.closure.owns(u)) {
			candidates = append(candidates, u)
		}
	}
	if len(candidates) == 0 {
		return "no failed unit to restart", nil
	}
	states, reason, err := r.showUnits(candidates)
	if err != nil {
		return "", withHint(fmt.Errorf("reading failed units: %w", err), "")
	}
	if reason != "" {
		r.warn(PhaseRestartFailedUnits, "failed units' states unread ("+reason+"); restarted nothing")
		return "unread: " + reason, nil
	}
	var restart []string
	for _, u := range candidates {
		if st, ok := states[u]; ok && skippedOnCondition(st, false) {
			continue // skipped on a condition: restarting it changes nothing
		}
		restart = append(restart, u)
	}
	if len(restart) == 0 {
		return "no failed unit to restart", nil
	}
	res, err := r.remote(append([]string{"systemctl", "restart", "--no-block", "--"}, restart...)...)
	if err != nil {
		return "", withHint(fmt.Errorf("restarting %s: %w", strings.Join(restart, ", "), err), "")
	}
	if res.ExitCode != 0 {
		r.warn(PhaseRestartFailedUnits, fmt.Sprintf("systemctl restart %s exited %d: %s", strings.Join(restart, " "), res.ExitCode, firstLine(string(res.Stderr), "")))
	}
	r.restarted = restart
	return "restarted " + strings.Join(restart, ", "), nil
}

// ---- settle ----

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
	answers, err := r.remoteBatch(cmds...)
	if err != nil {
		r.log(LevelDebug, PhaseWatch, "sample unanswered", map[string]any{"error": err.Error()})
		return s
	}
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

// ---- classify, verdict, report ----

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
	if !r.verdictOnly {
		hint = "the node keeps the new boot entry; " + hint
	}
	return hint
}

func (r *run) report() (string, error) {
	v := r.res.Verdict
	r.res.Report = renderReport(r.o.Node, v)
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

// ---- finalize, conclude ----

func (r *run) finalizeBootEntry() (string, error) {
	generation, err := r.t.FinalizeBoot(r.ctx, r.toplevel)
	if err != nil {
		err = fmt.Errorf("setting the system profile and boot entry to %s: %w", r.toplevel, err)
		if r.verdictFailed != nil {
			err = fmt.Errorf("%w (the verdict also fails the node: %s)", err, strings.Join(r.res.Verdict.Reasons, "; "))
		}
		return "", withHint(err, "the node runs the new system but may boot the previous one: apply again, or run switch-to-configuration boot on the node")
	}
	r.res.Generation = generation
	return fmt.Sprintf("generation %d", generation), nil
}

func (r *run) conclude() (string, error) {
	if r.verdictFailed != nil {
		return "failed by the verdict", r.verdictFailed
	}
	return "ok", nil
}

// sleepOrDone is a helper for loops that sleep between samples.
func (r *run) sleepOrDone(d time.Duration) error { return r.o.Clock.Sleep(r.ctx, d) }
