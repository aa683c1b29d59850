package node_test

// Lab acceptance tests of the node lock's holder identity, through the real binary
// (TF_ACC_TERRAFORM_PATH) and the provider as its own plugin process (see
// interrupt_lab_test.go for the harness).

import (
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// sharedHostName is the host name both deployers take: NixOS' default.
const sharedHostName = "nixos"

// inUTSNamespace runs the binary with args in c's directory, in a UTS namespace whose host name is
// sharedHostName; clone also gives it a PID namespace with its own /proc, as on a
// cloned machine or container: there the first deployer's PID names no process.
func inUTSNamespace(c *acctest.CLIDir, out *bytes.Buffer, clone bool, args ...string) *exec.Cmd {
	argv := []string{"--uts"}
	if clone {
		argv = append(argv, "--pid", "--fork", "--mount-proc")
	}
	argv = append(argv, "sh", "-c", `hostname "$1" && shift && exec "$@"`, "sh", sharedHostName, acctest.Binary.Path)
	cmd := exec.Command("unshare", append(argv, args...)...)
	cmd.Dir, cmd.Env = c.Dir, c.Env
	cmd.Stdout, cmd.Stderr = out, out
	return cmd
}

// switchSpan is one detached switch unit as the node's journal saw it.
type switchSpan struct {
	unit       string
	action     string  // switch-to-configuration's action (the unit's description names it)
	start, end float64 // unix seconds; end 0: no end seen
}

var (
	journalLine = regexp.MustCompile(`^(\d+\.\d+) \S+ systemd\[1\]: (?:Started )?(fediversity-switch-[0-9a-f]+)\.service`)
	// startedAction reads the action from the unit's Started line: systemd writes "Started
	// <unit> - <description>.", and the provider describes each detached unit as
	// "fediversity switch-to-configuration <action>".
	startedAction = regexp.MustCompile(`: Started fediversity-switch-[0-9a-f]+\.service - fediversity switch-to-configuration (\S+?)\.?$`)
)

// switchSpans reads from the node's journal every detached switch that started at or
// after since (unix seconds, the node's clock), with when it started and ended.
func switchSpans(t *testing.T, node labtest.Node, since float64) []switchSpan {
	t.Helper()
	out := nodeExec(t, node, fmt.Sprintf("journalctl --no-pager -o short-unix --since @%d _PID=1 | grep 'fediversity-switch-' || true", int64(since)))
	spans := map[string]*switchSpan{}
	for _, l := range strings.Split(out, "\n") {
		m := journalLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		at, _ := strconv.ParseFloat(m[1], 64)
		s := spans[m[2]]
		if s == nil {
			s = &switchSpan{unit: m[2]}
			spans[m[2]] = s
		}
		switch {
		case strings.Contains(l, ": Started "):
			s.start = at
			if a := startedAction.FindStringSubmatch(l); a != nil {
				s.action = a[1]
			}
		case strings.Contains(l, "Deactivated") || strings.Contains(l, "Failed") || strings.Contains(l, "Consumed"):
			s.end = at
		}
	}
	var list []switchSpan
	for _, s := range spans {
		// Started before since (or only its end seen): an earlier deploy's. The apply
		// returns once its last unit, the boot entry's `boot`, left its result, before
		// systemd logs that unit's end.
		if s.start < since {
			continue
		}
		list = append(list, *s)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].start < list[j].start })
	return list
}

// switchActions lists the switches' actions in the order they started, e.g. "test boot":
// a deploy activates with `test` and, once judged, writes the boot entry with `boot`,
// each a detached unit of its own.
func switchActions(spans []switchSpan) string {
	var actions []string
	for _, s := range spans {
		a := s.action
		if a == "" {
			a = "?"
		}
		actions = append(actions, a)
	}
	return strings.Join(actions, " ")
}

// deploysActions is what the node's journal shows for n deploys one after the other:
// each one's `test`, then its `boot`.
func deploysActions(n int) string {
	return strings.TrimSpace(strings.Repeat("test boot ", n))
}

// overlapping tells whether two of the switches ran at once (one started before the
// previous one ended, or one never ended while a later one ran).
func overlapping(spans []switchSpan) bool {
	for i := 1; i < len(spans); i++ {
		if spans[i-1].end == 0 || spans[i].start < spans[i-1].end {
			return true
		}
	}
	return false
}

// Two deployers with one host name, as NixOS' default "nixos" or cloned CI machines
// give: each CLI runs in a UTS namespace named "nixos", the second also in a PID
// namespace of its own (a cloned machine, where the first's PID names no process). The
// first holds the node's lock through a 15 s switch. The second never takes that live
// lock over: with lock_wait 3s it fails naming the holder; with the default it waits,
// then runs. The node's journal shows the switches one after the other, never two at
// once: each deploy's `test`, then its `boot` (A's alone when B is refused).
func TestAccNodeSwitchSameHostNameDeployers(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("unshare (util-linux) is needed for this test: %v", err)
	}
	slow := labtest.BuildClosure(t, labtest.ClosureSlowSwitch)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	goodV2 := labtest.BuildClosure(t, labtest.ClosureGoodV2)
	node := labtest.NewInstance(t, "cli-samehost")

	for _, tc := range []struct {
		name     string
		lockWait string
		wantWait bool
	}{
		{"second is refused naming the holder", `lock_wait = "3s"`, false},
		{"second waits, then runs", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := acctest.NewCLIDir(t), acctest.NewCLIDir(t)
			a.Write(cliSwitchConfigTimings(node, good, ""))
			a.MustApply("deploying good from A")
			a.Write(cliSwitchConfigTimings(node, slow, ""))
			b.Write(cliSwitchConfigTimings(node, goodV2, tc.lockWait))
			since, _ := strconv.ParseFloat(strings.TrimSpace(nodeExec(t, node, "date +%s.%N")), 64)

			var aOut, bOut bytes.Buffer
			first := inUTSNamespace(a, &aOut, false, "apply", "-auto-approve", "-no-color")
			if err := first.Start(); err != nil {
				t.Fatal(err)
			}
			labtest.WaitSwitchRunning(t, node)
			second := inUTSNamespace(b, &bOut, true, "apply", "-auto-approve", "-no-color")
			bErr := second.Run()
			aErr := first.Wait()
			if aErr != nil {
				t.Fatalf("the first apply failed:\n%s", aOut.String())
			}
			flatB := strings.Join(strings.Fields(bOut.String()), " ")
			if strings.Contains(flatB, "took over the node lock") {
				t.Fatalf("the second deployer took over the first's live lock:\n%s", bOut.String())
			}
			truth := readNodeTruth(t, node)
			spans := switchSpans(t, node, since)
			bState := b.StateAttrs(addr)
			if overlapping(spans) {
				t.Fatalf("two switches ran at once on the node: %+v", spans)
			}
			if !tc.wantWait {
				named := strings.Contains(flatB, "is locked by a deploy of "+slow+" from host "+sharedHostName+" (process ") &&
					strings.Contains(flatB, "machine ") && strings.Contains(flatB, "lock_wait (3s)")
				agree := bErr != nil && bState == nil && truth.running == slow && truth.profile == slow && switchActions(spans) == deploysActions(1)
				faultRow(t, "two deployers named \"nixos\", lock_wait 3s", fmt.Sprintf("second: \"node … is locked by a deploy of <slow> from host nixos (process …, machine …)\"; the node's journal: %s (one deploy's)", switchActions(spans)), agree && named)
				if !named || !agree {
					t.Fatalf("second apply err %v, node %+v, switches %+v, B's state %v:\n%s", bErr, truth, spans, bState, bOut.String())
				}
				return
			}
			if bErr != nil {
				t.Fatalf("the second apply failed instead of waiting:\n%s", bOut.String())
			}
			verdict, _ := bState["verdict"].(map[string]any)
			timings, _ := verdict["phase_timings"].(map[string]any)
			lockPhase, _ := time.ParseDuration(fmt.Sprint(timings["lock-node"]))
			agree := truth.running == goodV2 && truth.profile == goodV2 && bState["toplevel"] == goodV2 && switchActions(spans) == deploysActions(2) && lockPhase >= 5*time.Second
			faultRow(t, "two deployers named \"nixos\", default lock_wait", fmt.Sprintf("second waited %s in lock-node, then ran; the node's journal: %s, one after the other", timings["lock-node"], switchActions(spans)), agree)
			if !agree {
				t.Fatalf("node %+v, switches %+v, B's state toplevel=%v lock-node=%v", truth, spans, bState["toplevel"], timings["lock-node"])
			}
		})
	}
}
