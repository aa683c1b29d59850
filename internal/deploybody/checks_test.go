package deploybody

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// A node check that passes only after a while is retried, and its node commands ride
// in the watch samples' batches: checks add no round trip while the watch runs.
func TestNodeCheckRetriedInTheWatchBatches(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	node := &batchingNode{fakeNode: s.node}
	readyAt := s.clock.now.Add(time.Hour) // set after the switch below
	s.node.onCheck = func(argv []string) RunResult {
		if strings.Join(argv, " ") != "curl -fsS http://127.0.0.1/" {
			return RunResult{ExitCode: 127}
		}
		if s.clock.Now().Before(readyAt) {
			return RunResult{ExitCode: 7, Stderr: []byte("connection refused")}
		}
		return RunResult{Stdout: []byte("hello")}
	}
	s.opts.Timings = Timings{Settle: time.Second, Watch: 10 * time.Second, SampleInterval: 2 * time.Second}
	s.opts.Checks = []judge.NodeCheck{{Name: "http", Argv: []string{"curl", "-fsS", "http://127.0.0.1/"}, Interval: 2 * time.Second, Timeout: time.Minute}}
	readyAt = s.clock.now.Add(5 * time.Second) // the run's phases before the watch take no fake time
	res, err := Deploy(t.Context(), node, s.opts)
	if err != nil {
		t.Fatalf("deploy: %v\n%s", err, res.Report)
	}
	c := res.Verdict.Checks
	if len(c) != 1 || !c[0].OK || c[0].Attempts < 2 || c[0].Name != "http" || c[0].Kind != judge.CheckKindNode {
		t.Fatalf("checks = %+v, want http ok after retries", c)
	}
	if c[0].Output != "hello" {
		t.Fatalf("output = %q", c[0].Output)
	}
	withCheck := 0
	for _, b := range node.batches {
		for _, cmd := range b {
			if cmd[0] == "timeout" {
				withCheck++
			}
		}
	}
	if withCheck != c[0].Attempts {
		t.Fatalf("%d check attempts, %d rode in batches: every attempt during the watch must ride in a sample", c[0].Attempts, withCheck)
	}
	if !strings.Contains(res.Report, "http (node): ok after") {
		t.Fatalf("report lacks the check:\n%s", res.Report)
	}
}

// A failing check fails a strict run while every unit is fine, and names itself as
// the cause; a lenient run warns.
func TestFailedCheckFailsStrictAndWarnsLenient(t *testing.T) {
	for _, strict := range []bool{true, false} {
		s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
		s.node.onCheck = func([]string) RunResult {
			return RunResult{ExitCode: 1, Stdout: []byte("db not ready\npassword=hunter2")}
		}
		s.opts.Strict = strict
		s.opts.Timings = Timings{Settle: time.Second, Watch: 4 * time.Second, SampleInterval: 2 * time.Second}
		s.opts.Checks = []judge.NodeCheck{{Name: "db", Argv: []string{"check-db"}, Interval: 3 * time.Second, Timeout: 10 * time.Second}}
		res, err := s.deploy()
		c := res.Verdict.Checks
		if len(c) != 1 || c[0].OK || c[0].Attempts < 3 {
			t.Fatalf("checks = %+v", c)
		}
		if strings.Contains(c[0].Output, "hunter2") || strings.Contains(res.Report, "hunter2") {
			t.Fatalf("a secret was echoed: %q", c[0].Output)
		}
		reason := strings.Join(res.Verdict.Reasons, "; ")
		if !strings.Contains(reason, "check db failed") || !strings.Contains(reason, "this check is the cause") {
			t.Fatalf("reasons = %q", reason)
		}
		if strict {
			wantDeployErr(t, err, PhaseVerdict)
			continue
		}
		if err != nil {
			t.Fatalf("lenient: %v", err)
		}
		if !strings.Contains(strings.Join(res.Warnings, "\n"), "check db failed") {
			t.Fatalf("lenient run must warn: %v", res.Warnings)
		}
	}
}

// A probe from the deployer: HTTP with status and body pattern, and TCP. The server is
// a real listener on 127.0.0.1 (net/httptest); the body's clock is fake, so the
// retries do not sleep.
func TestProbesFromTheDeployer(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits++
		if hits < 3 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("fedi ok"))
	}))
	defer srv.Close()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	_ = closed.Close()

	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.opts.Strict = false
	s.opts.Timings = Timings{Settle: time.Second, Watch: 2 * time.Second, SampleInterval: 2 * time.Second}
	s.opts.Probes = []judge.Probe{
		{Name: "web", URL: srv.URL + "/health", BodyPattern: regexp.MustCompile(`fedi\s+ok`), Interval: time.Second, Timeout: 20 * time.Second},
		{Name: "port", TCP: srv.Listener.Addr().String(), Timeout: 5 * time.Second},
		{Name: "gone", TCP: closedAddr, Interval: time.Second, Timeout: 3 * time.Second},
	}
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("lenient deploy: %v", err)
	}
	got := map[string]judge.CheckResult{}
	for _, c := range res.Verdict.Checks {
		got[c.Name] = c
	}
	if w := got["web"]; !w.OK || w.Attempts != 3 || w.Kind != judge.CheckKindProbe {
		t.Fatalf("web = %+v, want ok at attempt 3", w)
	}
	if p := got["port"]; !p.OK || p.Attempts != 1 {
		t.Fatalf("port = %+v", p)
	}
	if g := got["gone"]; g.OK || g.Attempts < 2 || !strings.Contains(g.Output, "refused") {
		t.Fatalf("gone = %+v", g)
	}
	if names := judge.FailedChecks(res.Verdict); len(names) != 1 || names[0] != "gone" {
		t.Fatalf("failed checks = %v", names)
	}
}

// Whatever of a run reaches the state (the provider stores the Result's checks,
// verdict, report and warnings) holds check and probe output only masked: a node check
// that prints a JSON credential and a database URL, and a probe whose answer is an
// API's JSON token (a real listener on 127.0.0.1).
func TestCheckAndProbeSecretsNeverReachTheResult(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"starting","access_token":"probe-t0ken-9"}`))
	}))
	defer srv.Close()
	for _, strict := range []bool{true, false} {
		s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
		s.node.onCheck = func([]string) RunResult {
			return RunResult{ExitCode: 1, Stdout: []byte(`{"user":"app","password":"hunter2"}`),
				Stderr: []byte("connect postgres://app:db-s3cret@db:5432/fedi: refused")}
		}
		s.opts.Strict = strict
		s.opts.Timings = Timings{Settle: time.Second, Watch: 2 * time.Second, SampleInterval: time.Second}
		s.opts.Checks = []judge.NodeCheck{{Name: "db", Argv: []string{"check-db"}, Interval: time.Second, Timeout: 3 * time.Second}}
		s.opts.Probes = []judge.Probe{{Name: "api", URL: srv.URL + "/health", Interval: time.Second, Timeout: 3 * time.Second}}
		res, _ := s.deploy()
		all, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{"hunter2", "db-s3cret", "probe-t0ken-9"} {
			if strings.Contains(string(all), secret) {
				t.Errorf("strict=%v: the run's result holds %q:\n%s", strict, secret, all)
			}
		}
		if !strings.Contains(string(all), `password\":\"(masked)`) || !strings.Contains(string(all), "postgres://(masked)@db") {
			t.Errorf("strict=%v: the masked output does not say what was masked:\n%s", strict, all)
		}
	}
}

// The verdict-only pass runs the same checks: a check that never passes fails a strict
// pass and names itself.
func TestVerdictOnlyRunsTheChecks(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.running = testToplevel
	s.node.onCheck = func([]string) RunResult { return RunResult{ExitCode: 3, Stderr: []byte("not ready")} }
	s.opts.Timings = Timings{Settle: time.Second, Watch: 2 * time.Second, SampleInterval: time.Second}
	s.opts.Checks = []judge.NodeCheck{{Name: "ready", Argv: []string{"ready-check"}, Interval: time.Second, Timeout: 4 * time.Second}}
	res, err := s.verdictOnly()
	wantDeployErr(t, err, PhaseVerdict)
	if c := res.Verdict.Checks; len(c) != 1 || c[0].OK || c[0].Attempts < 3 || !strings.Contains(c[0].Output, "exit 3, want 0: not ready") {
		t.Fatalf("checks = %+v", res.Verdict.Checks)
	}
	if res.Changes != nil {
		t.Fatalf("a verdict-only pass changes nothing, got %+v", res.Changes)
	}
}
