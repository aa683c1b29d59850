// Command testsummary runs the test suites of `make test` and says at the end what they
// proved: per suite the tests passed, failed and skipped, the wall time and the CPU it
// used, and every skipped test with the reason it gave.
//
//	testsummary run -suite NAME -record DIR [-binary NAME] [-v] -- go test -json …
//	testsummary report [-durations FILE] DIR
//	testsummary order -durations FILE [-default SECONDS] <JOBS
//	testsummary take -queue FILE -binary NAME -groups "GROUP…"
//
// `run` starts the command, reads its `go test -json` events and prints what plain
// `go test` would print (package lines, and the whole output of every failed test; with
// -v every line), then records the suite's counts, its CPU and each test's (cpu.go) in
// DIR. It exits non-zero when a test failed or the command did. `report` prints the
// table of every suite recorded in DIR, in the order they ran, the counts per binary,
// the tests that cost the most CPU, and a last line "N passed, N failed, N skipped"; it
// exits non-zero when any suite failed; with -durations it writes each acceptance test's
// wall time and CPU of this run into FILE. A new suite is one more `run` with its own
// name. `order` reads jobs, one "<binary> <test binary> <test>" line each, and prints
// them longest first by their recorded wall times: the queue lab/test.sh's shards take
// their jobs from, each with `take` (queue.go) when the one before ended.
//
// It uses the standard library only, so `go run ./tools/testsummary` needs nothing the
// module does not already have.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	code := 0
	switch os.Args[1] {
	case "run":
		code, err = runCommand(os.Args[2:], os.Stdout)
	case "report":
		code, err = reportCommand(os.Args[2:], os.Stdout)
	case "order":
		err = orderCommand(os.Args[2:], os.Stdin, os.Stdout, os.Stderr)
	case "take":
		err = takeCommand(os.Args[2:], os.Stdout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testsummary run -suite NAME -record DIR [-binary NAME] [-v] -- CMD [ARG…]\n"+
		"       testsummary report [-durations FILE] DIR\n"+
		"       testsummary order -durations FILE [-default SECONDS] <JOBS\n"+
		"       testsummary take -queue FILE -binary NAME -groups \"GROUP...\"")
	os.Exit(2)
}

// runCommand runs one suite. The exit status is 1 when a test failed or the command
// exited non-zero (a build error, a vet failure inside go test, a timeout), so a
// failure can never be lost between the two.
func runCommand(args []string, out io.Writer) (int, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	suite := fs.String("suite", "", "the suite's name in the summary")
	record := fs.String("record", "", "directory that collects the suites of one run")
	verbose := fs.Bool("v", false, "print every output line, not only those of failed tests")
	binary := fs.String("binary", "", "the Terraform or OpenTofu the suite's acceptance tests run")
	if err := fs.Parse(args); err != nil {
		return 0, err
	}
	argv := fs.Args()
	if *suite == "" || *record == "" || len(argv) == 0 {
		usage()
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	cmd.Stdin = nil
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("suite %q: %w", *suite, err)
	}
	// The suite's lab is the one its environment names (lab/test.sh's lab_env).
	cpu := newCPUTracker(cmd.Process.Pid, os.Getenv("LAB_PREFIX"))
	result := Read(stdout, out, *verbose, cpu)
	waitErr := cmd.Wait()
	result.Suite = *suite
	result.Binary = *binary
	result.Start = start
	result.Wall = time.Since(start)
	result.NodesCPU = cpu.close()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		// Its command's and every descendant's reaped below it.
		result.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	if waitErr != nil {
		result.ExitError = waitErr.Error()
		if result.Failed == 0 {
			// Nothing named failed, yet the command did: say so as a failure of its own.
			failure := "the command itself: " + strings.Join(argv, " ") + ": " + waitErr.Error()
			result.Failures = append(result.Failures, failure)
			result.Failed++
			if len(result.Loose) > 0 {
				if result.FailureEnds == nil {
					result.FailureEnds = map[string][]string{}
				}
				result.FailureEnds[failure] = result.Loose
			}
		}
	}
	if err := result.Save(*record); err != nil {
		return 0, err
	}
	for _, t := range result.Slowest {
		fmt.Fprintf(out, "slow: %8s  %s\n", t.Elapsed.Round(time.Second), t.Test)
	}
	fmt.Fprintf(out, "--- %s: %s; wall %s, cpu %s + nodes %s core-s\n", result.Suite, result.Counts(), result.Wall.Round(time.Second), coreSeconds(result.CPU), coreSeconds(result.NodesCPU))
	if result.Failed > 0 {
		return 1, nil
	}
	return 0, nil
}

func reportCommand(args []string, out io.Writer) (int, error) {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	durations := fs.String("durations", "", "file of each acceptance test's wall time and CPU, updated from this run")
	if err := fs.Parse(args); err != nil {
		return 0, err
	}
	if fs.NArg() != 1 {
		usage()
	}
	suites, err := Load(fs.Arg(0))
	if err != nil {
		return 0, err
	}
	// Before the report, whose last line is the totals.
	if *durations != "" {
		n, err := UpdateDurations(*durations, suites)
		if err != nil {
			return 0, err
		}
		fmt.Fprintf(out, "\n%d acceptance tests' wall time and CPU written to %s (commit it: lab/test.sh deals the tests by it)\n", n, *durations)
	}
	total := Report(suites, out)
	if total.Failed > 0 {
		return 1, nil
	}
	return 0, nil
}

func newFlagSet(name string) *flag.FlagSet { return flag.NewFlagSet(name, flag.ContinueOnError) }
