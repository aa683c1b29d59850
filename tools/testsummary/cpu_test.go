package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestParseStatNameWithSpacesAndParentheses(t *testing.T) {
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime …
	line := "4242 (a (b) c) S 17 1 1 0 -1 4194560 10 0 0 0 250 50 1000 200 20 0 1 0 100 0 0"
	ppid, ticks, ok := parseStat(line)
	if !ok || ppid != 17 || ticks != 250+50+1000+200 {
		t.Fatalf("parseStat = %d, %d, %v; want 17, 1500, true", ppid, ticks, ok)
	}
}

// TestTreeCPUCountsAReapedChild: a child that burned CPU and was reaped still counts in
// the tree's figure (through its parent's cutime).
func TestTreeCPUCountsAReapedChild(t *testing.T) {
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; sleep 1`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	// The shell loops in itself; sleep is a child: read while it sleeps.
	for i := 0; i < 100 && treeCPU(cmd.Process.Pid) == 0; i++ {
		_ = exec.Command("sleep", "0.05").Run()
	}
	if got := treeCPU(cmd.Process.Pid); got <= 0 {
		t.Fatalf("treeCPU of a busy shell = %v, want more than 0", got)
	}
	if got := treeCPU(os.Getpid()); got <= 0 {
		t.Fatalf("treeCPU of this test = %v, want more than 0", got)
	}
}

// TestLabCPUKeepsWhatRemovedContainersUsed: a throwaway container removed between two
// reads keeps its last figure, and one made again under its name starts afresh.
func TestLabCPUKeepsWhatRemovedContainersUsed(t *testing.T) {
	root := t.TempDir()
	set := func(name, ns string) {
		dir := filepath.Join(root, "lxc.payload."+name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cpuacct.usage"), []byte(ns+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l := &labCPU{prefix: "lab", last: map[string]float64{}, root: root}
	set("lab-n1", "2000000000")
	set("lab-t-x", "1000000000")
	set("other-n1", "9000000000")
	if got := l.total(); got != 3 {
		t.Fatalf("total = %v, want 3 (another lab's container is not counted)", got)
	}
	os.RemoveAll(filepath.Join(root, "lxc.payload.lab-t-x"))
	set("lab-n1", "2500000000")
	if got := l.total(); got != 3.5 {
		t.Fatalf("after the throwaway's removal total = %v, want 3.5", got)
	}
	set("lab-t-x", "200000000") // made again: its count restarted
	if got := l.total(); got != 3.7 {
		t.Fatalf("after the throwaway was made again total = %v, want 3.7", got)
	}
}

// TestCPUTrackerSharesOverlapsEqually: CPU used while one test runs is its own; while
// two run side by side, each gets half; between tests, nobody's.
func TestCPUTrackerSharesOverlapsEqually(t *testing.T) {
	var proc, nodes float64
	c := &cpuTracker{readProc: func() float64 { return proc }, readNodes: func() float64 { return nodes }}
	c.init()
	proc, nodes = 5, 1 // before any test
	c.started("A")
	proc, nodes = 15, 3 // A alone: 10 and 2
	c.started("B")
	proc, nodes = 25, 7 // A and B: 5 and 2 each
	a, an := c.ended("A")
	proc = 27 // B alone: 2
	b, bn := c.ended("B")
	if a != 15 || an != 4 || b != 7 || bn != 2 {
		t.Fatalf("A = %v + %v, B = %v + %v; want 15 + 4 and 7 + 2", a, an, b, bn)
	}
	nodes = 10
	if got := c.close(); got != 10 {
		t.Fatalf("the lab's CPU over the suite = %v, want 10", got)
	}
}
