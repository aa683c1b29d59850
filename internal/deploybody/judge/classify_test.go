package judge

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// unitAt builds a unit state for classification tables.
func unitAt(id, active, sub string, mods ...func(*UnitState)) UnitState {
	s := UnitState{ID: id, LoadState: "loaded", ActiveState: active, SubState: sub, Result: "success", ConditionResult: "yes", ConditionTimestampMono: 1}
	for _, m := range mods {
		m(&s)
	}
	return s
}

func withResult(r string) func(*UnitState)     { return func(s *UnitState) { s.Result = r } }
func withRestarts(n int) func(*UnitState)      { return func(s *UnitState) { s.NRestarts = n } }
func withInvocation(i string) func(*UnitState) { return func(s *UnitState) { s.InvocationID = i } }
func withExecStart(m uint64) func(*UnitState)  { return func(s *UnitState) { s.ExecMainStartMono = m } }
func withSpawnStatus(st int) func(*UnitState) {
	return func(s *UnitState) { s.Result, s.ExecMainCode, s.ExecMainStatus = "exit-code", 1, st }
}
func withCondition(result string, ts uint64) func(*UnitState) {
	return func(s *UnitState) { s.ConditionResult, s.ConditionTimestampMono = result, ts }
}

// samplesOf makes answered samples, one per argument, each holding the given states.
func samplesOf(failed []string, perSample ...[]UnitState) []Sample {
	if failed == nil {
		failed = []string{} // read, and empty
	}
	var out []Sample
	for i, states := range perSample {
		m := map[string]UnitState{}
		for _, s := range states {
			m[s.ID] = s
		}
		out = append(out, Sample{At: time.Unix(int64(i*2), 0), Answered: true, Units: m, Failed: failed, Jobs: []Job{}})
	}
	return out
}

func TestClassify(t *testing.T) {
	owned := map[string]bool{"web.service": true, "db.service": true, "app.service": true, "rt.service": true,
		"sock.service": true, "fb.service": true, "idle.service": true, "getty@.service": true}
	owns := func(u string) bool {
		if owned[u] {
			return true
		}
		tmpl, ok := TemplateOf(u)
		return ok && owned[tmpl]
	}
	type want struct {
		failed, setAside, loops, cycling, closure, host, skipped []string
		origins                                                  map[string]FailureOrigin
		pastBudget                                               map[string]bool
	}
	cases := []struct {
		name         string
		samples      []Sample
		failedBefore map[string]bool
		budgets      map[string]int
		verdictOnly  bool
		want         want
	}{
		{
			name:    "failed owned unit is failed and new",
			samples: samplesOf([]string{"web.service"}, []UnitState{unitAt("web.service", "failed", "failed", withResult("exit-code"))}),
			want:    want{failed: []string{"web.service"}, origins: map[string]FailureOrigin{"web.service": FailedNew}},
		},
		{
			name:         "failed before the switch is marked so",
			samples:      samplesOf([]string{"web.service"}, []UnitState{unitAt("web.service", "failed", "failed")}),
			failedBefore: map[string]bool{"web.service": true},
			want:         want{failed: []string{"web.service"}, origins: map[string]FailureOrigin{"web.service": FailedBeforeSwitch}},
		},
		{
			name:    "failed instance of an owned template is failed",
			samples: samplesOf([]string{"getty@tty1.service"}, []UnitState{unitAt("getty@tty1.service", "failed", "failed")}),
			want:    want{failed: []string{"getty@tty1.service"}, origins: map[string]FailureOrigin{"getty@tty1.service": FailedNew}},
		},
		{
			name:    "failed foreign unit is set aside",
			samples: samplesOf([]string{"foreign.service"}, []UnitState{unitAt("foreign.service", "failed", "failed")}),
			want:    want{setAside: []string{"foreign.service"}},
		},
		{
			name:    "failed foreign unit that was not shown is still set aside",
			samples: samplesOf([]string{"ghost.service"}, []UnitState{}),
			want:    want{setAside: []string{"ghost.service"}},
		},
		{
			name: "auto-restart is a loop",
			samples: samplesOf(nil,
				[]UnitState{unitAt("app.service", "activating", "auto-restart", withRestarts(1))},
				[]UnitState{unitAt("app.service", "activating", "auto-restart", withRestarts(1))}),
			want: want{loops: []string{"app.service"}, pastBudget: map[string]bool{"app.service": true}},
		},
		{
			name: "NRestarts rising is a loop, within its budget",
			samples: samplesOf(nil,
				[]UnitState{unitAt("app.service", "active", "running", withRestarts(1), withInvocation("a"))},
				[]UnitState{unitAt("app.service", "active", "running", withRestarts(2), withInvocation("b"))}),
			budgets: map[string]int{"app.service": 5},
			want:    want{loops: []string{"app.service"}, pastBudget: map[string]bool{"app.service": false}},
		},
		{
			name: "new invocation without restarts is cycling",
			samples: samplesOf(nil,
				[]UnitState{unitAt("sock.service", "active", "running", withInvocation("a"), withExecStart(10))},
				[]UnitState{unitAt("sock.service", "active", "running", withInvocation("b"), withExecStart(20))}),
			want: want{cycling: []string{"sock.service"}},
		},
		{
			name: "new main process start alone is cycling",
			samples: samplesOf(nil,
				[]UnitState{unitAt("sock.service", "active", "running", withExecStart(10))},
				[]UnitState{unitAt("sock.service", "active", "running", withExecStart(20))}),
			want: want{cycling: []string{"sock.service"}},
		},
		{
			name: "steady unit is nothing",
			samples: samplesOf(nil,
				[]UnitState{unitAt("db.service", "active", "running", withInvocation("a"), withExecStart(10))},
				[]UnitState{unitAt("db.service", "active", "running", withInvocation("a"), withExecStart(10))}),
		},
		{
			name:    "203/EXEC is a closure fault",
			samples: samplesOf([]string{"app.service"}, []UnitState{unitAt("app.service", "failed", "failed", withSpawnStatus(203))}),
			want:    want{closure: []string{"app.service"}},
		},
		{
			name:    "200/CHDIR is a closure fault",
			samples: samplesOf([]string{"app.service"}, []UnitState{unitAt("app.service", "failed", "failed", withSpawnStatus(200))}),
			want:    want{closure: []string{"app.service"}},
		},
		{
			name:    "216/GROUP is a closure fault",
			samples: samplesOf([]string{"app.service"}, []UnitState{unitAt("app.service", "failed", "failed", withSpawnStatus(216))}),
			want:    want{closure: []string{"app.service"}},
		},
		{
			name: "a never-spawned unit in an auto-restart loop is a closure fault and a loop",
			samples: samplesOf(nil,
				[]UnitState{unitAt("app.service", "activating", "auto-restart", withSpawnStatus(217), withRestarts(1))},
				[]UnitState{unitAt("app.service", "activating", "auto-restart", withSpawnStatus(217), withRestarts(2))}),
			want: want{closure: []string{"app.service"}, loops: []string{"app.service"}, pastBudget: map[string]bool{"app.service": true}},
		},
		{
			name: "host spawn statuses are host faults",
			samples: samplesOf([]string{"rt.service", "web.service", "db.service", "app.service", "sock.service"}, []UnitState{
				unitAt("rt.service", "failed", "failed", withSpawnStatus(214)),
				unitAt("web.service", "failed", "failed", withSpawnStatus(218)),
				unitAt("db.service", "failed", "failed", withSpawnStatus(219)),
				unitAt("app.service", "failed", "failed", withSpawnStatus(226)),
				unitAt("sock.service", "failed", "failed", withSpawnStatus(228)),
			}),
			want: want{host: []string{"app.service", "db.service", "rt.service", "sock.service", "web.service"}},
		},
		{
			name:    "Result=resources is a host fault",
			samples: samplesOf([]string{"rt.service"}, []UnitState{unitAt("rt.service", "failed", "failed", withResult("resources"))}),
			want:    want{host: []string{"rt.service"}},
		},
		{
			name:    "exit status 1 is a plain failure, not a spawn fault",
			samples: samplesOf([]string{"app.service"}, []UnitState{unitAt("app.service", "failed", "failed", withSpawnStatus(1))}),
			want:    want{failed: []string{"app.service"}, origins: map[string]FailureOrigin{"app.service": FailedNew}},
		},
		{
			name:    "a foreign never-spawned unit is set aside, not blamed",
			samples: samplesOf([]string{"foreign.service"}, []UnitState{unitAt("foreign.service", "failed", "failed", withSpawnStatus(203))}),
			want:    want{setAside: []string{"foreign.service"}},
		},
		{
			name:    "condition checked and false is skipped",
			samples: samplesOf(nil, []UnitState{unitAt("fb.service", "inactive", "dead", withCondition("no", 5))}),
			want:    want{skipped: []string{"fb.service"}},
		},
		{
			name:    "condition never checked is not skipped",
			samples: samplesOf(nil, []UnitState{unitAt("idle.service", "inactive", "dead", withCondition("no", 0))}),
		},
		{
			name:         "snapshot unread gives an unknown origin",
			samples:      samplesOf([]string{"web.service"}, []UnitState{unitAt("web.service", "failed", "failed")}),
			failedBefore: nil,
			want:         want{failed: []string{"web.service"}, origins: map[string]FailureOrigin{"web.service": FailedOriginUnknown}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			failedBefore := tc.failedBefore
			if failedBefore == nil && !strings.Contains(tc.name, "snapshot unread") {
				failedBefore = map[string]bool{}
			}
			v := Classify(ClassifyInput{
				Samples: tc.samples, Owns: owns, FailedBefore: failedBefore,
				Budget: func(u string) int { return tc.budgets[u] }, StaleJob: time.Minute,
				Now: time.Unix(100, 0), Strict: true, VerdictOnly: tc.verdictOnly,
			})
			check := func(what string, got, want []string) {
				t.Helper()
				if len(got) == 0 && len(want) == 0 {
					return
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			check("failed", FailedNames(v.Failed), tc.want.failed)
			check("set aside", v.SetAside, tc.want.setAside)
			check("loops", LoopNames(v.RestartLoops), tc.want.loops)
			check("cycling", v.Cycling, tc.want.cycling)
			check("closure faults", SpawnNames(v.NeverSpawnedClosure), tc.want.closure)
			check("host faults", SpawnNames(v.NeverSpawnedHost), tc.want.host)
			check("skipped", v.SkippedOnCondition, tc.want.skipped)
			for _, f := range v.Failed {
				if tc.want.origins[f.Unit] != f.Origin {
					t.Errorf("origin of %s = %q, want %q", f.Unit, f.Origin, tc.want.origins[f.Unit])
				}
			}
			for _, l := range v.RestartLoops {
				if tc.want.pastBudget[l.Unit] != l.PastBudget {
					t.Errorf("past budget of %s = %v", l.Unit, l.PastBudget)
				}
			}
			if v.Unreachable || len(v.Unread) != 0 {
				t.Errorf("unexpected unreachable/unread: %+v", v)
			}
		})
	}
}

func TestClassifyUnreadAndUnreachable(t *testing.T) {
	owns := func(string) bool { return true }
	budget := func(string) int { return 0 }
	unanswered := []Sample{{}, {}, {}}
	v := Classify(ClassifyInput{Samples: unanswered, Owns: owns, Budget: budget})
	if !v.Unreachable || v.Samples != 3 || v.Answered != 0 || v.SystemState != "unreachable" {
		t.Fatalf("unreachable verdict = %+v", v)
	}

	severed := []Sample{{Answered: true, UnitsUnread: "Failed to connect to bus", FailedUnread: "Failed to connect to bus", JobsUnread: "Failed to connect to bus"}}
	v = Classify(ClassifyInput{Samples: severed, Owns: owns, Budget: budget, FailedBefore: map[string]bool{}})
	if v.Unreachable || len(v.Unread) != 3 || v.Failed != nil || v.SetAside != nil || v.StaleJobs != nil || v.SkippedOnCondition != nil {
		t.Fatalf("unread verdict = %+v", v)
	}

	readEmpty := samplesOf([]string{}, []UnitState{})
	v = Classify(ClassifyInput{Samples: readEmpty, Owns: owns, Budget: budget, FailedBefore: map[string]bool{}})
	if v.Failed == nil || v.SetAside == nil || v.StaleJobs == nil || len(v.Unread) != 0 {
		t.Fatalf("read-but-empty lists must be empty, not nil: %+v", v)
	}

	// One answered sample is enough to read the node.
	mixed := append([]Sample{{}}, samplesOf([]string{}, []UnitState{})...)
	v = Classify(ClassifyInput{Samples: mixed, Owns: owns, Budget: budget, FailedBefore: map[string]bool{}})
	if v.Unreachable || v.Answered != 1 || v.Samples != 2 {
		t.Fatalf("partially answered verdict = %+v", v)
	}
}

func TestClassifyStaleJobs(t *testing.T) {
	s := samplesOf(nil, []UnitState{})
	s[0].Jobs = []Job{{ID: 7, Unit: "slow.service", Type: "start", State: "running"}, {ID: 8, Unit: "old.service", Type: "stop", State: "waiting"}, {ID: 9, Unit: "fresh.service", Type: "start", State: "waiting"}}
	now := time.Unix(1000, 0)
	v := Classify(ClassifyInput{
		Samples: s, Owns: func(string) bool { return true }, Budget: func(string) int { return 0 },
		JobFirstSeen: map[int]time.Time{7: now.Add(-61 * time.Second), 8: now.Add(-time.Hour), 9: now.Add(-time.Second)},
		StaleJob:     time.Minute, Now: now, FailedBefore: map[string]bool{},
	})
	if len(v.StaleJobs) != 1 || v.StaleJobs[0].Unit != "slow.service" || v.StaleJobs[0].JobID != 7 {
		t.Fatalf("stale jobs = %+v (only start jobs older than the threshold)", v.StaleJobs)
	}
}

// TestDecide is the table of the one function that fails or passes a verdict.
func TestDecide(t *testing.T) {
	failed := []FailedUnit{{Unit: "web.service", Result: "exit-code", Origin: FailedNew}}
	closureFault := []SpawnFault{{Unit: "app.service", Status: 203, Reason: "EXEC"}}
	hostFault := []SpawnFault{{Unit: "rt.service", Status: 214, Reason: "SETSCHEDULER"}}
	loopPast := []LoopingUnit{{Unit: "crashy.service", NRestarts: 5, Budget: 2, PastBudget: true, StillLooping: true}}
	loopWithin := []LoopingUnit{{Unit: "crashy.service", NRestarts: 1, Budget: 2, StillLooping: true}}
	loopStopped := []LoopingUnit{{Unit: "crashy.service", NRestarts: 5, Budget: 2, PastBudget: true}}
	cases := []struct {
		name      string
		v         Verdict
		wantFails bool
		wantIn    []string // substrings of the joined reasons
	}{
		{"clean strict", Verdict{Strict: true}, false, nil},
		{"failed strict", Verdict{Strict: true, Failed: failed}, true, []string{"web.service failed", "new in this run"}},
		{"failed lenient", Verdict{Failed: failed}, false, []string{"web.service failed"}},
		{"old failure says so", Verdict{Strict: true, Failed: []FailedUnit{{Unit: "x.service", Origin: FailedBeforeSwitch}}}, true, []string{"already failed before the switch"}},
		{"old failure in a verdict-only pass names no switch", Verdict{Strict: true, VerdictOnly: true, Failed: []FailedUnit{{Unit: "x.service", Origin: FailedBeforeSwitch}}}, true, []string{"already failed when the pass began"}},
		{"closure spawn fault strict", Verdict{Strict: true, NeverSpawnedClosure: closureFault}, true, []string{"203/EXEC", "fault of the closure"}},
		{"closure spawn fault lenient", Verdict{NeverSpawnedClosure: closureFault}, false, []string{"203/EXEC"}},
		{"host spawn fault", Verdict{Strict: true, NeverSpawnedHost: hostFault}, false, nil},
		{"set aside", Verdict{Strict: true, SetAside: []string{"foreign.service"}}, false, nil},
		{"cycling and stale", Verdict{Strict: true, Cycling: []string{"a.service"}, StaleJobs: []StaleJob{{Unit: "b.service"}}}, false, nil},
		{"skipped", Verdict{Strict: true, SkippedOnCondition: []string{"fb.service"}}, false, nil},
		{"loop in deploy", Verdict{Strict: true, RestartLoops: loopPast}, false, nil},
		{"loop past budget verdict-only", Verdict{Strict: true, VerdictOnly: true, RestartLoops: loopPast}, true, []string{"crashy.service still loops past its loop budget", "budget 2"}},
		{"loop past budget verdict-only lenient", Verdict{VerdictOnly: true, RestartLoops: loopPast}, false, []string{"crashy.service"}},
		{"loop still within budget after extension", Verdict{Strict: true, VerdictOnly: true, RestartLoops: loopWithin}, true, []string{"budget 2 not used up"}},
		{"loop stopped past budget", Verdict{Strict: true, VerdictOnly: true, RestartLoops: loopStopped}, false, nil},
		{"unread strict", Verdict{Strict: true, Unread: []string{"unit states: Failed to connect to bus"}}, true, []string{"could not read unit states"}},
		{"unread lenient", Verdict{Unread: []string{"unit states: x"}}, false, []string{"could not read"}},
		{"unreachable strict", Verdict{Strict: true, Unreachable: true, Samples: 3}, true, []string{"none of the 3 samples"}},
		{"unreachable lenient", Verdict{Unreachable: true, Samples: 3}, true, []string{"unreachable"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reasons, fails := Decide(&tc.v)
			if fails != tc.wantFails {
				t.Fatalf("fails = %v, want %v (reasons %v)", fails, tc.wantFails, reasons)
			}
			joined := strings.Join(reasons, "\n")
			for _, w := range tc.wantIn {
				if !strings.Contains(joined, w) {
					t.Fatalf("reasons %q lack %q", joined, w)
				}
			}
			if tc.wantIn == nil && len(reasons) != 0 {
				t.Fatalf("reasons = %v, want none", reasons)
			}
		})
	}
}

func TestSpawnStatusTable(t *testing.T) {
	closure := []int{200, 202, 203, 208, 209, 210, 216, 217, 221, 222, 224, 233, 235, 238, 239, 240, 241, 243, 234}
	host := []int{201, 204, 205, 206, 207, 211, 212, 213, 214, 215, 218, 219, 220, 225, 226, 227, 228, 229, 230, 231, 232, 236, 237, 242, 245}
	for _, st := range closure {
		if _, isHost, ok := spawnFault(UnitState{ID: "a.service", ExecMainCode: 1, ExecMainStatus: st}); !ok || isHost {
			t.Errorf("status %d: ok=%v host=%v, want a closure fault", st, ok, isHost)
		}
	}
	for _, st := range host {
		if _, isHost, ok := spawnFault(UnitState{ID: "a.service", ExecMainCode: 1, ExecMainStatus: st}); !ok || !isHost {
			t.Errorf("status %d: ok=%v host=%v, want a host fault", st, ok, isHost)
		}
	}
	for _, st := range []int{0, 1, 199, 246, 255} {
		if _, _, ok := spawnFault(UnitState{ID: "a.service", ExecMainCode: 1, ExecMainStatus: st}); ok {
			t.Errorf("status %d is not a spawn fault", st)
		}
	}
	// killed by signal 203 (ExecMainCode=2) is not a spawn status
	if _, _, ok := spawnFault(UnitState{ID: "a.service", ExecMainCode: 2, ExecMainStatus: 203}); ok {
		t.Error("a signal is not a spawn status")
	}
}

// The lab's systemd (252) forgets a skipped unit: only ConditionResult=no remains, as for
// a unit never started. The journal decides, and a later start overrides an old skip.
func TestSkippedOnConditionWithoutTimestamp(t *testing.T) {
	st := UnitState{ID: "fedi-skipped.service", ActiveState: "inactive", SubState: "dead", ConditionResult: "no"}
	if !MayBeForgottenSkip(st) {
		t.Fatal("a forgotten unit must be looked up in the journal")
	}
	if !SkippedOnCondition(st, true) {
		t.Error("journal says skipped: want skipped")
	}
	if SkippedOnCondition(st, false) {
		t.Error("no journal evidence: a unit never started is not skipped on a condition")
	}
	st.InvocationID = "abc"
	if SkippedOnCondition(st, true) {
		t.Error("a unit that was invoked was not skipped")
	}
	st.InvocationID, st.ConditionTimestampMono = "", 42
	if !SkippedOnCondition(st, false) || MayBeForgottenSkip(st) {
		t.Error("a checked condition with a timestamp is skipped without the journal")
	}
	for journal, want := range map[string]bool{
		"u.service was skipped because of an unmet condition check (ConditionPathExists=/x).":                                            true,
		"u.service was skipped because of an unmet condition check (ConditionPathExists=/x).\nStarting u.service...\nStarted u.service.": false,
		"Starting u.service...\nu.service: Failed with result 'exit-code'.":                                                              false,
		"-- No entries --": false,
		"":                 false,
	} {
		if got := LastStartSkipped(journal); got != want {
			t.Errorf("LastStartSkipped(%q) = %v, want %v", journal, got, want)
		}
	}
}
