package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// TestTakeByBinaryAndGroupPreference: a k8s shard takes its own group's jobs first, then
// the nodes jobs; a nodes shard never a k8s job; each binary's jobs only under it; in
// queue order (longest first); and "" once none is left for it.
func TestTakeByBinaryAndGroupPreference(t *testing.T) {
	queue := filepath.Join(t.TempDir(), "queue")
	lines := "nodes OpenTofu node.test TestAccLongNode\n" +
		"k8s OpenTofu k8s.test TestAccK8sA\n" +
		"nodes Terraform node.test TestAccLongNode\n" +
		"nodes OpenTofu node.test TestAccShortNode\n" +
		"alone OpenTofu node.test TestAccAlone\n"
	if err := os.WriteFile(queue, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	steps := []struct{ binary, groups, want string }{
		{"OpenTofu", "nodes", "nodes OpenTofu node.test TestAccLongNode"},
		{"OpenTofu", "k8s nodes", "k8s OpenTofu k8s.test TestAccK8sA"},
		{"OpenTofu", "k8s nodes", "nodes OpenTofu node.test TestAccShortNode"},
		{"OpenTofu", "k8s nodes", ""},
		{"Terraform", "k8s nodes", "nodes Terraform node.test TestAccLongNode"},
		{"Terraform", "nodes", ""},
		{"OpenTofu", "alone", "alone OpenTofu node.test TestAccAlone"},
	}
	for _, s := range steps {
		got, err := Take(queue, s.binary, strings.Fields(s.groups))
		if err != nil {
			t.Fatal(err)
		}
		if got != s.want {
			t.Fatalf("take %s from %q: got %q, want %q", s.binary, s.groups, got, s.want)
		}
	}
	if data, _ := os.ReadFile(queue); len(data) != 0 {
		t.Fatalf("the queue kept %q after every job was taken", data)
	}
}

// TestTakeEachJobOnceAcrossShards: shards taking at once (each its own open of the lock,
// as separate processes have) take every job exactly once.
func TestTakeEachJobOnceAcrossShards(t *testing.T) {
	queue := filepath.Join(t.TempDir(), "queue")
	var want []string
	var b strings.Builder
	for i := range 200 {
		line := fmt.Sprintf("nodes OpenTofu node.test TestAcc%03d", i)
		want = append(want, line)
		b.WriteString(line + "\n")
	}
	if err := os.WriteFile(queue, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				job, err := Take(queue, "OpenTofu", []string{"nodes"})
				if err != nil {
					t.Error(err)
					return
				}
				if job == "" {
					return
				}
				mu.Lock()
				got = append(got, job)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("taken %d jobs, want each of the %d once", len(got), len(want))
	}
}
