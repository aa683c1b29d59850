package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fixtures in testdata are real `go test -json` output of a throwaway package: one
// test passes, one fails, one skips, one has a passing and a skipped subtest
// (mixed.json); and a test file that does not compile (build-failed.json).

func readFixture(t *testing.T, name string, verbose bool) (Suite, string) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	return Read(f, &out, verbose, nil), out.String()
}

func TestReadCountsEveryOutcome(t *testing.T) {
	s, out := readFixture(t, "mixed.json", false)
	if s.Passed != 3 || s.Failed != 1 || s.Skipped != 2 {
		t.Errorf("counts = %s, want 3 passed (two tests, one subtest), 1 failed, 2 skipped", s.Counts())
	}
	if want := []string{"example.test/tp.TestFails"}; !reflect.DeepEqual(s.Failures, want) {
		t.Errorf("failures = %q, want %q", s.Failures, want)
	}
	wantSkips := []Skip{
		{Test: "example.test/tp.TestSkips", Reason: "sshd not found on PATH"},
		{Test: "example.test/tp.TestParent/skipped", Reason: "needs root"},
	}
	if !reflect.DeepEqual(s.Skips, wantSkips) {
		t.Errorf("skips = %+v, want %+v", s.Skips, wantSkips)
	}
	// What plain `go test` prints: the failed test's whole output and the package
	// line, nothing of the tests that passed.
	for _, want := range []string{"tp_test.go:8: the node answered 503", "--- FAIL: TestFails", "FAIL\texample.test/tp"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "TestPasses") || strings.Contains(out, "sshd not found") {
		t.Errorf("output shows tests that did not fail:\n%s", out)
	}
	// The end of the failed test's output is kept for the report, without the framing.
	wantEnd := []string{"    tp_test.go:8: the node answered 503", "    tp_test.go:9: unit nginx.service failed on web01"}
	if got := s.FailureEnds["example.test/tp.TestFails"]; !reflect.DeepEqual(got, wantEnd) {
		t.Errorf("failure end = %q, want %q", got, wantEnd)
	}
	var report bytes.Buffer
	Report([]Suite{s}, &report)
	if !strings.Contains(report.String(), "| "+wantEnd[1]) {
		t.Errorf("the report does not repeat why the test failed:\n%s", report.String())
	}
}

func TestReadVerbosePrintsEveryLine(t *testing.T) {
	_, out := readFixture(t, "mixed.json", true)
	for _, want := range []string{"=== RUN   TestPasses", "tp_test.go:13: sshd not found on PATH", "--- FAIL: TestFails"} {
		if !strings.Contains(out, want) {
			t.Errorf("verbose output lacks %q", want)
		}
	}
}

func TestReadBuildFailureIsAFailure(t *testing.T) {
	s, out := readFixture(t, "build-failed.json", false)
	if s.Failed != 1 || s.Passed != 0 {
		t.Errorf("counts = %s, want the package that did not build as the one failure", s.Counts())
	}
	if want := []string{"example.test/tp/broken (build failed)"}; !reflect.DeepEqual(s.Failures, want) {
		t.Errorf("failures = %q, want %q", s.Failures, want)
	}
	if !strings.Contains(out, "undefined: undefined") {
		t.Errorf("the compiler's message is not shown:\n%s", out)
	}
}

func TestReportAddsUpSuitesAndEndsWithTotals(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	for _, s := range []Suite{
		{Suite: "unit", Start: t0, Wall: 4 * time.Minute, Passed: 10, Skipped: 1, Skips: []Skip{{Test: "p.TestA", Reason: "needs root"}}},
		{Suite: "acceptance", Start: t0.Add(time.Minute), Wall: 10 * time.Minute, Passed: 4, Failed: 1, Failures: []string{"p.TestB"}},
	} {
		if err := s.Save(dir); err != nil {
			t.Fatal(err)
		}
	}
	suites, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(suites) != 2 || suites[0].Suite != "unit" || suites[1].Suite != "acceptance" {
		t.Fatalf("suites loaded out of the order they ran: %+v", suites)
	}
	var out bytes.Buffer
	total := Report(suites, &out)
	if total.Passed != 14 || total.Failed != 1 || total.Skipped != 1 {
		t.Errorf("total = %s", total.Counts())
	}
	// The two ran side by side from 13:00 to 13:11: the run took 11 minutes, not 14.
	if total.Wall != 11*time.Minute {
		t.Errorf("total wall = %s, want 11m0s (first start to last end)", total.Wall)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; last != "14 passed, 1 failed, 1 skipped" {
		t.Errorf("last line = %q", last)
	}
	for _, want := range []string{"needs root (1):", "p.TestA", "failed in acceptance:", "p.TestB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// CI may show only the end of the output: the failures come after the skips, just
	// above the totals.
	if f, k := strings.Index(out.String(), "failed in acceptance:"), strings.Index(out.String(), "skipped in unit:"); f < k {
		t.Errorf("the failures come before the skips:\n%s", out.String())
	}
}

// TestSuitesSavedSideBySideAreAllKept: suites that end at the same moment each keep
// their record, and two suites of one run with the same name are refused.
func TestSuitesSavedSideBySideAreAllKept(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- Suite{Suite: fmt.Sprintf("suite %d", i), Start: start}.Save(dir)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	suites, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(suites) != 8 {
		t.Fatalf("loaded %d suites, want 8", len(suites))
	}
	if err := (Suite{Suite: "suite 3"}).Save(dir); err == nil {
		t.Error("a second suite named \"suite 3\" was saved over the first")
	}
}

// TestRunFailsWhenTheCommandFails: a suite whose command exits non-zero fails even when
// no test event said so (a crash before any test, a go vet failure inside go test).
func TestRunFailsWhenTheCommandFails(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal("sh is not on PATH: ", err)
	}
	dir := t.TempDir()
	var out bytes.Buffer
	code, err := runCommand([]string{"-suite", "crash", "-record", dir, "--", sh, "-c", "echo not json; exit 3"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	suites, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if suites[0].Failed != 1 || !strings.Contains(suites[0].Failures[0], "exit status 3") {
		t.Errorf("recorded %+v, want one failure naming the exit status", suites[0])
	}
	if !strings.Contains(out.String(), "not json") {
		t.Errorf("a line that is not JSON was not passed through: %q", out.String())
	}
	// A suite that never ran a test (its lab part could not be brought up) says why in
	// the report: the lines its command printed.
	var report bytes.Buffer
	Report(suites, &report)
	if !strings.Contains(report.String(), "| not json") {
		t.Errorf("the report does not repeat what the failed command printed:\n%s", report.String())
	}
}

// The slowest top-level tests are kept, slowest first, so a suite's log says where its
// time went; subtests count in their parent's time only. The stream is written here, as
// the fixtures' tests all ran in no time.
func TestReadKeepsTheSlowestTests(t *testing.T) {
	var in strings.Builder
	for i := 1; i <= slowestKept+2; i++ {
		fmt.Fprintf(&in, `{"Action":"pass","Package":"example.test/tp","Test":"Test%02d","Elapsed":%d}`+"\n", i, i)
	}
	in.WriteString(`{"Action":"pass","Package":"example.test/tp","Test":"Test01/sub","Elapsed":999}` + "\n")
	in.WriteString(`{"Action":"fail","Package":"example.test/tp","Test":"TestFailsSlowly","Elapsed":500}` + "\n")
	s := Read(strings.NewReader(in.String()), io.Discard, false, nil)
	if len(s.Slowest) != slowestKept {
		t.Fatalf("kept %d tests, want %d: %+v", len(s.Slowest), slowestKept, s.Slowest)
	}
	if s.Slowest[0].Test != "example.test/tp.TestFailsSlowly" || s.Slowest[0].Elapsed != 500*time.Second {
		t.Errorf("slowest = %+v, want the failed test at 500s (failures count too)", s.Slowest[0])
	}
	if s.Slowest[1].Test != "example.test/tp.Test14" || s.Slowest[len(s.Slowest)-1].Test != "example.test/tp.Test04" {
		t.Errorf("slowest = %+v, want Test14 down to Test04", s.Slowest)
	}
	for _, x := range s.Slowest {
		if strings.HasSuffix(x.Test, "/sub") {
			t.Errorf("a subtest is kept: %+v", x)
		}
	}
}

// A test whose subtests are parallel: go test reports the parent's Elapsed without them
// (its clock stops when its function returns), which dealt the longest interrupt test
// as the cheapest job. Its wall time is from its run event to its end event.
func TestParentOfParallelSubtestsIsTimedToItsEnd(t *testing.T) {
	in := `{"Time":"2026-12-06T05:00:00Z","Action":"run","Package":"p","Test":"TestParent"}
{"Time":"2026-12-06T05:00:00.5Z","Action":"run","Package":"p","Test":"TestParent/a"}
{"Time":"2026-12-06T05:01:40Z","Action":"pass","Package":"p","Test":"TestParent/a","Elapsed":99.4}
{"Time":"2026-12-06T05:01:40.1Z","Action":"pass","Package":"p","Test":"TestParent","Elapsed":0.6}
{"Time":"2026-12-06T05:01:41Z","Action":"run","Package":"p","Test":"TestSerial"}
{"Time":"2026-12-06T05:01:43Z","Action":"pass","Package":"p","Test":"TestSerial","Elapsed":2.5}
`
	s := Read(strings.NewReader(in), io.Discard, false, nil)
	got := map[string]time.Duration{}
	for _, tt := range s.Tests {
		got[tt.Test] = tt.Elapsed
	}
	if got["p.TestParent"].Round(time.Second) != 100*time.Second {
		t.Errorf("TestParent timed %s, want 1m40s (its run to its end, its parallel subtest included): %v", got["p.TestParent"], got)
	}
	// A test's own Elapsed counts when it is the longer (the events' times are rounded).
	if got["p.TestSerial"] != 2500*time.Millisecond {
		t.Errorf("TestSerial timed %s, want its Elapsed 2.5s: %v", got["p.TestSerial"], got)
	}
}
