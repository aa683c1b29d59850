// Command testsummary runs the test suites of `make test` and says at the end what they
// proved: per suite the tests passed, failed and skipped, the wall time, and every
// skipped test with the reason it gave.
//
//	testsummary run -suite NAME -record DIR [-v] -- go test -json …
//	testsummary report DIR
//
// `run` starts the command, reads its `go test -json` events and prints what plain
// `go test` would print (package lines, and the whole output of every failed test; with
// -v every line), then records the suite's counts in DIR. It exits non-zero when a test
// failed or the command did. `report` prints the table of every suite recorded in DIR,
// in the order they ran, and a last line "N passed, N failed, N skipped"; it exits
// non-zero when any suite failed. A new suite is one more `run` with its own name.
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
		if len(os.Args) != 3 {
			usage()
		}
		code, err = reportCommand(os.Args[2], os.Stdout)
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
	fmt.Fprintln(os.Stderr, "usage: testsummary run -suite NAME -record DIR [-v] -- CMD [ARG…]\n       testsummary report DIR")
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
	result := Read(stdout, out, *verbose)
	waitErr := cmd.Wait()
	result.Suite = *suite
	result.Start = start
	result.Wall = time.Since(start)
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
	fmt.Fprintf(out, "--- %s: %s\n", result.Suite, result.Counts())
	if result.Failed > 0 {
		return 1, nil
	}
	return 0, nil
}

func reportCommand(dir string, out io.Writer) (int, error) {
	suites, err := Load(dir)
	if err != nil {
		return 0, err
	}
	total := Report(suites, out)
	if total.Failed > 0 {
		return 1, nil
	}
	return 0, nil
}
