package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
)

// exitInterrupted is the exit code of a command quit by a second interrupt (128 +
// SIGINT, as a shell reports it).
const exitInterrupted = 130

// nodePhases follows where each node's run is, so that a command quit at once can
// say what each unfinished run may have left on its node.
type nodePhases struct {
	mu          sync.Mutex
	verdictOnly bool
	phase       map[string]string // the phase a node's run last began ("" not yet)
	done        map[string]bool
}

func newNodePhases() *nodePhases {
	return &nodePhases{phase: map[string]string{}, done: map[string]bool{}}
}

// start records the nodes that will run, before any has begun.
func (n *nodePhases) start(nodes []string, verdictOnly bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.verdictOnly = verdictOnly
	for _, node := range nodes {
		n.phase[node] = ""
	}
}

func (n *nodePhases) observe(e fleet.Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e.Done {
		n.done[e.Node] = true
		return
	}
	n.phase[e.Node] = e.Phase
}

// leftBehind is one line per node whose run had not finished: its phase and what it
// may have left on the node.
func (n *nodePhases) leftBehind() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var lines []string
	for node, phase := range n.phase {
		if n.done[node] {
			continue
		}
		where := "not started"
		if phase != "" {
			where = "in " + phase
		}
		lines = append(lines, fmt.Sprintf("%s (%s): %s", node, where, strings.Join(fleet.LeftOnNode(phase, n.verdictOnly), "; ")))
	}
	sort.Strings(lines)
	return lines
}

// watchInterrupts turns the first interrupt into the end of ctx (cancel): the runs
// wind down, which can take minutes (a switch or a confirm in progress is not cut
// short). The second ends the command at once: it says what each unfinished run may
// have left on its node and exits exitInterrupted. It returns when signals closes.
func watchInterrupts(signals <-chan os.Signal, cancel context.CancelFunc, nodes *nodePhases, stderr io.Writer, exit func(int)) {
	if _, ok := <-signals; !ok {
		return
	}
	fmt.Fprintln(stderr, "fediversity: interrupted: the runs are winding down (a switch or a confirm in progress is not cut short; this can take minutes). Interrupt again to quit at once.")
	cancel()
	if _, ok := <-signals; !ok {
		return
	}
	lines := nodes.leftBehind()
	if len(lines) == 0 {
		fmt.Fprintln(stderr, "fediversity: interrupted again: quitting at once; every node's run had finished.")
	} else {
		fmt.Fprintln(stderr, "fediversity: interrupted again: quitting at once. What each unfinished run may have left on its node:")
		for _, l := range lines {
			fmt.Fprintln(stderr, "  "+l)
		}
		fmt.Fprintln(stderr, "Run the same command again to bring the nodes to a known state.")
	}
	exit(exitInterrupted)
}
