package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// The durations file (test/durations.txt): each acceptance test's wall time and CPU in
// the last run that ran it, one line each, sorted by name. `report -durations` writes
// it from a run; `deal` reads the wall times to deal the tests into shards. A test is
// named without its package (acceptance test names are unique in the repository).

const durationsHeader = `# Each acceptance test's cost in the last run that ran it: its wall time and its CPU
# (core-seconds of its processes: the test binary, Terraform or OpenTofu, the plugins; and
# of its lab's containers), the longer of its Terraform and OpenTofu runs. Written by
# tools/testsummary at the end of lab/test.sh (report -durations); lab/test.sh queues
# the acceptance tests by the wall times, longest first, for its shards to take (testsummary
# order, take). A test not listed here is queued at a default cost. Commit it after a run
# that changed it.
# test                                                          wall_s   cpu_s  nodes_s
`

// Cost is one test's line.
type Cost struct {
	Wall, CPU, Nodes float64 // seconds
}

// LoadDurations reads the file; a missing file is an empty one.
func LoadDurations(path string) (map[string]Cost, error) {
	costs := map[string]Cost{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return costs, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for n := 1; scanner.Scan(); n++ {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 4 {
			return nil, fmt.Errorf("%s:%d: want \"test wall_s cpu_s nodes_s\", got %q", path, n, line)
		}
		var c Cost
		for i, p := range []*float64{&c.Wall, &c.CPU, &c.Nodes} {
			v, err := strconv.ParseFloat(fields[i+1], 64)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			*p = v
		}
		costs[fields[0]] = c
	}
	return costs, scanner.Err()
}

// UpdateDurations writes into path the cost of every acceptance test that passed in
// suites (those run under a binary), keeping the lines of the tests they did not run.
// It returns how many tests it wrote from this run.
func UpdateDurations(path string, suites []Suite) (int, error) {
	costs, err := LoadDurations(path)
	if err != nil {
		return 0, err
	}
	run := map[string]Cost{}
	for _, s := range suites {
		if s.Binary == "" {
			continue
		}
		for _, t := range s.Tests {
			if !t.Passed {
				continue // a failed test's time says little of its cost
			}
			name := t.Test[strings.LastIndexByte(t.Test, '.')+1:]
			c := run[name]
			run[name] = Cost{
				Wall:  math.Max(c.Wall, t.Elapsed.Seconds()),
				CPU:   math.Max(c.CPU, t.CPU),
				Nodes: math.Max(c.Nodes, t.NodesCPU),
			}
		}
	}
	if len(run) == 0 {
		return 0, nil
	}
	for name, c := range run {
		costs[name] = c
	}
	names := make([]string, 0, len(costs))
	for name := range costs {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(durationsHeader)
	for _, name := range names {
		c := costs[name]
		fmt.Fprintf(&b, "%-62s %7.0f %7.0f %8.0f\n", name, c.Wall, c.CPU, c.Nodes)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return 0, err
	}
	return len(run), os.Rename(tmp, path)
}

// Job is one acceptance test to run under one binary.
type Job struct {
	Line string  // "<binary> <test binary> <test>", as given
	Cost float64 // its recorded wall time, or the default
}

// LongestFirst orders the jobs by cost, the longest first; jobs of equal cost stay in
// the order given. Taken in this order by whichever shard is free, the shards end
// within the last jobs' length of each other, and those are the shortest.
func LongestFirst(jobs []Job) []Job {
	sorted := append([]Job(nil), jobs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Cost > sorted[j].Cost })
	return sorted
}

func orderCommand(args []string, in io.Reader, out, diag io.Writer) error {
	fs := newFlagSet("order")
	durations := fs.String("durations", "", "the durations file (test/durations.txt)")
	def := fs.Float64("default", 180, "the wall time, in seconds, of a test the file does not list")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *durations == "" || fs.NArg() != 0 {
		usage()
	}
	costs, err := LoadDurations(*durations)
	if err != nil {
		return err
	}
	var jobs []Job
	unknown := 0
	scanner := bufio.NewScanner(in)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return fmt.Errorf("order: want \"<binary> <test binary> <test>\", got %q", line)
		}
		c, ok := costs[fields[2]]
		if !ok {
			c.Wall = *def
			unknown++
		}
		jobs = append(jobs, Job{Line: line, Cost: c.Wall})
	}
	if err := scanner.Err(); err != nil {
		return err
	}
	total := 0.0
	for _, j := range LongestFirst(jobs) {
		fmt.Fprintln(out, j.Line)
		total += j.Cost
	}
	fmt.Fprintf(diag, "%d jobs, about %.0f s in all by their recorded wall times\n", len(jobs), total)
	if unknown > 0 {
		fmt.Fprintf(diag, "%d tests have no recorded time in %s: counted at %.0f s each\n", unknown, *durations, *def)
	}
	return nil
}
