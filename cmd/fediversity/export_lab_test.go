package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// The exports from the real binary on two real lab nodes, one with a strict failed
// unit:
//  1. `deploy --junit --metrics` writes a JUnit file (valid against junit-10.xsd) and
//     a metrics file (parsed by the Prometheus parser) that name each node's outcome;
//  2. `verdict --every 2s`, run as a service would run it, rewrites both files pass
//     after pass; SIGTERM in the middle of a pass ends it with exit 0 once that pass is
//     finished and written: the files whole, no temporary file nor node lock left.
func TestLabCLIExports(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	labtest.BuildClosure(t, labtest.ClosureGood)
	labtest.BuildClosure(t, labtest.ClosureFailedUnit)
	okNode, broken := labtest.NewInstance(t, "ex-a"), labtest.NewInstance(t, "ex-b")
	dir := t.TempDir()
	closures := filepath.Join(labtest.RepoRoot(t), "lab", "closures", "default.nix")
	roster := map[string]any{
		"build":   map[string]any{"file": closures, "attribute": labtest.ClosureGood},
		"timings": map[string]string{"settle": "1s", "watch": "2s", "sample_interval": "1s"},
		"nodes": map[string]any{
			okNode.Name: map[string]any{"host": okNode.SSHHost, "port": okNode.SSHPort, "host_key": okNode.HostKey},
			broken.Name: map[string]any{"host": broken.SSHHost, "port": broken.SSHPort, "host_key": broken.HostKey,
				"build": map[string]any{"file": closures, "attribute": labtest.ClosureFailedUnit}},
		},
	}
	rosterFile := writeFileJSON(t, dir, "roster.json", roster)
	out := t.TempDir() // the exports' directory: nothing else is in it
	junit, metrics := filepath.Join(out, "verdicts.xml"), filepath.Join(out, "fediversity.prom")
	exportArgs := []string{"--roster", rosterFile, "--junit", junit, "--metrics", metrics}

	// outcome checks both files name each node's outcome, and returns when the
	// metrics file was written.
	outcome := func(t *testing.T) float64 {
		t.Helper()
		doc := readJUnit(t, junit)
		if len(doc.Suites) != 1 || len(doc.Suites[0].Cases) != 2 {
			t.Fatalf("want one suite of 2 test cases: %+v", doc)
		}
		for _, c := range doc.Suites[0].Cases {
			switch c.Name {
			case okNode.Name:
				if c.Failure != nil || c.Skipped != nil {
					t.Errorf("%s (ok) does not pass: %+v", c.Name, c)
				}
			case broken.Name:
				if c.Failure == nil || !strings.Contains(c.Failure.Message, "fedi-broken.service") || c.Failure.Text == "" {
					t.Errorf("%s does not fail naming fedi-broken.service, with its report: %+v", c.Name, c)
				}
			default:
				t.Errorf("unknown test case %q", c.Name)
			}
		}
		m := readMetrics(t, metrics)
		if ok := m["fediversity_verdict_ok"]; !equalValues(ok, map[string]float64{okNode.Name: 1, broken.Name: 0}) {
			t.Errorf("fediversity_verdict_ok %v: want %s 1, %s 0", ok, okNode.Name, broken.Name)
		}
		if n := m["fediversity_failed_units"][broken.Name]; n < 1 {
			t.Errorf("%s: fediversity_failed_units %v, want 1 or more", broken.Name, n)
		}
		last := m["fediversity_last_ok_verdict_timestamp_seconds"]
		if _, has := last[broken.Name]; has || last[okNode.Name] == 0 {
			t.Errorf("fediversity_last_ok_verdict_timestamp_seconds %v: want %s's only", last, okNode.Name)
		}
		return m["fediversity_export_timestamp_seconds"][""]
	}

	stdout, stderr, code := runCLI(t, bin, append([]string{"deploy"}, exportArgs...)...)
	if code != exitFailed {
		t.Fatalf("deploy: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitFailed, stdout, stderr)
	}
	deployed := outcome(t)
	deployedJUnit, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, append([]string{"verdict", "--every", "2s"}, exportArgs...)...)
	cmd.Env = append(os.Environ(), "SSH_PRIVATE_KEY_FILE="+labtest.KeyFile(), "SSH_AUTH_SOCK=")
	var vout, verr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &vout, &verr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// Two passes written after the deploy's: the files are rewritten, not once.
	written := map[float64]bool{deployed: true}
	for deadline := time.Now().Add(60 * time.Second); len(written) < 3; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("verdict --every 2s wrote %d passes in 60 s, want 2\nstdout:\n%s\nstderr:\n%s", len(written)-1, vout.String(), verr.String())
		}
		select {
		case err := <-exited:
			t.Fatalf("verdict --every ended on its own: %v\nstderr:\n%s", err, verr.String())
		default:
		}
		written[outcome(t)] = true
	}

	// A pass was just written (the loop above polls every 0.5 s); the next starts 2 s
	// after it and takes at least its settle and watch (3 s): 2.5 s on, SIGTERM comes
	// in the middle of a pass, which is finished and written before the command ends.
	lastWritten := readMetrics(t, metrics)["fediversity_export_timestamp_seconds"][""]
	time.Sleep(2500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	select {
	case err := <-exited:
		took := time.Since(signalled)
		if err != nil {
			t.Fatalf("verdict --every after SIGTERM: %v, want exit 0\nstderr:\n%s", err, verr.String())
		}
		before, after, _ := strings.Cut(verr.String(), "fediversity: interrupted")
		lines := strings.Split(strings.TrimSpace(before), "\n")
		if strings.Contains(lines[len(lines)-1], "done: ") && strings.Count(before, "done: ")%2 == 0 {
			t.Errorf("SIGTERM came between passes, not in the middle of one as the test means; the timings no longer hold:\n%s", before)
		}
		if strings.Count(after, "done: ok") != 1 || strings.Count(after, "done: FAILED") != 1 {
			t.Errorf("the pass in progress at SIGTERM was not finished with both verdicts:\n%s", after)
		}
		t.Logf("verdict --every ended %s after SIGTERM, in the middle of a pass", took.Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatalf("verdict --every did not end within 30 s of SIGTERM\nstderr:\n%s", verr.String())
	}
	if got := outcome(t); got <= lastWritten { // the files are whole
		t.Errorf("the pass in progress at SIGTERM was not written (export time %v, the pass before it %v)", got, lastWritten)
	}
	// The last pass ended as any does: it left no node lock behind.
	for _, n := range []labtest.Node{okNode, broken} {
		if _, err := labtest.IncusErr("exec", n.Instance, "--", "test", "-e", records.LockFile); err == nil {
			lock, _ := labtest.IncusErr("exec", n.Instance, "--", "cat", records.LockFile)
			t.Errorf("%s: the last verdict pass left its node lock %s: %s\nstderr:\n%s", n.Name, records.LockFile, lock, verr.String())
		}
	}
	if again, _ := os.ReadFile(junit); bytes.Equal(again, deployedJUnit) {
		t.Errorf("the JUnit file is the deploy's: verdict --every did not rewrite it")
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if strings.Join(names, " ") != "fediversity.prom verdicts.xml" {
		t.Errorf("the exports' directory holds %v, want only the two files (no temporary file left)", names)
	}
}
