package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDealLongestFirstToTheLeastLoaded: a 600 s test and five of 100 s in two shards
// end as near together as whole tests allow (600 | 500), where a deal by name round-robin
// puts the long one beside half of the short ones (800 | 300).
func TestDealLongestFirstToTheLeastLoaded(t *testing.T) {
	jobs := []Job{{Test: "A", Cost: 100}, {Test: "B", Cost: 100}, {Test: "Long", Cost: 600}, {Test: "C", Cost: 100}, {Test: "D", Cost: 100}, {Test: "E", Cost: 100}}
	shards := Deal(jobs, 2)
	var loads []float64
	var names []string
	for _, s := range shards {
		var l float64
		var n []string
		for _, j := range s {
			l += j.Cost
			n = append(n, j.Test)
		}
		loads = append(loads, l)
		names = append(names, strings.Join(n, ","))
	}
	if loads[0] != 600 || loads[1] != 500 || names[0] != "Long" || names[1] != "A,B,C,D,E" {
		t.Fatalf("dealt %v with loads %v, want Long alone (600) and the five others (500)", names, loads)
	}
	if got := Deal(jobs, 7); len(got) != 7 || len(got[6]) != 0 {
		t.Fatalf("more shards than jobs: want an empty last shard, got %v", got)
	}
}

// TestDealCommandUsesRecordedTimesAndADefault: the file's wall times, the default for a
// test it does not list, and every job printed once with its shard.
func TestDealCommandUsesRecordedTimesAndADefault(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "durations.txt")
	if err := os.WriteFile(file, []byte(durationsHeader+"TestAccSlow 900 100 50\nTestAccFast 10 2 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := "tofu node.test TestAccFast\ntofu node.test TestAccSlow\nterraform node.test TestAccSlow\ntofu test.test TestAccNew\n"
	var out, diag bytes.Buffer
	if err := dealCommand([]string{"-durations", file, "-shards", "2", "-default", "300"}, strings.NewReader(in), &out, &diag); err != nil {
		t.Fatal(err)
	}
	// Both 900 s runs first, one per shard; the unknown test (300 s) to the first on the
	// tie; the 10 s one to the second.
	want := "1 tofu node.test TestAccSlow\n1 tofu test.test TestAccNew\n2 terraform node.test TestAccSlow\n2 tofu node.test TestAccFast\n"
	if out.String() != want {
		t.Fatalf("deal printed:\n%s\nwant:\n%s", out.String(), want)
	}
	if !strings.Contains(diag.String(), "1 tests have no recorded time") || !strings.Contains(diag.String(), "shard 1 of 2: 2 tests, about 1200 s") {
		t.Fatalf("deal said:\n%s", diag.String())
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

// TestDealPlacesPinnedJobsAndFillsTheRest: the k8s jobs may go only to shards 3 and 4,
// the others anywhere; the pinned ones are dealt there, and the others fill shards 1 and
// 2 first and then top up 3 and 4, so that the four shards end together (400 each).
func TestDealPlacesPinnedJobsAndFillsTheRest(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "durations.txt")
	if err := os.WriteFile(file, []byte(durationsHeader+"TestAccK8sA 300 1 1\nTestAccK8sB 300 1 1\nTestAccNodeA 400 1 1\nTestAccNodeB 400 1 1\nTestAccNodeC 100 1 1\nTestAccNodeD 100 1 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := "tofu node.test TestAccNodeA\ntofu node.test TestAccNodeB\ntofu node.test TestAccNodeC\ntofu node.test TestAccNodeD\ntofu k8s.test TestAccK8sA\ntofu k8s.test TestAccK8sB\n"
	var out, diag bytes.Buffer
	if err := dealCommand([]string{"-durations", file, "-shards", "4", "-place", "^TestAccK8s=3-4"}, strings.NewReader(in), &out, &diag); err != nil {
		t.Fatal(err)
	}
	want := "1 tofu node.test TestAccNodeA\n2 tofu node.test TestAccNodeB\n3 tofu k8s.test TestAccK8sA\n3 tofu node.test TestAccNodeC\n4 tofu k8s.test TestAccK8sB\n4 tofu node.test TestAccNodeD\n"
	if out.String() != want {
		t.Fatalf("deal printed:\n%s\nwant:\n%s", out.String(), want)
	}
	// Pinned both ways (a cold machine): the nodes jobs never go to the k8s shards.
	out.Reset()
	if err := dealCommand([]string{"-durations", file, "-shards", "4", "-place", "^TestAccK8s=3-4", "-place", ".=1,2"}, strings.NewReader(in), &out, &diag); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.Contains(line, "TestAccNode") != (line[0] == '1' || line[0] == '2') {
			t.Fatalf("a job outside its shards: %q in\n%s", line, out.String())
		}
	}
	if err := dealCommand([]string{"-durations", file, "-shards", "2", "-place", "^TestAccK8s=3"}, strings.NewReader(in), &out, &diag); err == nil || !strings.Contains(err.Error(), "shard 3 of 2") {
		t.Fatalf("a placement beyond -shards: got %v, want an error naming it", err)
	}
}
