package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What a suite costs in CPU, in core-seconds, in two parts:
//
//   - its processes: the suite's command and everything below it (the test binaries,
//     Terraform or OpenTofu, the provider plugins they start, nix, ssh). The suite's total
//     is the rusage of its command when it ends (it counts every descendant reaped below
//     it); a test's part is read from /proc while the suite runs: the CPU of every live
//     process of the tree, and of the ones they reaped, at the test's start and end.
//   - its lab's containers (LAB_PREFIX-*): the nodes' own work (activation, nix-store,
//     systemd), read from their cgroups. A container removed during the suite (a
//     throwaway node) keeps the last figure read of it; reads come at every test's start
//     and end and every few seconds between.
//
// Not counted: incusd, which every lab shares, and the Kubernetes control plane and
// real node, which every k8s suite shares. Top-level tests that run side by side
// (t.Parallel) share what the process tree used while they overlapped, in equal parts.

// clockTicks is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on Linux).
const clockTicks = 100

// treeCPU is the CPU, in seconds, of root and its descendants: for each live process of
// the tree, its own time and that of the children it reaped.
func treeCPU(root int) float64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	type proc struct {
		ppid  int
		ticks int64
	}
	procs := map[int]proc{}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // it ended since the listing
		}
		ppid, ticks, ok := parseStat(string(data))
		if !ok {
			continue
		}
		procs[pid] = proc{ppid, ticks}
		children[ppid] = append(children[ppid], pid)
	}
	var total int64
	todo := []int{root}
	for len(todo) > 0 {
		pid := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if p, ok := procs[pid]; ok {
			total += p.ticks
		}
		todo = append(todo, children[pid]...)
	}
	return float64(total) / clockTicks
}

// parseStat reads the parent and utime+stime+cutime+cstime of a /proc/<pid>/stat line.
// The command name (field 2) may hold spaces and parentheses: the fields after it are
// counted from its last ')'.
func parseStat(s string) (ppid int, ticks int64, ok bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	// After the name: state(3) ppid(4) … utime(14) stime(15) cutime(16) cstime(17).
	if len(f) < 15 {
		return 0, 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, false
	}
	for _, field := range f[11:15] {
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		ticks += n
	}
	return ppid, ticks, true
}

// labCPU follows the CPU of one lab's containers (cgroup v1's cpuacct or v2's cpu.stat
// of lxc.payload.<prefix>-*), keeping what removed containers had used.
type labCPU struct {
	prefix  string
	root    string             // where the cgroups are; "" for /sys/fs/cgroup (v1's cpuacct, then v2)
	last    map[string]float64 // per container, the last figure read
	retired float64            // what the containers gone since used
}

func newLabCPU(prefix string) *labCPU { return &labCPU{prefix: prefix, last: map[string]float64{}} }

// total is the CPU, in seconds, the lab's containers used: those there now since they
// were made, and those removed since the first read up to their last read. Its growth
// between two reads is what the lab used between them.
func (l *labCPU) total() float64 {
	if l == nil || l.prefix == "" {
		return 0
	}
	roots := []string{"/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup"}
	if l.root != "" {
		roots = []string{l.root}
	}
	now := map[string]float64{}
	for _, root := range roots {
		dirs, _ := filepath.Glob(filepath.Join(root, "lxc.payload."+l.prefix+"-*"))
		for _, dir := range dirs {
			if v, ok := cgroupCPU(dir); ok {
				now[filepath.Base(dir)] = v
			}
		}
		if len(now) > 0 {
			break // the first hierarchy that has them (v1's cpuacct on a hybrid host)
		}
	}
	for name, v := range l.last {
		// A container gone, or removed and made again under its name (its count restarted).
		if n, ok := now[name]; !ok || n < v {
			l.retired += v
		}
	}
	l.last = now
	sum := l.retired
	for _, v := range now {
		sum += v
	}
	return sum
}

// cgroupCPU reads a cgroup's CPU time in seconds: cgroup v1's cpuacct.usage (ns) or v2's
// cpu.stat usage_usec.
func cgroupCPU(dir string) (float64, bool) {
	if data, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage")); err == nil {
		ns, err := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
		return ns / 1e9, err == nil
	}
	data, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return us / 1e6, err == nil
		}
	}
	return 0, false
}

// cpuTracker gives each top-level test the CPU used while it ran: at every test's start
// and end, and every few seconds, it reads the suite's process tree and lab, and shares
// the CPU used since the last read among the tests running then.
type cpuTracker struct {
	mu              sync.Mutex
	root            int
	lab             *labCPU
	lastProc        float64
	lastNodes       float64
	running         map[string]bool
	proc, nodes     map[string]float64 // per test, what it was given so far
	startProc       float64
	startNodes      float64
	stop            chan struct{}
	readProc        func() float64 // treeCPU(root); a stand-in in unit tests
	readNodes       func() float64 // lab.total(); a stand-in in unit tests
	sampleEvery     time.Duration
	stopped, closed bool
}

func newCPUTracker(root int, labPrefix string) *cpuTracker {
	lab := newLabCPU(labPrefix)
	c := &cpuTracker{
		root:        root,
		lab:         lab,
		readProc:    func() float64 { return treeCPU(root) },
		readNodes:   lab.total,
		sampleEvery: 5 * time.Second,
	}
	c.init()
	return c
}

func (c *cpuTracker) init() {
	c.running, c.proc, c.nodes = map[string]bool{}, map[string]float64{}, map[string]float64{}
	c.lastProc, c.lastNodes = c.readProc(), c.readNodes()
	c.startProc, c.startNodes = c.lastProc, c.lastNodes
	c.stop = make(chan struct{})
	if c.sampleEvery > 0 {
		go func() {
			t := time.NewTicker(c.sampleEvery)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					c.mu.Lock()
					c.sample()
					c.mu.Unlock()
				case <-c.stop:
					return
				}
			}
		}()
	}
}

// sample shares the CPU used since the last sample among the running tests. The tree's
// figure can go down (a process ended whose parent had not reaped it yet): that is
// counted when its parent's figure takes it in.
func (c *cpuTracker) sample() {
	if c.stopped {
		return
	}
	p, n := c.readProc(), c.readNodes()
	dp, dn := max(p-c.lastProc, 0), max(n-c.lastNodes, 0)
	c.lastProc, c.lastNodes = max(p, c.lastProc), n
	if len(c.running) == 0 {
		return
	}
	share := float64(len(c.running))
	for t := range c.running {
		c.proc[t] += dp / share
		c.nodes[t] += dn / share
	}
}

// started and ended mark a top-level test's bounds.
func (c *cpuTracker) started(test string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sample()
	c.running[test] = true
}

// ended returns what the test used: its processes' and its lab's CPU, in seconds.
func (c *cpuTracker) ended(test string) (proc, nodes float64) {
	if c == nil {
		return 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sample()
	delete(c.running, test)
	return c.proc[test], c.nodes[test]
}

// close stops the sampling and returns the lab's CPU over the whole suite.
func (c *cpuTracker) close() (nodes float64) {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		close(c.stop)
		c.closed = true
	}
	n := c.readNodes()
	c.stopped = true
	return max(n-c.startNodes, 0)
}
