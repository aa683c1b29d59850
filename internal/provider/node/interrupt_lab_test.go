package node_test

// Lab acceptance tests of what the state, the plan and the node say after an
// interrupted or concurrent deploy. The plugin-testing harness cannot kill the CLI
// or the provider mid-apply, so these tests run the binary named by
// TF_ACC_TERRAFORM_PATH themselves (os/exec) against a temporary directory, with the
// provider built from this tree and installed through dev_overrides: the provider then
// runs as its own plugin process, as an operator's does, and either process can be
// SIGKILLed while the lab's slow-switch closure activates on a real node.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// pluginOf is the provider process the CLI process pid started (0 if none yet).
func pluginOf(pid int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.Contains(s[:i], "terraform-provi") {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			return child
		}
	}
	return 0
}

// waitRunning waits (bounded: 240 polls, 0.5 s apart) until the node runs toplevel.
// The polls run on the node, in one exec (an exec per poll cost the machine more than
// the readlink it ran, over the up to 45 s a cut-off switch goes on); an exec that fails
// (incusd under load) is run again until the bound is spent.
func waitRunning(t *testing.T, node labtest.Node, toplevel string) {
	t.Helper()
	const polls = 240
	left := polls
	for left > 0 {
		script := fmt.Sprintf(`i=0
while [ "$(readlink -f /run/current-system)" != %q ]; do
	i=$((i + 1))
	[ "$i" -lt %d ] || exit 1
	sleep 0.5
done`, toplevel, left)
		start := time.Now()
		if _, err := labtest.IncusErr("exec", node.Instance, "--", "/bin/sh", "-c", script); err == nil {
			return
		}
		left -= max(1, int(time.Since(start)/(500*time.Millisecond)))
		if left > 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	t.Fatalf("%s never came to run %s", node.Instance, toplevel)
}

// nodeTruth is what the node runs and boots.
type nodeTruth struct{ running, profile, generation string }

func readNodeTruth(t *testing.T, node labtest.Node) nodeTruth {
	t.Helper()
	f := strings.Split(nodeExec(t, node, `printf '%s\n%s\n%s\n' "$(readlink -f /run/current-system)" "$(readlink -f /nix/var/nix/profiles/system)" "$(readlink /nix/var/nix/profiles/system)"`), "\n")
	for len(f) < 3 {
		f = append(f, "")
	}
	gen := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(f[2]), "system-"), "-link")
	return nodeTruth{running: strings.TrimSpace(f[0]), profile: strings.TrimSpace(f[1]), generation: gen}
}

func cliSwitchConfig(node labtest.Node, toplevel, extra string) string {
	return switchConfig(node, sshBlock(node), toplevel, extra) + `
output "toplevel" {
  value = fediversity_node_switch.n.toplevel
}
`
}

// faultRow is one line of the fault table the tests log (grep "FAULT |").
func faultRow(t *testing.T, fault, saw string, agree bool) {
	t.Helper()
	t.Logf("FAULT | %s | %s | %s | agreed=%v", fault, filepath.Base(acctest.Binary.Path), saw, agree)
}

// An update from good to slow-switch is cut off after its switch started, three ways:
// the CLI is SIGKILLed, the provider plugin is SIGKILLed, timeouts.update runs out.
// Each time the node ends on the new system with its boot entry on the old one; the
// next plan plans an update of the node resource and warns that the deploy did not
// finish; the next apply converges: the profile points at the new toplevel and the
// state holds a verdict of this deploy (its generation is the profile's).
func TestAccNodeSwitchInterruptedUpdate(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	slow := labtest.BuildClosure(t, labtest.ClosureSlowSwitch) // its activation takes 15 s
	// The time-out must run out inside the switch, after the steps before it (wait for
	// the node, lock, copy, start), which take seconds on a quiet machine and were seen
	// to take more than 8 s in CI with six suites side by side: that cut then came
	// before the switch, and the node never ran the new system. This fault's switch
	// takes 45 s, and its time-out is 30 s.
	slower := labtest.BuildSlowSwitch(t, 45)

	faults := []struct {
		name  string
		node  string // each fault has a node of its own, so the three run side by side
		slow  string // the new system, whose switch the cut interrupts
		extra string
		cut   func(cli *exec.Cmd, node labtest.Node)
		// takeover: "yes" when the cut leaves the node's lock behind (its holder was
		// killed) and the converging apply must take it over; "no" when the run released
		// it; "either" when the plugin may or may not outlive the cut (it is reported).
		takeover string
	}{
		{"SIGKILL of the CLI during the switch", "cli-int-cli", slow, "", func(cli *exec.Cmd, node labtest.Node) {
			labtest.WaitSwitchRunning(t, node)
			_ = cli.Process.Signal(syscall.SIGKILL)
		}, "either"},
		{"SIGKILL of the provider plugin during the switch", "cli-int-plugin", slow, "", func(cli *exec.Cmd, node labtest.Node) {
			labtest.WaitSwitchRunning(t, node)
			plugin := pluginOf(cli.Process.Pid)
			if plugin == 0 {
				t.Errorf("no provider process under the CLI (pid %d)", cli.Process.Pid)
				return
			}
			_ = syscall.Kill(plugin, syscall.SIGKILL)
		}, "yes"},
		{"timeouts.update (30s) shorter than the switch (45s)", "cli-int-timeout", slower, "timeouts {\n    update = \"30s\"\n  }", nil, "no"},
	}
	// The three faults ran one after the other on one node: 8 to 9 minutes of the nodes
	// suites' critical path, most of it waiting (the slow switch, the dead holder's lock
	// going stale). Each now has its own node and the three run side by side; nothing
	// is shared between them but the two closures, built above.
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			slow := f.slow
			node := labtest.NewInstance(t, f.node)
			c := acctest.NewCLIDir(t)
			c.Write(cliSwitchConfig(node, good, f.extra))
			c.MustApply("deploying good")
			before := readNodeTruth(t, node)

			// The cut-off run arms a lock-out revert with a window of
			// timings.confirm_timeout after its switch ends. With the default 30 s, a
			// plan on a loaded machine outlasted it: the revert fired before the
			// converging apply, took the dead holder's lock itself and switched the node
			// back, so which of the two came first depended on the load. Ten minutes
			// keeps it armed until the converging apply, whose new login settles it.
			c.Write(strings.Replace(cliSwitchConfig(node, slow, f.extra), `sample_interval = "1s"`, `sample_interval = "1s"
    confirm_timeout = "10m"`, 1))
			var out bytes.Buffer
			cli := c.Command(&out, "apply", "-auto-approve", "-no-color")
			if err := cli.Start(); err != nil {
				t.Fatal(err)
			}
			if f.cut != nil {
				f.cut(cli, node)
			}
			err := cli.Wait()
			if err == nil {
				t.Fatalf("the cut-off apply succeeded:\n%s", out.String())
			}
			saw := firstMatchingLine(out.String(), "Error:", "killed", "signal")
			// The switch goes on detached; once it is done the node runs slow but
			// boots good: the case Read must not adopt.
			waitRunning(t, node, slow)
			mid := readNodeTruth(t, node)
			if mid.profile != good {
				t.Fatalf("after the cut the profile points at %s, want still %s (before: %+v)", mid.profile, good, before)
			}

			planOut, actions := c.PlanActions(addr)
			if strings.Join(actions, ",") != "update" {
				t.Fatalf("after %s the plan's actions on %s are %v, want [update]:\n%s", f.name, addr, actions, planOut)
			}
			flat := strings.Join(strings.Fields(planOut), " ") // the CLI wraps long warnings
			if !strings.Contains(flat, "did not finish") || !strings.Contains(flat, "boots) points at "+good) {
				t.Fatalf("the plan does not warn that the deploy did not finish:\n%s", planOut)
			}

			c.Write(cliSwitchConfig(node, slow, ""))
			convergeOut := strings.Join(strings.Fields(c.MustApply("converging")), " ")
			tookOver := strings.Contains(convergeOut, "took over the node lock")
			if f.takeover != "either" && tookOver != (f.takeover == "yes") {
				t.Fatalf("converging apply took over a lock: %v, want %s:\n%s", tookOver, f.takeover, convergeOut)
			}
			if tookOver {
				saw += "; converging apply took over the dead holder's lock"
			}
			after := readNodeTruth(t, node)
			st := c.StateAttrs(addr)
			verdict, _ := st["verdict"].(map[string]any)
			gen := fmt.Sprint(st["generation"])
			agree := after.running == slow && after.profile == slow && st["toplevel"] == slow && gen == after.generation &&
				verdict["ok"] == true && verdict["confirmed"] == true && gen != before.generation
			faultRow(t, f.name, saw+"; next plan: update + warning \"did not finish\"", agree)
			if !agree {
				t.Fatalf("after converging: node %+v (before %+v), state toplevel=%v generation=%s verdict ok=%v confirmed=%v", after, before, st["toplevel"], gen, verdict["ok"], verdict["confirmed"])
			}
			if _, actions := c.PlanActions(addr); len(actions) != 1 || actions[0] != "no-op" {
				t.Fatalf("after converging the plan is %v, want no-op", actions)
			}
		})
	}
}

func firstMatchingLine(out string, subs ...string) string {
	for _, l := range strings.Split(out, "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				return strings.TrimSpace(l)
			}
		}
	}
	return "(no error line)"
}

// cliSwitchConfigTimings is cliSwitchConfig with more timings.
func cliSwitchConfigTimings(node labtest.Node, toplevel, timings string) string {
	return acctest.Config(acctest.LabProvider() + fmt.Sprintf(`
resource "fediversity_node_switch" "n" {
  node     = %q
  toplevel = %q
%s
  timings {
    node_wait       = "30s"
    settle          = "1s"
    watch           = "4s"
    sample_interval = "1s"
    %s
  }
}
`, node.Name, toplevel, sshBlock(node), timings))
}

// Two applies from two state directories on one node at once. With lock_wait shorter
// than the first apply's switch, the second fails naming the holder and changes
// nothing; with the default, it waits and then runs. Either way the node ends on the
// toplevel of the state that last claimed success, and its profile agrees.
func TestAccNodeSwitchConcurrentApplies(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	slow := labtest.BuildClosure(t, labtest.ClosureSlowSwitch)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	goodV2 := labtest.BuildClosure(t, labtest.ClosureGoodV2)
	node := labtest.NewInstance(t, "cli-concurrent")

	for _, tc := range []struct {
		name     string
		lockWait string
		wantWait bool
	}{
		{"second fails naming the holder", `lock_wait = "3s"`, false},
		{"second waits, then runs", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := acctest.NewCLIDir(t), acctest.NewCLIDir(t)
			a.Write(cliSwitchConfigTimings(node, good, ""))
			a.MustApply("deploying good from A")
			a.Write(cliSwitchConfigTimings(node, slow, ""))
			b.Write(cliSwitchConfigTimings(node, goodV2, tc.lockWait))
			var aOut bytes.Buffer
			first := a.Command(&aOut, "apply", "-auto-approve", "-no-color")
			if err := first.Start(); err != nil {
				t.Fatal(err)
			}
			labtest.WaitSwitchRunning(t, node)
			bOut, bCode := b.Apply()
			aErr := first.Wait()
			if aErr != nil {
				t.Fatalf("the first apply failed:\n%s", aOut.String())
			}
			truth := readNodeTruth(t, node)
			aState, bState := a.StateAttrs(addr), b.StateAttrs(addr)
			if !tc.wantWait {
				flat := strings.Join(strings.Fields(bOut), " ")
				named := strings.Contains(flat, "is locked by a deploy of "+slow+" from host") && strings.Contains(flat, "lock_wait (3s)")
				agree := bCode != 0 && bState == nil && truth.running == slow && truth.profile == slow && aState["toplevel"] == slow
				faultRow(t, "two applies at once, lock_wait 3s", "second: \"node … is locked by a deploy of <slow> from host … (process …) since …; waited timings.lock_wait (3s)\"", agree && named)
				if !named || !agree {
					t.Fatalf("second apply exit %d, node %+v, A's toplevel %v, B's state %v:\n%s", bCode, truth, aState["toplevel"], bState, bOut)
				}
				return
			}
			if bCode != 0 {
				t.Fatalf("the second apply failed instead of waiting:\n%s", bOut)
			}
			verdict, _ := bState["verdict"].(map[string]any)
			timings, _ := verdict["phase_timings"].(map[string]any)
			// The first apply's switch alone takes 15 s: the second held back that long.
			lockPhase, _ := time.ParseDuration(fmt.Sprint(timings["lock-node"]))
			waited := lockPhase >= 5*time.Second
			agree := truth.running == goodV2 && truth.profile == goodV2 && bState["toplevel"] == goodV2 && fmt.Sprint(bState["generation"]) == truth.generation
			faultRow(t, "two applies at once, default lock_wait", fmt.Sprintf("second waited %s in lock-node, then ran", timings["lock-node"]), agree && waited)
			if !agree || !waited {
				t.Fatalf("node %+v, B's state toplevel=%v generation=%v lock-node=%v", truth, bState["toplevel"], bState["generation"], timings["lock-node"])
			}
		})
	}
}
