package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json). Compiler messages come as
// build-output events.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on a test's pass, fail and skip events
	// Time is when the event was written. A test whose subtests are parallel reports an
	// Elapsed that ends before they run (the testing package stops its clock when the
	// test's function returns), so its wall time is taken from its run and end events.
	Time        time.Time
	FailedBuild string // set on a package's fail event when its test binary did not build
}

// Suite is what one suite proved. It is saved as JSON so `report` can add up the suites
// of a run after they ran, each in its own process.
type Suite struct {
	Suite    string
	Binary   string    // the acceptance suites' Terraform or OpenTofu; "" for the others
	Start    time.Time // when the suite's command started: suites may run side by side
	Wall     time.Duration
	CPU      float64 // core-seconds of the suite's processes (cpu.go)
	NodesCPU float64 // core-seconds of its lab's containers
	Passed   int
	Failed   int
	Skipped  int
	Skips    []Skip   // every skipped test, with its reason
	Failures []string // every failed test (package/Test), and packages that failed outside a test
	// FailureEnds holds, per entry of Failures, the last lines its test (or the
	// command) printed: the report repeats them, so that the end of a run's output
	// says why it failed even when the whole logs above are cut off.
	FailureEnds map[string][]string `json:",omitempty"`
	Slowest     []Timed             // the suite's slowest top-level tests, slowest first (at most slowestKept)
	Tests       []Timed             `json:",omitempty"` // every top-level test that passed or failed, with its CPU
	ExitError   string              `json:",omitempty"`
	// Loose holds the last lines the command printed that were not go test events (a
	// suite whose lab part could not be brought up prints only such lines); run names
	// them under the command's failure, so they are not saved with the suite.
	Loose []string `json:"-"`
}

// Skip is one skipped test and the reason it printed (its t.Skip message).
type Skip struct {
	Test   string // package/Test, the package relative to the module when it can be
	Reason string
}

// Timed is one top-level test, how long it ran and the CPU it used (core-seconds: its
// processes', and its lab's containers').
type Timed struct {
	Test     string
	Elapsed  time.Duration
	CPU      float64 `json:",omitempty"`
	NodesCPU float64 `json:",omitempty"`
	Passed   bool    `json:",omitempty"`
}

// slowestKept is how many of a suite's slowest tests are kept: enough to say where a
// suite's time goes when CI's time grows, few enough to read.
const slowestKept = 12

// Counts is the suite's line in the log, in the same words as the last line of the report.
func (s Suite) Counts() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", s.Passed, s.Failed, s.Skipped)
}

// Read consumes a `go test -json` stream. It writes what plain `go test` writes (the
// package result lines and the output of each failed test) or, verbose, every output
// line, as the events arrive; lines that are not JSON are passed through untouched.
// cpu, when not nil, is told when each top-level test starts and ends.
func Read(r io.Reader, out io.Writer, verbose bool, cpu *cpuTracker) Suite {
	var s Suite
	buffered := map[string][]string{}   // output of each running test, printed if it fails
	failedIn := map[string]bool{}       // packages with at least one failed test
	var loose []string                  // the last lines that were not go test events
	startedAt := map[string]time.Time{} // each running top-level test's run event
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	for scanner.Scan() {
		line := scanner.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(out, "%s\n", line)
			if loose = append(loose, string(line)); len(loose) > failureEndLines {
				loose = loose[1:]
			}
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "run":
			if e.Test != "" && !strings.Contains(e.Test, "/") {
				cpu.started(key)
				startedAt[key] = e.Time
			}
		case "output":
			switch {
			case verbose:
				fmt.Fprint(out, e.Output)
			case e.Test != "":
				buffered[key] = append(buffered[key], e.Output)
			case !quietPackageLine(e.Output):
				fmt.Fprint(out, e.Output)
			}
		case "build-output":
			fmt.Fprint(out, e.Output)
		case "pass":
			if e.Test != "" {
				s.Passed++
				s.timed(e, startedAt[key], cpu, key, true)
			}
			delete(buffered, key)
		case "skip":
			if e.Test != "" {
				if !strings.Contains(e.Test, "/") {
					cpu.ended(key)
				}
				s.Skipped++
				s.Skips = append(s.Skips, Skip{Test: name(e), Reason: skipReason(buffered[key])})
			}
			delete(buffered, key)
		case "fail":
			if e.Test != "" {
				failure := name(e)
				s.Failed++
				s.Failures = append(s.Failures, failure)
				s.failureEnd(failure, buffered[key])
				s.timed(e, startedAt[key], cpu, key, false)
				failedIn[e.Package] = true
				if !verbose {
					for _, o := range buffered[key] {
						fmt.Fprint(out, o)
					}
				}
			} else if e.FailedBuild != "" {
				s.Failed++
				s.Failures = append(s.Failures, shortPackage(e.Package)+" (build failed)")
			} else if !failedIn[e.Package] {
				// The package failed with no failed test: TestMain, init, a panic
				// outside a test, a timeout.
				failure := shortPackage(e.Package) + " (package failed outside a test)"
				s.Failed++
				s.Failures = append(s.Failures, failure)
				s.failureEnd(failure, buffered[key])
			}
			delete(buffered, key)
		}
	}
	if err := scanner.Err(); err != nil {
		s.Failed++
		s.Failures = append(s.Failures, "reading go test output: "+err.Error())
	}
	s.Loose = lastLines(loose, failureEndLines)
	return s
}

// failureEndLines is how many of a failure's last lines the report repeats.
const failureEndLines = 6

// failureEnd keeps the last lines a failed test printed, without test2json's framing
// and each cut to a readable width.
func (s *Suite) failureEnd(failure string, output []string) {
	var lines []string
	for _, o := range output {
		t := strings.TrimRight(o, "\n")
		if strings.TrimSpace(t) == "" || strings.HasPrefix(strings.TrimSpace(t), "--- FAIL") || strings.HasPrefix(t, "=== ") {
			continue
		}
		lines = append(lines, t)
	}
	if len(lines) == 0 {
		return
	}
	if s.FailureEnds == nil {
		s.FailureEnds = map[string][]string{}
	}
	s.FailureEnds[failure] = lastLines(lines, failureEndLines)
}

// lastLines keeps the last n lines, each cut to 240 characters.
func lastLines(lines []string, n int) []string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) > 240 {
			l = l[:240] + "…"
		}
		out[i] = l
	}
	return out
}

// timed records a top-level test's time and CPU, and keeps it among the slowest when it
// is (subtests are in their parent's). Its time is the longer of its Elapsed and the
// time from its run event (started) to this end event: the two agree but for a test
// whose subtests are parallel, whose Elapsed leaves them out.
func (s *Suite) timed(e event, started time.Time, cpu *cpuTracker, key string, passed bool) {
	if strings.Contains(e.Test, "/") {
		return
	}
	elapsed := time.Duration(e.Elapsed * float64(time.Second))
	if !started.IsZero() && !e.Time.IsZero() && e.Time.Sub(started) > elapsed {
		elapsed = e.Time.Sub(started)
	}
	t := Timed{Test: name(e), Elapsed: elapsed, Passed: passed}
	t.CPU, t.NodesCPU = cpu.ended(key)
	s.Tests = append(s.Tests, t)
	s.Slowest = append(s.Slowest, t)
	sort.SliceStable(s.Slowest, func(i, j int) bool { return s.Slowest[i].Elapsed > s.Slowest[j].Elapsed })
	if len(s.Slowest) > slowestKept {
		s.Slowest = s.Slowest[:slowestKept]
	}
}

// quietPackageLine drops the package-level lines plain `go test` does not print either.
func quietPackageLine(o string) bool {
	return o == "PASS\n" || o == "testing: warning: no tests to run\n"
}

func name(e event) string { return shortPackage(e.Package) + "." + e.Test }

// shortPackage drops the module path so the table stays readable.
func shortPackage(p string) string {
	const module = "github.com/fediversity/terraform-provider-fediversity/"
	return strings.TrimPrefix(p, module)
}

// skipReason is the message a skipped test printed: its output without the framing
// lines test2json adds (=== RUN, --- SKIP …), and without the file:line prefix.
func skipReason(output []string) string {
	var lines []string
	for _, o := range output {
		t := strings.TrimSpace(o)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		if i := strings.Index(t, ": "); i > 0 && strings.Contains(t[:i], ".go:") {
			t = t[i+2:]
		}
		lines = append(lines, t)
	}
	if len(lines) == 0 {
		return "(no reason given)"
	}
	return strings.Join(lines, " / ")
}

// Save writes the suite into dir under a name of its own. Suites run side by side
// save at about the same moment, so the name comes from the suite, not from a count of
// the files already there, and the file is created exclusively.
func (s Suite) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	slug := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, s.Suite)
	f, err := os.OpenFile(filepath.Join(dir, slug+".json"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("suite %q: %w (two suites of one run share a name)", s.Suite, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Load reads the suites Save wrote into dir, in the order they started (then by name).
func Load(dir string) ([]Suite, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var suites []Suite
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var s Suite
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		suites = append(suites, s)
	}
	if len(suites) == 0 {
		return nil, fmt.Errorf("no suite was recorded in %s", dir)
	}
	sort.SliceStable(suites, func(i, j int) bool {
		if !suites[i].Start.Equal(suites[j].Start) {
			return suites[i].Start.Before(suites[j].Start)
		}
		return suites[i].Suite < suites[j].Suite
	})
	return suites, nil
}

// Report prints the table of suites (with the CPU each used beside its wall time), the
// counts per binary, the tests that cost the most CPU, the skipped tests grouped by
// their reason, the failed tests, and a last line with the totals; it returns the totals.
func Report(suites []Suite, out io.Writer) Suite {
	var total Suite
	width := len("suite")
	for _, s := range suites {
		width = max(width, len(s.Suite))
	}
	// cpu: core-seconds of the suite's processes; nodes: of its lab's containers (cpu.go).
	row := "%-*s  %7v  %7v  %7v  %9v  %7v  %7v  %8v\n"
	fmt.Fprintf(out, "\n=== test summary (cpu: core-seconds of the suite's processes; nodes: of its lab's containers)\n")
	fmt.Fprintf(out, row, width, "suite", "passed", "failed", "skipped", "wall", "cpu", "nodes", "started")
	var first, last time.Time
	for _, s := range suites {
		started := "-"
		if !s.Start.IsZero() {
			started = "+" + s.Start.Sub(suites[0].Start).Round(time.Second).String()
			if first.IsZero() || s.Start.Before(first) {
				first = s.Start
			}
			if end := s.Start.Add(s.Wall); end.After(last) {
				last = end
			}
		}
		fmt.Fprintf(out, row, width, s.Suite, s.Passed, s.Failed, s.Skipped, s.Wall.Round(time.Second), coreSeconds(s.CPU), coreSeconds(s.NodesCPU), started)
		total.Passed += s.Passed
		total.Failed += s.Failed
		total.Skipped += s.Skipped
		total.Wall += s.Wall
		total.CPU += s.CPU
		total.NodesCPU += s.NodesCPU
	}
	// Suites run side by side: the run's wall time is from the first start to the last
	// end, not the sum of the suites' times; their CPU adds up.
	if !first.IsZero() {
		total.Wall = last.Sub(first)
	}
	fmt.Fprintf(out, row, width, "total", total.Passed, total.Failed, total.Skipped, total.Wall.Round(time.Second), coreSeconds(total.CPU), coreSeconds(total.NodesCPU), "")

	byBinary(suites, out)
	costliest(suites, out, costliestShown)

	for _, s := range suites {
		if len(s.Skips) == 0 {
			continue
		}
		fmt.Fprintf(out, "\nskipped in %s:\n", s.Suite)
		byReason := map[string][]string{}
		var reasons []string
		for _, k := range s.Skips {
			if byReason[k.Reason] == nil {
				reasons = append(reasons, k.Reason)
			}
			byReason[k.Reason] = append(byReason[k.Reason], k.Test)
		}
		for _, r := range reasons {
			fmt.Fprintf(out, "  %s (%d):\n", r, len(byReason[r]))
			for _, t := range byReason[r] {
				fmt.Fprintf(out, "    %s\n", t)
			}
		}
	}
	// The failures come last, just above the totals: CI often shows only the end of the
	// output, and a long list of skips must not push them out of it.
	for _, s := range suites {
		if len(s.Failures) == 0 {
			continue
		}
		fmt.Fprintf(out, "\nfailed in %s:\n", s.Suite)
		for _, f := range s.Failures {
			fmt.Fprintf(out, "  %s\n", f)
			for _, l := range s.FailureEnds[f] {
				fmt.Fprintf(out, "      | %s\n", l)
			}
		}
	}
	fmt.Fprintf(out, "\n%s\n", total.Counts())
	return total
}

// coreSeconds prints a CPU figure in whole core-seconds.
func coreSeconds(v float64) string { return fmt.Sprintf("%.0f", v) }

// byBinary prints the counts of each binary's suites: every acceptance test runs under
// OpenTofu, those of test/terraform-compat.txt under Terraform too.
func byBinary(suites []Suite, out io.Writer) {
	counts := map[string]*Suite{}
	var order []string
	for _, s := range suites {
		b := s.Binary
		if b == "" {
			b = "no binary (unit, lab, lint)"
		}
		if counts[b] == nil {
			counts[b] = &Suite{}
			order = append(order, b)
		}
		c := counts[b]
		c.Passed += s.Passed
		c.Failed += s.Failed
		c.Skipped += s.Skipped
		c.CPU += s.CPU
		c.NodesCPU += s.NodesCPU
		for _, t := range s.Tests {
			if !strings.Contains(t.Test, "/") {
				c.Tests = append(c.Tests, t)
			}
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i] < order[j] })
	fmt.Fprintf(out, "\nby binary (tests and subtests):\n")
	for _, b := range order {
		c := counts[b]
		fmt.Fprintf(out, "  %-28s %s; %d top-level tests; cpu %s + nodes %s core-s\n", b+":", c.Counts(), len(c.Tests), coreSeconds(c.CPU), coreSeconds(c.NodesCPU))
	}
}

// costliestShown is how many of the run's costliest tests the report names.
const costliestShown = 10

// costliest prints the top-level tests that used the most CPU (their processes' and
// their lab's), each binary's run apart.
func costliest(suites []Suite, out io.Writer, n int) {
	type run struct {
		Timed
		binary string
	}
	var runs []run
	for _, s := range suites {
		for _, t := range s.Tests {
			runs = append(runs, run{t, s.Binary})
		}
	}
	if len(runs) == 0 {
		return
	}
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].CPU+runs[i].NodesCPU > runs[j].CPU+runs[j].NodesCPU })
	fmt.Fprintf(out, "\nthe %d tests that cost the most CPU (core-s: processes + nodes, wall):\n", min(n, len(runs)))
	for _, r := range runs[:min(n, len(runs))] {
		fmt.Fprintf(out, "  %6s = %5s + %5s  %8s  %s (%s)\n", coreSeconds(r.CPU+r.NodesCPU), coreSeconds(r.CPU), coreSeconds(r.NodesCPU), r.Elapsed.Round(time.Second), r.Test, r.binary)
	}
}
