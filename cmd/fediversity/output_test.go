package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
	"github.com/fediversity/terraform-provider-fediversity/internal/noderun"
)

// Outcomes as the fleet engine returns them: a lenient verdict that judged another
// system than asked (ok, with warnings), a lock taken over, a build warning, a node a
// resumed rollout deployed again, a failed node with warnings of its own, and a node
// without any.
func warnedOutcomes() []fleet.Outcome {
	okVerdict := &judge.Verdict{OK: true, SystemState: "running"}
	return []fleet.Outcome{
		{Node: "web01", Elapsed: time.Second, Outcome: noderun.Outcome{Result: &deploybody.Result{Verdict: okVerdict,
			Warnings: []string{"the node runs /nix/store/b-other, not /nix/store/a-asked; its units are judged on the system the node runs (strict = false)"}}}},
		{Node: "web02", Elapsed: time.Second, BuildWarnings: []string{"The evaluation of node web02 was not cached"},
			NotResumed: "not resumed: Node web02 runs /nix/store/t-top, but its system profile (what it boots) points at /nix/store/a-old: the switch to /nix/store/t-top was not finished. It is deployed again.",
			Outcome:    noderun.Outcome{Result: &deploybody.Result{Verdict: okVerdict, Warnings: []string{"took over the node lock of ci@nixos pid 4242: its holder is gone"}}}},
		{Node: "web03", Elapsed: time.Second, Outcome: noderun.Outcome{Err: errors.New("node web03: phase switch: boom"), Result: &deploybody.Result{Warnings: []string{"switch-to-configuration exited 1: boom"}}}},
		{Node: "web04", Elapsed: time.Second, Outcome: noderun.Outcome{Result: &deploybody.Result{Verdict: okVerdict}}},
	}
}

func TestTableShowsEveryWarningPerNode(t *testing.T) {
	var b bytes.Buffer
	writeTable(&b, warnedOutcomes())
	out := b.String()
	for _, want := range []string{
		"web01: warning: the node runs /nix/store/b-other, not /nix/store/a-asked",
		"web02: warning: The evaluation of node web02 was not cached",
		"web02: warning: took over the node lock of ci@nixos pid 4242",
		"web02: warning: not resumed: Node web02 runs /nix/store/t-top, but its system profile",
		"web03: warning: switch-to-configuration exited 1: boom",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "web04: warning") {
		t.Errorf("a node without warnings has a warning line:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "web01 ") && !strings.Contains(line, "ok (warnings)") {
			t.Errorf("web01's row does not say it has warnings: %q", line)
		}
		if strings.HasPrefix(line, "web04 ") && strings.Contains(line, "warnings") {
			t.Errorf("web04's row speaks of warnings: %q", line)
		}
	}
}

func TestJSONHasEveryWarningPerNode(t *testing.T) {
	var b bytes.Buffer
	if err := writeJSON(&b, summarize(warnedOutcomes(), nil)); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Nodes []struct {
			Node     string    `json:"node"`
			Warnings *[]string `json:"warnings"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"web01": 1, "web02": 3, "web03": 1, "web04": 0}
	for _, n := range got.Nodes {
		if n.Warnings == nil {
			t.Errorf("%s: no \"warnings\" key (want a list, empty when none)", n.Node)
			continue
		}
		if len(*n.Warnings) != want[n.Node] {
			t.Errorf("%s: %d warnings %q, want %d", n.Node, len(*n.Warnings), *n.Warnings, want[n.Node])
		}
	}
	for _, want := range []string{"took over the node lock", "not resumed: Node web02 runs /nix/store/t-top"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("--json lacks %q:\n%s", want, b.String())
		}
	}
}

// The interrupt handling on its own, with a channel in place of the OS's signals: the
// first ends the context and keeps the command going; the second says, per node that
// has not finished, where its run was and what it may have left, and exits 130.
func TestSecondInterruptSaysWhatIsLeftAndExits(t *testing.T) {
	nodes := newNodePhases()
	nodes.start([]string{"web01", "web02", "web03", "web04"}, false)
	nodes.observe(fleet.Event{Node: "web01", Phase: deploybody.PhaseSwitch})
	nodes.observe(fleet.Event{Node: "web02", Phase: deploybody.PhaseSettle})
	nodes.observe(fleet.Event{Node: "web03", Phase: deploybody.PhaseConclude})
	nodes.observe(fleet.Event{Node: "web03", Done: true})

	signals := make(chan os.Signal, 2)
	cancelled := make(chan struct{})
	exited := make(chan int, 1)
	var stderr safeBuffer
	go watchInterrupts(signals, func() { close(cancelled) }, nodes, &stderr, func(code int) { exited <- code })
	signals <- os.Interrupt
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the first interrupt did not end the context")
	}
	select {
	case code := <-exited:
		t.Fatalf("the first interrupt exited %d", code)
	case <-time.After(100 * time.Millisecond):
	}
	signals <- os.Interrupt
	select {
	case code := <-exited:
		if code != exitInterrupted {
			t.Fatalf("exit %d, want %d", code, exitInterrupted)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second interrupt did not exit")
	}
	out := stderr.String()
	for _, want := range []string{
		"Interrupt again to quit at once",
		"web01 (in switch): a switch may be running; a revert may be armed",
		"web02 (in settle): the boot entry is not finalized",
		"web04 (not started): nothing",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "web03") {
		t.Errorf("a node whose run had finished is listed:\n%s", out)
	}
}

// safeBuffer is a bytes.Buffer the handler's goroutine writes and the test reads.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
