package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOrderCommandLongestFirst: the file's wall times, the default for a test it does
// not list, equal costs in the order given, and every job printed once.
func TestOrderCommandLongestFirst(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "durations.txt")
	if err := os.WriteFile(file, []byte(durationsHeader+"TestAccSlow 900 100 50\nTestAccFast 10 2 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := "tofu node.test TestAccFast\ntofu node.test TestAccSlow\nterraform node.test TestAccSlow\ntofu test.test TestAccNew\n"
	var out, diag bytes.Buffer
	if err := orderCommand([]string{"-durations", file, "-default", "300"}, strings.NewReader(in), &out, &diag); err != nil {
		t.Fatal(err)
	}
	// Both 900 s runs first, in the order given; then the unknown test (300 s); the
	// 10 s one last.
	want := "tofu node.test TestAccSlow\nterraform node.test TestAccSlow\ntofu test.test TestAccNew\ntofu node.test TestAccFast\n"
	if out.String() != want {
		t.Fatalf("order printed:\n%s\nwant:\n%s", out.String(), want)
	}
	if !strings.Contains(diag.String(), "1 tests have no recorded time") || !strings.Contains(diag.String(), "4 jobs, about 2110 s in all") {
		t.Fatalf("order said:\n%s", diag.String())
	}
}

// TestUpdateDurationsKeepsOthersAndTakesTheLongerBinary: a run's passed acceptance tests
// replace their lines (the longer of the two binaries' runs), a failed one and the
// unit suite's tests change nothing, and the tests the run did not run keep theirs.
func TestUpdateDurationsKeepsOthersAndTakesTheLongerBinary(t *testing.T) {
	file := filepath.Join(t.TempDir(), "durations.txt")
	if err := os.WriteFile(file, []byte(durationsHeader+"TestAccKept 50 5 5\nTestAccA 1 1 1\nTestAccFailed 70 7 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	suites := []Suite{
		{Suite: "acc tofu", Binary: "OpenTofu", Tests: []Timed{
			{Test: "internal/provider/node.TestAccA", Elapsed: 100 * time.Second, CPU: 30, NodesCPU: 4, Passed: true},
			{Test: "internal/provider/node.TestAccFailed", Elapsed: 3 * time.Second, CPU: 1, Passed: false},
		}},
		{Suite: "acc terraform", Binary: "Terraform", Tests: []Timed{
			{Test: "internal/provider/node.TestAccA", Elapsed: 120 * time.Second, CPU: 20, NodesCPU: 5, Passed: true},
		}},
		{Suite: "unit", Tests: []Timed{{Test: "internal/x.TestUnit", Elapsed: time.Second, Passed: true}}},
	}
	n, err := UpdateDurations(file, suites)
	if err != nil || n != 1 {
		t.Fatalf("UpdateDurations = %d, %v; want 1 test written", n, err)
	}
	costs, err := LoadDurations(file)
	if err != nil {
		t.Fatal(err)
	}
	if c := costs["TestAccA"]; c != (Cost{Wall: 120, CPU: 30, Nodes: 5}) {
		t.Errorf("TestAccA = %+v, want the longer of the two runs: 120 s wall, 30 s cpu, 5 s nodes", c)
	}
	if c := costs["TestAccKept"]; c != (Cost{50, 5, 5}) {
		t.Errorf("a test not run lost its line: %+v", c)
	}
	if c := costs["TestAccFailed"]; c != (Cost{70, 7, 7}) {
		t.Errorf("a failed run replaced a test's cost: %+v", c)
	}
	if _, ok := costs["TestUnit"]; ok {
		t.Error("a unit test was written into the acceptance tests' durations")
	}
}
