package deploybody

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixeval"
)

func failedNamesOf(v *judge.Verdict) []string { return judge.FailedNames(v.Failed) }

// A closure that leaves a unit failed fails the deploy and names the
// unit; the boot entry is finalized first.
func TestDeployFailedUnitFailsStrictAfterFinalizingBoot(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: fails}, "db.service": {b: runs}})
	res, err := s.deploy()
	de := deployErr(t, err, PhaseVerdict)
	if !strings.Contains(de.Error(), "web.service") || !strings.Contains(de.Hint, "keeps the new boot entry") {
		t.Fatalf("error must name web.service and the kept boot entry: %v", err)
	}
	if got := failedNamesOf(res.Verdict); !reflect.DeepEqual(got, []string{"web.service"}) {
		t.Fatalf("failed = %v, want [web.service]", got)
	}
	if res.Verdict.Failed[0].Origin != judge.FailedNew {
		t.Fatalf("origin = %q, want new", res.Verdict.Failed[0].Origin)
	}
	if s.node.profile != testToplevel || res.Generation != 2 {
		t.Fatalf("boot entry = %s gen %d, want the new toplevel as generation 2", s.node.profile, res.Generation)
	}
	// web.service was restarted once (it is owned and failed) and failed again.
	if !reflect.DeepEqual(res.Verdict.Restarted, []string{"web.service"}) {
		t.Fatalf("restarted = %v", res.Verdict.Restarted)
	}
	if res.SwitchExitCode != 4 || !res.Confirmed {
		t.Fatalf("switch exit %d confirmed %v", res.SwitchExitCode, res.Confirmed)
	}
	if res.Verdict.OK || res.Verdict.SystemState != "degraded" {
		t.Fatalf("verdict ok=%v state=%s", res.Verdict.OK, res.Verdict.SystemState)
	}
}

// Lenient mode names the unit and succeeds.
func TestDeployFailedUnitLenientWarns(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: fails}})
	s.opts.Strict = false
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("lenient deploy failed: %v", err)
	}
	if got := failedNamesOf(res.Verdict); !reflect.DeepEqual(got, []string{"web.service"}) {
		t.Fatalf("failed = %v", got)
	}
	if !res.Verdict.OK || !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "web.service") }) {
		t.Fatalf("lenient verdict must pass with a warning naming the unit: %+v %v", res.Verdict, res.Warnings)
	}
	if !strings.Contains(res.Report, "web.service") {
		t.Fatalf("report must name the unit:\n%s", res.Report)
	}
}

// A unit systemd never spawned because of the host is named as a host
// fault and does not fail the deploy.
func TestDeployHostFaultIsNamedNotBlamed(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{
		"rt.service":     {b: spawnFails, status: 214},
		"bigmem.service": {b: resources},
		"ok.service":     {b: runs},
	})
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("host faults must not fail the deploy: %v", err)
	}
	host := judge.SpawnNames(res.Verdict.NeverSpawnedHost)
	if !reflect.DeepEqual(host, []string{"bigmem.service", "rt.service"}) {
		t.Fatalf("host faults = %v", host)
	}
	if len(res.Verdict.Failed) != 0 || len(res.Verdict.NeverSpawnedClosure) != 0 {
		t.Fatalf("closure blamed: failed=%v closure=%v", res.Verdict.Failed, res.Verdict.NeverSpawnedClosure)
	}
	if !strings.Contains(res.Report, "214/SETSCHEDULER") {
		t.Fatalf("report must name the spawn status:\n%s", res.Report)
	}
}

// A unit the closure cannot spawn (203/EXEC, 217/USER) fails a strict deploy.
func TestDeployClosureSpawnFaultFails(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"app.service": {b: spawnFails, status: 203}, "u.service": {b: spawnFails, status: 217}})
	res, err := s.deploy()
	de := deployErr(t, err, PhaseVerdict)
	if !strings.Contains(de.Error(), "203/EXEC") || !strings.Contains(de.Error(), "217/USER") {
		t.Fatalf("error must name the spawn faults: %v", err)
	}
	if got := judge.SpawnNames(res.Verdict.NeverSpawnedClosure); !reflect.DeepEqual(got, []string{"app.service", "u.service"}) {
		t.Fatalf("closure faults = %v", got)
	}
}

// A restart loop is reported and does not fail a deploy.
func TestDeployRestartLoopIsReportedNotFatal(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"crashy.service": {b: loops, every: 3 * time.Second}})
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("a restart loop must not fail a deploy: %v", err)
	}
	loopsFound := res.Verdict.RestartLoops
	if len(loopsFound) != 1 || loopsFound[0].Unit != "crashy.service" || loopsFound[0].NRestarts == 0 || !loopsFound[0].StillLooping {
		t.Fatalf("restart loops = %+v", loopsFound)
	}
	if !strings.Contains(res.Report, "crashy.service") {
		t.Fatalf("report must name the loop:\n%s", res.Report)
	}
}

func TestDeployCyclingAndStaleJobAreNamed(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{
		"socketish.service": {b: cycles, every: 3 * time.Second},
		"slow.service":      {b: stuck},
	})
	s.opts.Timings.StaleJob = 8 * time.Second
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("cycling and stale jobs must not fail: %v", err)
	}
	if !reflect.DeepEqual(res.Verdict.Cycling, []string{"socketish.service"}) {
		t.Fatalf("cycling = %v", res.Verdict.Cycling)
	}
	if len(res.Verdict.StaleJobs) != 1 || res.Verdict.StaleJobs[0].Unit != "slow.service" || res.Verdict.StaleJobs[0].Age < 8*time.Second {
		t.Fatalf("stale jobs = %+v", res.Verdict.StaleJobs)
	}
	if len(res.Verdict.RestartLoops) != 0 {
		t.Fatalf("cycling unit misread as a loop: %+v", res.Verdict.RestartLoops)
	}
}

// An old failure is never blamed on the new closure without saying so.
func TestDeployMarksUnitsAlreadyFailedBeforeSwitch(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"old.service": {b: fails}, "new.service": {b: fails}})
	s.node.setUnit("old.service", unitSpec{b: fails})
	s.opts.Strict = false
	res, err := s.deploy()
	if err != nil {
		t.Fatal(err)
	}
	origins := map[string]judge.FailureOrigin{}
	for _, f := range res.Verdict.Failed {
		origins[f.Unit] = f.Origin
	}
	want := map[string]judge.FailureOrigin{"old.service": judge.FailedBeforeSwitch, "new.service": judge.FailedNew}
	if !reflect.DeepEqual(origins, want) {
		t.Fatalf("origins = %v, want %v", origins, want)
	}
	if !strings.Contains(strings.Join(res.Verdict.Reasons, "\n"), "already failed before the switch") {
		t.Fatalf("reasons must say the old failure predates the switch: %v", res.Verdict.Reasons)
	}
}

// Edge case (#1712): a failed unit the configuration does not define is set aside,
// not restarted, and does not fail the deploy. A failed owned unit that a restart
// fixes passes.
func TestDeploySetsAsideForeignFailuresAndRestartsOwnedOnes(t *testing.T) {
	fixed := unitSpec{b: runs}
	s := newScenario(t, map[string]unitSpec{"flaky.service": {b: fails, onRestart: &fixed}})
	s.node.setUnit("leftover.service", unitSpec{b: fails})
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy failed: %v", err)
	}
	if !reflect.DeepEqual(res.Verdict.SetAside, []string{"leftover.service"}) {
		t.Fatalf("set aside = %v", res.Verdict.SetAside)
	}
	if !reflect.DeepEqual(res.Verdict.Restarted, []string{"flaky.service"}) {
		t.Fatalf("restarted = %v, want only the owned unit", res.Verdict.Restarted)
	}
	for _, c := range s.node.runsOf("systemctl", "restart") {
		if slices.Contains(c.argv, "leftover.service") {
			t.Fatalf("a unit the closure does not own was restarted: %v", c.argv)
		}
	}
	if len(res.Verdict.Failed) != 0 {
		t.Fatalf("failed = %v", res.Verdict.Failed)
	}
}

// Edge case: a unit skipped on a condition is not restarted and is named; a unit that
// was never started (ConditionResult=no without a timestamp) is not.
func TestDeployConditionSkippedUnitIsNamedNotRestarted(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"firstboot.service": {b: conditionSkip}, "idle.service": {b: neverStarted}})
	res, err := s.deploy()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Verdict.SkippedOnCondition, []string{"firstboot.service"}) {
		t.Fatalf("skipped = %v", res.Verdict.SkippedOnCondition)
	}
	if n := len(s.node.runsOf("systemctl", "restart")); n != 0 {
		t.Fatalf("%d restarts, want none", n)
	}
}

// Every phase runs, in order, and is logged.
func TestDeployRunsEveryPhaseInOrder(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	res, err := s.deploy()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range res.Phases {
		names = append(names, p.Name)
		if strings.HasPrefix(p.Note, "skipped") {
			t.Fatalf("phase %s skipped in a deploy", p.Name)
		}
	}
	if !reflect.DeepEqual(names, Phases) {
		t.Fatalf("phases = %v\nwant     %v", names, Phases)
	}
	for _, p := range Phases {
		if !slices.Contains(s.logs, "info "+p+" phase started") || !slices.Contains(s.logs, "info "+p+" phase finished") {
			t.Fatalf("phase %s not logged: %v", p, s.logs)
		}
	}
	var settle time.Duration
	for _, p := range res.Phases {
		if p.Name == PhaseSettle {
			settle = p.Duration
		}
	}
	if settle != DefaultSettle {
		t.Fatalf("settle took %s, want the default %s", settle, DefaultSettle)
	}
	order := []string{}
	for _, c := range s.node.calls {
		if c.what != "run" && c.what != "reach" {
			order = append(order, c.what)
		}
	}
	if !reflect.DeepEqual(order, []string{"copy", "switch", "finalize"}) {
		t.Fatalf("transport order = %v", order)
	}
	if res.Verdict.SystemState != "running" || !res.Verdict.OK || res.PreviousSystem != testPrevious || res.Generation != 2 {
		t.Fatalf("result = %+v verdict %+v", res, res.Verdict)
	}
}

// Edge case: a switch that never activates fails, and changes no boot entry: `test`
// touched neither the boot loader nor the profile, so nothing is pointed back.
func TestDeployUnconfirmedSwitchLeavesBootEntry(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.boots.entry = testPrevious
	s.node.switchNeverActivates = true
	res, err := s.deploy()
	de := deployErr(t, err, PhaseDetectUnconfirmed)
	if !strings.Contains(de.Error(), "never activated") || !strings.Contains(de.Error(), testPrevious) || !strings.Contains(de.Error(), "boot entry is untouched") {
		t.Fatalf("error = %v", err)
	}
	if reverts := s.node.callsOf("revert"); len(reverts) != 0 || res.BootReverted || res.Confirmed {
		t.Fatalf("reverts = %+v, result %+v: want no boot entry change", reverts, res)
	}
	if len(s.node.callsOf("finalize")) != 0 || s.node.profile != testPrevious || s.node.boots.entry != testPrevious {
		t.Fatalf("boot entry %s profile %s after an unconfirmed switch: want the previous system", s.node.boots.entry, s.node.profile)
	}
	if s.node.pushedRoot != "" {
		t.Fatalf("the pushed closure's GC root %s outlived the run", s.node.pushedRoot)
	}
}

// A dropped connection during the switch is reported as re-established (the
// transport read the result).
func TestDeployRecordsReconnectedSwitch(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.switchReconnects = true
	res, err := s.deploy()
	if err != nil {
		t.Fatal(err)
	}
	if !res.SwitchReconnects || !strings.Contains(phaseNote(res, PhaseSwitch), "re-established") {
		t.Fatalf("reconnect not recorded: %+v", res.Phases)
	}
	if sw := s.node.callsOf("switch"); len(sw) != 1 || sw[0].argv[2] != DefaultSwitchTimeout.String() {
		t.Fatalf("switch calls = %+v, want one with the default limit", sw)
	}
}

func phaseNote(res *Result, name string) string {
	for _, p := range res.Phases {
		if p.Name == name {
			return p.Note
		}
	}
	return ""
}

// Edge case: a severed system bus leaves the unit sets unread, not empty.
func TestDeploySeveredBusShowsUnread(t *testing.T) {
	for _, strict := range []bool{true, false} {
		s := newScenario(t, map[string]unitSpec{"web.service": {b: fails}})
		s.node.severBusAtSwitch = true
		s.opts.Strict = strict
		res, err := s.deploy()
		v := res.Verdict
		if v == nil || len(v.Unread) == 0 || v.Failed != nil || v.SetAside != nil || v.RestartLoops != nil || v.StaleJobs != nil {
			t.Fatalf("strict=%v: unread sets must be nil with Unread set: %+v", strict, v)
		}
		if v.SystemState != "unread" || !strings.Contains(strings.Join(v.Unread, "\n"), "Failed to connect to bus") {
			t.Fatalf("strict=%v: unread reasons = %v state %s", strict, v.Unread, v.SystemState)
		}
		for _, line := range strings.Split(res.Report, "\n") {
			if strings.Contains(line, "none") && !strings.Contains(line, "restarted:") {
				t.Fatalf("strict=%v: report shows an unread class as none: %q", strict, line)
			}
		}
		if !strings.Contains(res.Report, "failed:                unread") {
			t.Fatalf("strict=%v: report must say unread, never none:\n%s", strict, res.Report)
		}
		if strict {
			wantDeployErr(t, err, PhaseVerdict)
		} else if err != nil {
			t.Fatalf("lenient: %v", err)
		}
		if s.node.profile != testToplevel {
			t.Fatalf("strict=%v: boot entry not finalized", strict)
		}
	}
}

// The verdict says unreachable when the node answered none of the watch samples.
func TestDeployUnreachableDuringWatch(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.opts.Strict = false
	s.node.goneAfterSwitch = time.Second // answers the switch checks, then none of the samples
	res, err := s.deploy()
	if err == nil {
		t.Fatal("an unreachable node must fail even in lenient mode")
	}
	if res.Verdict == nil {
		t.Fatalf("no verdict: %v", err)
	}
	if !res.Verdict.Unreachable || res.Verdict.SystemState != "unreachable" || res.Verdict.Answered != 0 {
		t.Fatalf("verdict = %+v", res.Verdict)
	}
	if !strings.Contains(res.Report, "UNREACHABLE") {
		t.Fatalf("report:\n%s", res.Report)
	}
}

// A switched system that powers the node off: on a busy host the node answers the
// first samples while systemd stops its units, then none. The verdict says it was
// shutting down, first, and fails in lenient mode too; it does not pass off the units
// the shutdown stopped as the news.
func TestDeployShuttingDownDuringWatch(t *testing.T) {
	for _, gone := range []time.Duration{0, 9 * time.Second} {
		s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
		s.opts.Strict = false
		s.node.stoppingAfterSwitch = true
		s.node.goneAfterSwitch = gone
		res, err := s.deploy()
		if err == nil {
			t.Fatalf("gone after %s: a node that shut down after the switch passed the lenient verdict", gone)
		}
		v := res.Verdict
		if v == nil || !v.ShuttingDown || v.Unreachable || v.OK || v.Answered == 0 {
			t.Fatalf("gone after %s: verdict = %+v", gone, v)
		}
		if gone > 0 && v.Answered == v.Samples {
			t.Fatalf("gone after %s: every one of %d samples answered; the scenario needs the node to go dark during the watch", gone, v.Samples)
		}
		if len(v.Reasons) == 0 || !strings.Contains(v.Reasons[0], "the node was shutting down") {
			t.Fatalf("gone after %s: the first reason does not say the node was shutting down: %q", gone, v.Reasons)
		}
		if gone > 0 {
			// The boot entry is set after the verdict; a node gone by then fails
			// that phase as unreachable (which the snapshot guard restores), and the
			// error still carries the verdict.
			if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "the node was shutting down") {
				t.Fatalf("gone after %s: error %v", gone, err)
			}
			continue
		}
		de := deployErr(t, err, PhaseVerdict)
		if !strings.Contains(de.Hint, "power off or reboot") {
			t.Fatalf("gone after %s: hint %q", gone, de.Hint)
		}
	}
}

func TestDeployFailsWhenNodeNeverAnswers(t *testing.T) {
	s := newScenario(t, nil)
	s.node.unreachable = true
	_, err := s.deploy()
	de := deployErr(t, err, PhaseWaitForNode)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(de.Hint, "node_wait") {
		t.Fatalf("error = %v", err)
	}
	if reaches := len(s.node.callsOf("reach")); reaches < 2 || reaches > int(DefaultNodeWait/DefaultSampleInterval)+2 {
		t.Fatalf("%d reach attempts, want a bounded retry", reaches)
	}
	if len(s.node.callsOf("copy")) != 0 {
		t.Fatal("copied to a node that never answered")
	}
}

// Edge case: a node whose own PATH resolves nothing still runs remote commands,
// because each command gets the deployed closure's tools first.
func TestDeployWorksOnNodeWithEmptyPath(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.ownPathEmpty = true
	s.node.running, s.node.profile = "", "" // first deploy: no /run/current-system yet
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy on a node with an empty PATH failed: %v", err)
	}
	if !res.Verdict.OK || res.Verdict.SystemState != "running" {
		t.Fatalf("verdict = %+v", res.Verdict)
	}
	for _, c := range s.node.runsOf("systemctl") {
		if len(c.path) == 0 || c.path[0] != testToplevel+"/sw/bin" {
			t.Fatalf("remote command %v ran without the closure's tools first on PATH: %v", c.argv, c.path)
		}
	}
	// The fake must be able to tell: without the closure's tools, nothing resolves.
	if out, _ := s.node.Run(context.Background(), []string{"systemctl", "is-system-running"}, RunOptions{Path: []string{"/usr/bin", "/bin"}}); out.ExitCode != 127 {
		t.Fatalf("fake node resolves commands without the closure path (exit %d)", out.ExitCode)
	}
}

// Unit names read from the node are validated before they reach a command line.
func TestDeployIgnoresInvalidUnitNamesFromNode(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: fails}})
	s.node.invalidFailedNames = []string{"$(reboot).service", "x;rm.service"}
	s.opts.Strict = false
	if _, err := s.deploy(); err != nil {
		t.Fatal(err)
	}
	for _, c := range s.node.callsOf("run") {
		for _, a := range c.argv {
			if strings.Contains(a, "reboot") || strings.Contains(a, ";rm") {
				t.Fatalf("invalid unit name reached a command: %v", c.argv)
			}
		}
	}
}

// Edge case: a closure whose link files expect a permanent hardware address the node
// lacks is refused before the copy; a closure without such files is not gated.
func TestDeployMACGate(t *testing.T) {
	link := "[Match]\nPermanentMACAddress=00:16:3E:AA:BB:CC\n\n[Link]\nName=lan0\n"
	t.Run("refused before copy", func(t *testing.T) {
		s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
		writeClosure(t, s.root, testToplevel, closureSpec{linkFiles: map[string]string{"10-lan0.link": link}})
		_, err := s.deploy()
		de := deployErr(t, err, PhasePushClosure)
		if !strings.Contains(de.Error(), "10-lan0.link") || !strings.Contains(de.Error(), "00:16:3e:aa:bb:cc") {
			t.Fatalf("error must name the file and the address: %v", err)
		}
		if len(s.node.callsOf("copy")) != 0 || len(s.node.callsOf("switch")) != 0 {
			t.Fatal("closure copied or switched despite the MAC gate")
		}
	})
	t.Run("node has the address", func(t *testing.T) {
		s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
		s.node.macs = append(s.node.macs, "00:16:3e:aa:bb:cc")
		writeClosure(t, s.root, testToplevel, closureSpec{linkFiles: map[string]string{"10-lan0.link": link}})
		if _, err := s.deploy(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("node has the address only as a random one: refused", func(t *testing.T) {
		s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
		s.node.randomMACs = append(s.node.randomMACs, "00:16:3e:aa:bb:cc")
		writeClosure(t, s.root, testToplevel, closureSpec{linkFiles: map[string]string{"10-lan0.link": link}})
		_, err := s.deploy()
		de := deployErr(t, err, PhasePushClosure)
		if !strings.Contains(de.Error(), "which node fedi-n1 does not have") {
			t.Fatalf("an address the kernel made up is no permanent address: %v", err)
		}
	})
	t.Run("no link files: not gated", func(t *testing.T) {
		s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
		s.node.macs = nil
		if _, err := s.deploy(); err != nil {
			t.Fatal(err)
		}
		if n := len(s.node.runsOf("sh", "-c", hardwareAddressScript)); n != 0 {
			t.Fatalf("node's addresses read %d times for an ungated closure", n)
		}
	})
	t.Run("link file without PermanentMACAddress: not gated", func(t *testing.T) {
		s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
		writeClosure(t, s.root, testToplevel, closureSpec{linkFiles: map[string]string{"99-default.link": "[Match]\nOriginalName=*\n[Link]\nNamePolicy=keep\n"}})
		if _, err := s.deploy(); err != nil {
			t.Fatal(err)
		}
	})
}

// A node evaluated once is reused, and the cache edge cases.
func TestDeployEvaluationCache(t *testing.T) {
	key := nixeval.MakeCacheKey("sha256:plan-fedi-n1", map[string]string{"source": "rev-1"})
	t.Run("seed pass result is reused", func(t *testing.T) {
		builds := 0
		dir := t.TempDir()
		for pass := 0; pass < 2; pass++ {
			s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
			s.opts.Toplevel = ""
			s.opts.Build = func(context.Context) (string, error) { builds++; return testToplevel + "\n", nil }
			s.opts.Cache = &nixeval.EvalCache{Dir: dir, StoreHas: func(p string) bool { return p == testToplevel }}
			s.opts.CacheKey = key
			res, err := s.deploy()
			if err != nil {
				t.Fatal(err)
			}
			if res.CacheHit != (pass == 1) || res.Toplevel != testToplevel {
				t.Fatalf("pass %d: cache hit %v toplevel %s", pass, res.CacheHit, res.Toplevel)
			}
		}
		if builds != 1 {
			t.Fatalf("built %d times, want once", builds)
		}
	})
	t.Run("entry the store does not hold is ignored", func(t *testing.T) {
		dir := t.TempDir()
		cache := &nixeval.EvalCache{Dir: dir, StoreHas: func(string) bool { return false }}
		must(t, cache.Store(key, "/nix/store/0000000000000000000000000000000z-gone", time.Now()))
		s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
		built := false
		s.opts.Toplevel = ""
		s.opts.Build = func(context.Context) (string, error) { built = true; return testToplevel, nil }
		s.opts.Cache, s.opts.CacheKey = cache, key
		res, err := s.deploy()
		if err != nil || !built || res.CacheHit || res.Toplevel != testToplevel {
			t.Fatalf("err=%v built=%v hit=%v toplevel=%s", err, built, res.CacheHit, res.Toplevel)
		}
		if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "does not hold") }) {
			t.Fatalf("warnings = %v", res.Warnings)
		}
	})
	t.Run("unwritable cache is not an error", func(t *testing.T) {
		blocker := filepath.Join(t.TempDir(), "file")
		must(t, os.WriteFile(blocker, nil, 0o644))
		s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
		s.opts.Toplevel = ""
		s.opts.Build = func(context.Context) (string, error) { return testToplevel, nil }
		s.opts.Cache = &nixeval.EvalCache{Dir: filepath.Join(blocker, "cache")} // a directory under a file
		s.opts.CacheKey = key
		res, err := s.deploy()
		if err != nil {
			t.Fatalf("a cache that cannot be written failed the deploy: %v", err)
		}
		if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "not written") }) {
			t.Fatalf("warnings = %v", res.Warnings)
		}
	})
	t.Run("build error names the phase", func(t *testing.T) {
		s := newScenario(t, nil)
		s.opts.Toplevel = ""
		s.opts.Build = func(context.Context) (string, error) { return "", errors.New("attribute 'foo' missing") }
		_, err := s.deploy()
		de := deployErr(t, err, PhaseBuild)
		if !strings.Contains(de.Error(), "attribute 'foo' missing") {
			t.Fatal(err)
		}
	})
}

// --- verdict-only ---

// The verdict-only pass waits for the chain, and restarts only after it is up;
// it builds, copies and switches nothing.
func TestVerdictOnlyWaitsForChainThenRestartsWantedUnits(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"app.service": {b: runs}})
	s.node.store[testToplevel] = true
	s.node.running = testToplevel
	s.node.setUnit("spire-agent.service", unitSpec{b: startsAfter, delay: 20 * time.Second})
	s.node.setUnit("vault-agent.service", unitSpec{b: startsAfter, delay: 40 * time.Second})
	fixed := unitSpec{b: runs}
	s.node.setUnit("app.service", unitSpec{b: fails, onRestart: &fixed})
	s.node.setUnit("unwanted.service", unitSpec{b: fails})
	s.addOwnedUnitFile("unwanted.service", plainService) // owned but wanted by nothing
	s.opts.SecretChain = []string{"spire-agent.service", "vault-agent.service"}
	s.opts.Build = func(context.Context) (string, error) { t.Fatal("verdict-only built"); return "", nil }
	chainUp := s.clock.now.Add(40 * time.Second)

	res, err := s.verdictOnly()
	if err == nil {
		t.Fatal("unwanted.service stays failed: a strict verdict must fail")
	}
	wantDeployErr(t, err, PhaseVerdict)
	restarts := s.node.runsOf("systemctl", "restart")
	if len(restarts) != 1 || !reflect.DeepEqual(restarts[0].argv[4:], []string{"app.service"}) {
		t.Fatalf("restarts = %+v, want only the wanted app.service", restarts)
	}
	if restarts[0].at.Before(chainUp) {
		t.Fatalf("restarted at %s, before the chain was up at %s", restarts[0].at, chainUp)
	}
	if got := failedNamesOf(res.Verdict); !reflect.DeepEqual(got, []string{"unwanted.service"}) {
		t.Fatalf("failed = %v", got)
	}
	for _, what := range []string{"copy", "switch", "finalize", "revert"} {
		if n := len(s.node.callsOf(what)); n != 0 {
			t.Fatalf("verdict-only called %s %d times", what, n)
		}
	}
	for _, p := range res.Phases {
		if skippedInVerdictOnly[p.Name] != (p.Note == skippedInVerdictOnlyNote) {
			t.Fatalf("phase %s note %q", p.Name, p.Note)
		}
	}
	if !res.Verdict.VerdictOnly || res.RunningSystem != testToplevel {
		t.Fatalf("result = %+v", res)
	}
}

// The read-only pass (a health check at every plan) judges the same failed unit the
// verdict-only pass would restart, and restarts nothing: the node is left as it was.
func TestVerdictReadOnlyRestartsNothing(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"app.service": {b: runs}})
	s.node.store[testToplevel] = true
	s.node.running = testToplevel
	fixed := unitSpec{b: runs}
	s.node.setUnit("app.service", unitSpec{b: fails, onRestart: &fixed})
	s.opts.Build = func(context.Context) (string, error) { t.Fatal("the read-only pass built"); return "", nil }

	res, err := VerdictReadOnly(context.Background(), s.node, s.opts)
	wantDeployErr(t, err, PhaseVerdict)
	if restarts := s.node.runsOf("systemctl", "restart"); len(restarts) != 0 {
		t.Fatalf("the read-only pass restarted %+v", restarts)
	}
	if got := failedNamesOf(res.Verdict); !reflect.DeepEqual(got, []string{"app.service"}) {
		t.Fatalf("failed = %v, want the unit as the node has it", got)
	}
	if res.Verdict.OK || len(res.Verdict.Restarted) != 0 {
		t.Fatalf("verdict = %+v", res.Verdict)
	}
	for _, what := range []string{"copy", "switch", "finalize", "revert"} {
		if n := len(s.node.callsOf(what)); n != 0 {
			t.Fatalf("the read-only pass called %s %d times", what, n)
		}
	}
	for _, p := range res.Phases {
		if p.Name == PhaseRestartFailedUnits && p.Note != skippedReadOnlyNote {
			t.Fatalf("phase %s note %q", p.Name, p.Note)
		}
	}
}

func TestVerdictOnlyConvergedChainPasses(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"app.service": {b: runs}})
	s.node.store[testToplevel] = true
	s.node.running = testToplevel
	s.node.setUnit("app.service", unitSpec{b: runs})
	s.node.setUnit("secrets.service", unitSpec{b: startsAfter, delay: 10 * time.Second})
	s.opts.SecretChain = []string{"secrets.service"}
	res, err := s.verdictOnly()
	if err != nil {
		t.Fatal(err)
	}
	if !res.Verdict.OK || !strings.Contains(phaseNote(res, PhaseWaitForSecretChain), "chain up") {
		t.Fatalf("verdict %+v chain note %q", res.Verdict, phaseNote(res, PhaseWaitForSecretChain))
	}
}

// A failed member, or one without progress, stops the wait
// early and is named.
func TestVerdictOnlyChainStopsEarly(t *testing.T) {
	cases := []struct {
		name     string
		member   unitSpec
		want     string
		maxSlept time.Duration
	}{
		{"failed member", unitSpec{b: fails}, "secrets.service failed", DefaultSampleInterval},
		{"no progress", unitSpec{b: stuck}, "secrets.service made no progress", DefaultNoProgress + DefaultSampleInterval},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, map[string]unitSpec{"app.service": {b: runs}})
			s.node.store[testToplevel] = true
			s.node.running = testToplevel
			s.node.setUnit("attest.service", unitSpec{b: runs})
			s.node.setUnit("secrets.service", tc.member)
			s.opts.SecretChain = []string{"attest.service", "secrets.service", "app.service"}
			res, err := s.verdictOnly()
			de := deployErr(t, err, PhaseWaitForSecretChain)
			if !strings.Contains(de.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
			if s.clock.slept >= DefaultChainWait || s.clock.slept > tc.maxSlept {
				t.Fatalf("waited %s; the wait must stop early (chain_wait %s)", s.clock.slept, DefaultChainWait)
			}
			if len(s.node.runsOf("systemctl", "restart")) != 0 || res.Verdict != nil {
				t.Fatal("the pass went on after the chain stopped")
			}
		})
	}
}

func TestVerdictOnlyChainTimesOutNamingMember(t *testing.T) {
	s := newScenario(t, nil)
	s.node.store[testToplevel] = true
	s.node.running = testToplevel
	s.node.setUnit("slow.service", unitSpec{b: loops, every: 5 * time.Second}) // progressing, never up
	s.opts.SecretChain = []string{"slow.service"}
	s.opts.Timings.ChainWait = 30 * time.Second
	_, err := s.verdictOnly()
	de := deployErr(t, err, PhaseWaitForSecretChain)
	if !strings.Contains(de.Error(), "slow.service not up after chain_wait (30s)") {
		t.Fatal(err)
	}
	if s.clock.slept > 30*time.Second+DefaultSampleInterval {
		t.Fatalf("waited %s past chain_wait", s.clock.slept)
	}
}

// A unit still looping past its budget fails the pass and is
// named with its budget; a budget delays the verdict but does not remove it.
func TestVerdictOnlyLoopBudgets(t *testing.T) {
	t.Run("past an override budget fails", func(t *testing.T) {
		s := loopScenario(t, unitSpec{b: loops, every: 2 * time.Second}, "")
		s.opts.LoopBudgets = map[string]int{"crashy.service": 2}
		res, err := s.verdictOnly()
		de := deployErr(t, err, PhaseVerdict)
		if !strings.Contains(de.Error(), "crashy.service still loops past its loop budget") || !strings.Contains(de.Error(), "budget 2") {
			t.Fatal(err)
		}
		if l := res.Verdict.RestartLoops; len(l) != 1 || !l[0].PastBudget || l[0].Budget != 2 {
			t.Fatalf("loops = %+v", l)
		}
	})
	t.Run("unit file budget delays the verdict until the loop stops", func(t *testing.T) {
		s := loopScenario(t, unitSpec{b: loops, every: 5 * time.Second, stopAfter: 4}, "[Service]\nX-LoopBudget=6\n")
		res, err := s.verdictOnly()
		if err != nil {
			t.Fatalf("a loop that stopped within its budget failed the pass: %v", err)
		}
		l := res.Verdict.RestartLoops
		if len(l) != 1 || l[0].Budget != 6 || l[0].PastBudget || l[0].StillLooping || l[0].NRestarts != 4 {
			t.Fatalf("loops = %+v (the loop must still be named)", l)
		}
		if !strings.Contains(phaseNote(res, PhaseWatch), "within their budget") {
			t.Fatalf("watch was not extended: %q", phaseNote(res, PhaseWatch))
		}
	})
	t.Run("budget in [Unit] is read", func(t *testing.T) {
		s := loopScenario(t, unitSpec{b: loops, every: 2 * time.Second}, "[Unit]\nX-LoopBudget=3\n")
		_, err := s.verdictOnly()
		if err == nil || !strings.Contains(err.Error(), "budget 3") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("budget never removes the verdict", func(t *testing.T) {
		s := loopScenario(t, unitSpec{b: loops, every: 30 * time.Second}, "[Service]\nX-LoopBudget=1000\n")
		s.opts.Timings.ChainWait = time.Minute
		_, err := s.verdictOnly()
		de := deployErr(t, err, PhaseVerdict)
		if !strings.Contains(de.Error(), "crashy.service still loops") {
			t.Fatal(err)
		}
	})
	t.Run("deploy pass names the loop but does not fail", func(t *testing.T) {
		s := newScenario(t, map[string]unitSpec{"crashy.service": {b: loops, every: 2 * time.Second}})
		s.opts.LoopBudgets = map[string]int{"crashy.service": 1}
		res, err := s.deploy()
		if err != nil {
			t.Fatal(err)
		}
		if l := res.Verdict.RestartLoops; len(l) != 1 || !l[0].PastBudget {
			t.Fatalf("loops = %+v", l)
		}
	})
}

func loopScenario(t *testing.T, spec unitSpec, unitFile string) *scenario {
	s := newScenario(t, nil)
	s.node.store[testToplevel] = true
	s.node.running = testToplevel
	s.addOwnedUnitFile("crashy.service", plainService+unitFile)
	s.node.setUnit("crashy.service", spec)
	return s
}

// Edge case: a node the deployer cannot reach gets a few samples in the chain wait,
// then the verdict reports it unreachable.
func TestVerdictOnlyUnreachableNode(t *testing.T) {
	for _, chain := range [][]string{{"secrets.service"}, nil} {
		s := newScenario(t, nil)
		s.node.unreachable = true
		s.opts.SecretChain = chain
		s.opts.Timings.NodeWait = 10 * time.Second
		res, err := s.verdictOnly()
		de := deployErr(t, err, PhaseWaitForSecretChain)
		if !strings.Contains(de.Error(), "unreachable") || res.Verdict == nil || !res.Verdict.Unreachable || res.Verdict.Samples != unreachableSampleLimit {
			t.Fatalf("chain %v: err=%v verdict=%+v", chain, err, res.Verdict)
		}
		if !strings.Contains(res.Report, "UNREACHABLE") {
			t.Fatalf("report:\n%s", res.Report)
		}
	}
}

func TestVerdictOnlyUsesRunningSystemWhenNoToplevel(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"app.service": {b: runs}})
	s.node.store[testToplevel] = true
	s.node.running = testToplevel
	s.node.setUnit("app.service", unitSpec{b: runs})
	s.opts.Toplevel = ""
	res, err := s.verdictOnly()
	if err != nil {
		t.Fatal(err)
	}
	if res.Toplevel != testToplevel {
		t.Fatalf("toplevel = %s", res.Toplevel)
	}
}

func TestTimingsDefaults(t *testing.T) {
	got := Timings{Settle: time.Second}.WithDefaults()
	want := Timings{NodeWait: 2 * time.Minute, SwitchTimeout: 10 * time.Minute, Settle: time.Second, Watch: 10 * time.Second,
		SampleInterval: 2 * time.Second, StaleJob: time.Minute, ChainWait: 5 * time.Minute, NoProgress: time.Minute,
		ConfirmTimeout: 30 * time.Second, LockWait: 2 * time.Minute}
	if got != want {
		t.Fatalf("WithDefaults = %+v", got)
	}
}

func TestDeployErrorMessage(t *testing.T) {
	err := &DeployError{Node: "web01", Phase: PhaseSwitch, Err: errors.New("boom"), Hint: "apply again"}
	if got := err.Error(); got != "node web01: phase switch: boom. apply again" {
		t.Fatal(got)
	}
}

// In a deploy the chain is waited for before the switch, but a chain that does not
// come up (it may wait for an attestation that comes later) is only a warning, and
// members the node does not have yet are not waited for.
func TestDeployChainProblemsAreWarnings(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.setUnit("secrets.service", unitSpec{b: stuck})
	s.opts.SecretChain = []string{"not-yet.service", "secrets.service"}
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("a chain problem failed the deploy: %v", err)
	}
	if !slices.ContainsFunc(res.Warnings, func(w string) bool {
		return strings.Contains(w, "secrets.service made no progress") && strings.Contains(w, "not an error")
	}) {
		t.Fatalf("warnings = %v", res.Warnings)
	}
	if len(s.node.callsOf("switch")) != 1 {
		t.Fatal("the deploy did not switch")
	}
	switchedAt := s.node.callsOf("switch")[0].at
	chainSamples := 0
	for _, c := range s.node.runsOf("systemctl", "show") {
		if slices.Contains(c.argv, "secrets.service") && c.at.Before(switchedAt) {
			chainSamples++
		}
	}
	if chainSamples < 2 {
		t.Fatalf("%d chain samples before the switch", chainSamples)
	}
}

func TestVerdictOnlyChainMemberNotLoaded(t *testing.T) {
	s := newScenario(t, nil)
	s.node.store[testToplevel] = true
	s.node.running = testToplevel
	s.opts.SecretChain = []string{"absent.service"}
	_, err := s.verdictOnly()
	de := deployErr(t, err, PhaseWaitForSecretChain)
	if !strings.Contains(de.Error(), "absent.service is not loaded") {
		t.Fatal(err)
	}
}

func TestVerdictOnlyRejectsInvalidChainMember(t *testing.T) {
	s := newScenario(t, nil)
	s.opts.SecretChain = []string{"vault; reboot"}
	_, err := s.verdictOnly()
	de := deployErr(t, err, PhaseWaitForSecretChain)
	if !strings.Contains(de.Error(), "not a valid unit name") {
		t.Fatal(err)
	}
	for _, c := range s.node.callsOf("run") {
		if slices.Contains(c.argv, "vault; reboot") {
			t.Fatal("an invalid chain member reached the node")
		}
	}
}

func TestDeployHonoursCancelledContext(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := Deploy(ctx, s.node, s.opts)
	de := deployErr(t, err, PhaseBuild)
	// An interrupt is not a time limit (issue 39, item 9).
	if !errors.Is(err, context.Canceled) || strings.Contains(de.Hint, "time limit") || !strings.Contains(de.Hint, "interrupted") {
		t.Fatalf("err = %v", err)
	}
	if len(res.Phases) != 1 || len(s.node.calls) != 0 {
		t.Fatalf("phases %v calls %v after cancel", res.Phases, s.node.calls)
	}
}

// A refused host key or credentials cannot be mended by waiting: the body fails at
// once, in the wait-for-node phase, after a single attempt, and touches nothing.
func TestDeployRefusedNodeFailsAtOnce(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.refuses = true
	_, err := s.deploy()
	wantDeployErr(t, err, PhaseWaitForNode)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "retrying will not help") {
		t.Fatalf("error = %v", err)
	}
	if n := len(s.node.callsOf("reach")); n != 1 {
		t.Fatalf("%d reach attempts, want 1", n)
	}
	if n := len(s.node.callsOf("copy")); n != 0 {
		t.Fatalf("a refused node was copied to")
	}
}

// Verdict-only on a node whose bus is severed: the node answers, so the verdict is
// unread, never unreachable.
func TestVerdictOnlySeveredBusIsUnreadNotUnreachable(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.running = testToplevel
	s.node.busSevered = true
	res, err := VerdictOnly(context.Background(), s.node, s.opts)
	if res == nil || res.Verdict == nil {
		t.Fatalf("no verdict: %v", err)
	}
	v := res.Verdict
	if v.Unreachable {
		t.Fatalf("a node that answers was judged unreachable: %v", err)
	}
	if len(v.Unread) == 0 || v.Failed != nil {
		t.Fatalf("unit sets must be unread (nil) with reasons: %+v", v)
	}
	if err == nil {
		t.Fatal("strict verdict-only with unread units must fail")
	}
}

// The verdict pass judges the toplevel it is given: a node that runs another system is
// said so, a failure in strict mode and a warning in lenient mode.
func TestVerdictOnlyGivenToplevelNodeRunsAnother(t *testing.T) {
	for _, strict := range []bool{true, false} {
		s := newScenario(t, map[string]unitSpec{"app.service": {b: runs}})
		other := "/nix/store/" + strings.Repeat("b", 32) + "-nixos-system-other"
		s.node.store[testToplevel] = true
		s.node.store[other] = true
		s.node.running = other
		s.node.setUnit("app.service", unitSpec{b: runs})
		s.opts.Toplevel = testToplevel
		s.opts.Strict = strict
		res, err := s.verdictOnly()
		if strict {
			de := deployErr(t, err, PhaseSnapshotUnitStates)
			if !strings.Contains(de.Error(), "runs "+other+", not the toplevel "+testToplevel) {
				t.Fatalf("strict: %v", err)
			}
			continue
		}
		if err != nil || res.Toplevel != testToplevel || !strings.Contains(strings.Join(res.Warnings, "\n"), "not the toplevel "+testToplevel) {
			t.Fatalf("lenient: err=%v toplevel=%s warnings=%q", err, res.Toplevel, res.Warnings)
		}
	}
}

// A run waits for another holder's lock up to lock_wait, then fails naming the holder
// and touching nothing; a run whose lock is taken from it stops before the switch.
func TestDeployWaitsForNodeLock(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.lockToken = "someone-else"
	s.opts.Timings.LockWait = 5 * time.Second
	_, err := s.deploy()
	de := deployErr(t, err, PhaseLockNode)
	if !strings.Contains(de.Error(), "is locked by a run from host other (process 1)") || !strings.Contains(de.Error(), "lock_wait (5s)") {
		t.Fatalf("err = %v", err)
	}
	if n := len(s.node.callsOf("switch")); n != 0 {
		t.Fatalf("a locked node was switched %d times", n)
	}
	if s.node.lockToken != "someone-else" {
		t.Fatalf("the other holder's lock was replaced by %q", s.node.lockToken)
	}

	ok := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	if _, err := ok.deploy(); err != nil {
		t.Fatal(err)
	}
	// acquire, a check before the switch and before the boot entry, release.
	if ok.node.lockToken != "" || len(ok.node.lockCalls()) != 4 {
		t.Fatalf("lock left %q after %d lock calls; want released after acquire, two checks and release", ok.node.lockToken, len(ok.node.lockCalls()))
	}
}

// A run whose lock another run took while it ran fails saying another deploy took the
// node, not that its switch never activated.
func TestDeployLockTakenMidRun(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.lockTakenAtSwitch = "other-deployer"
	_, err := s.deploy()
	if !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), "took the node's lock") || strings.Contains(err.Error(), "never activated") {
		t.Fatalf("err = %v", err)
	}
	if s.node.lockToken != "other-deployer" {
		t.Fatalf("the other run's lock was released: %q", s.node.lockToken)
	}
	if n := len(s.node.callsOf("finalize")); n != 0 {
		t.Fatalf("the boot entry was written %d times by a run that lost the node", n)
	}
}
