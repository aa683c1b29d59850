package provider

// Lab acceptance tests of what the state, the plan and the node say after an
// interrupted or concurrent deploy. The plugin-testing harness cannot kill the CLI
// or the provider mid-apply, so these tests run the binary named by
// TF_ACC_TERRAFORM_PATH themselves (os/exec) against a temporary directory, with the
// provider built from this tree and installed through dev_overrides: the provider then
// runs as its own plugin process, as an operator's does, and either process can be
// SIGKILLed while the lab's slow-switch closure activates on a real node.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

var cliProvider struct {
	once sync.Once
	dir  string
	err  error
}

// cliProviderDir builds the provider once per test process into a directory that
// dev_overrides points at.
func cliProviderDir(t *testing.T) string {
	t.Helper()
	cliProvider.once.Do(func() {
		dir, err := os.MkdirTemp("", "fediversity-cli-provider-")
		if err != nil {
			cliProvider.err = err
			return
		}
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "terraform-provider-fediversity"), ".")
		cmd.Dir = labtest.RepoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			cliProvider.err = fmt.Errorf("go build: %v: %s", err, out)
			return
		}
		cliProvider.dir = dir
	})
	if cliProvider.err != nil {
		t.Fatalf("building the provider for the CLI tests: %v", cliProvider.err)
	}
	return cliProvider.dir
}

// cliDir is one working (and state) directory of the CLI.
type cliDir struct {
	t   *testing.T
	dir string
	env []string
}

func newCLIDir(t *testing.T) *cliDir {
	t.Helper()
	if testAccBinary.err != nil {
		t.Fatalf("acceptance test binary: %v", testAccBinary.err)
	}
	dir := t.TempDir()
	rc := filepath.Join(dir, "tfrc")
	pdir := cliProviderDir(t)
	if err := os.WriteFile(rc, []byte(fmt.Sprintf(`provider_installation {
  dev_overrides {
    "registry.terraform.io/fediversity/fediversity" = %q
    "registry.opentofu.org/fediversity/fediversity" = %q
  }
  direct {}
}
`, pdir, pdir)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1", "TF_INPUT=0")
	return &cliDir{t: t, dir: dir, env: env}
}

func (c *cliDir) write(config string) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.dir, "main.tf"), []byte(config), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// command is the binary with args in this directory; its output goes to out.
func (c *cliDir) command(out *bytes.Buffer, args ...string) *exec.Cmd {
	cmd := exec.Command(testAccBinary.path, args...)
	cmd.Dir = c.dir
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = out, out
	return cmd
}

// run runs the binary to its end and returns its output and exit code.
func (c *cliDir) run(args ...string) (string, int) {
	c.t.Helper()
	var out bytes.Buffer
	err := c.command(&out, args...).Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			c.t.Fatalf("%s %v: %v", testAccBinary.path, args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), code
}

func (c *cliDir) apply() (string, int) {
	return c.run("apply", "-auto-approve", "-no-color")
}

// mustApply applies and fails the test unless it succeeded.
func (c *cliDir) mustApply(what string) string {
	c.t.Helper()
	out, code := c.apply()
	if code != 0 {
		c.t.Fatalf("%s: apply exited %d:\n%s", what, code, out)
	}
	return out
}

// planActions plans and returns the plan's output and the actions planned for addr.
func (c *cliDir) planActions(addr string) (string, []string) {
	c.t.Helper()
	out, code := c.run("plan", "-no-color", "-detailed-exitcode", "-out=tfplan")
	if code == 1 {
		c.t.Fatalf("plan failed:\n%s", out)
	}
	js, code := c.run("show", "-json", "tfplan")
	if code != 0 {
		c.t.Fatalf("show -json: %s", js)
	}
	var plan struct {
		ResourceChanges []struct {
			Address string `json:"address"`
			Change  struct {
				Actions []string `json:"actions"`
			} `json:"change"`
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal([]byte(js[strings.IndexByte(js, '{'):]), &plan); err != nil {
		c.t.Fatalf("plan JSON: %v\n%s", err, js)
	}
	for _, rc := range plan.ResourceChanges {
		if rc.Address == addr {
			return out, rc.Change.Actions
		}
	}
	return out, nil
}

// stateAttr is one attribute of addr in the state, as JSON.
func (c *cliDir) stateAttrs(addr string) map[string]any {
	c.t.Helper()
	js, code := c.run("show", "-json")
	if code != 0 {
		c.t.Fatalf("show -json: %s", js)
	}
	var st struct {
		Values struct {
			RootModule struct {
				Resources []struct {
					Address string         `json:"address"`
					Values  map[string]any `json:"values"`
				} `json:"resources"`
			} `json:"root_module"`
		} `json:"values"`
	}
	if err := json.Unmarshal([]byte(js[strings.IndexByte(js, '{'):]), &st); err != nil {
		c.t.Fatalf("state JSON: %v\n%s", err, js)
	}
	for _, r := range st.Values.RootModule.Resources {
		if r.Address == addr {
			return r.Values
		}
	}
	return nil
}

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

// waitRunning waits (bounded: 120 polls of 0.5 s) until the node runs toplevel.
func waitRunning(t *testing.T, node labtest.Node, toplevel string) {
	t.Helper()
	for i := 0; i < 120; i++ {
		if strings.TrimSpace(nodeExec(t, node, "readlink -f /run/current-system")) == toplevel {
			return
		}
		time.Sleep(500 * time.Millisecond)
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
	t.Logf("FAULT | %s | %s | %s | agreed=%v", fault, filepath.Base(testAccBinary.path), saw, agree)
}

// An update from good to slow-switch is cut off after its switch started, three ways:
// the CLI is SIGKILLed, the provider plugin is SIGKILLed, timeouts.update runs out.
// Each time the node ends on the new system with its boot entry on the old one; the
// next plan plans an update of the node resource and warns that the deploy did not
// finish; the next apply converges: the profile points at the new toplevel and the
// state holds a verdict of this deploy (its generation is the profile's).
func TestAccNodeSwitchInterruptedUpdate(t *testing.T) {
	accLab(t)
	testAccPreCheck(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	slow := labtest.BuildClosure(t, labtest.ClosureSlowSwitch) // its activation takes 15 s
	node := labtest.NewInstance(t, "cli-interrupt")

	faults := []struct {
		name  string
		extra string
		cut   func(cli *exec.Cmd)
		// takeover: "yes" when the cut leaves the node's lock behind (its holder was
		// killed) and the converging apply must take it over; "no" when the run released
		// it; "either" when the plugin may or may not outlive the cut (it is reported).
		takeover string
	}{
		{"SIGKILL of the CLI during the switch", "", func(cli *exec.Cmd) {
			labtest.WaitSwitchRunning(t, node)
			_ = cli.Process.Signal(syscall.SIGKILL)
		}, "either"},
		{"SIGKILL of the provider plugin during the switch", "", func(cli *exec.Cmd) {
			labtest.WaitSwitchRunning(t, node)
			plugin := pluginOf(cli.Process.Pid)
			if plugin == 0 {
				t.Errorf("no provider process under the CLI (pid %d)", cli.Process.Pid)
				return
			}
			_ = syscall.Kill(plugin, syscall.SIGKILL)
		}, "yes"},
		{"timeouts.update (8s) shorter than the switch (15s)", "timeouts {\n    update = \"8s\"\n  }", nil, "no"},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			c := newCLIDir(t)
			c.write(cliSwitchConfig(node, good, f.extra))
			c.mustApply("deploying good")
			before := readNodeTruth(t, node)

			c.write(cliSwitchConfig(node, slow, f.extra))
			var out bytes.Buffer
			cli := c.command(&out, "apply", "-auto-approve", "-no-color")
			if err := cli.Start(); err != nil {
				t.Fatal(err)
			}
			if f.cut != nil {
				f.cut(cli)
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

			planOut, actions := c.planActions(addr)
			if strings.Join(actions, ",") != "update" {
				t.Fatalf("after %s the plan's actions on %s are %v, want [update]:\n%s", f.name, addr, actions, planOut)
			}
			flat := strings.Join(strings.Fields(planOut), " ") // the CLI wraps long warnings
			if !strings.Contains(flat, "did not finish") || !strings.Contains(flat, "boots) points at "+good) {
				t.Fatalf("the plan does not warn that the deploy did not finish:\n%s", planOut)
			}

			c.write(cliSwitchConfig(node, slow, ""))
			convergeOut := strings.Join(strings.Fields(c.mustApply("converging")), " ")
			tookOver := strings.Contains(convergeOut, "took over the node lock")
			if f.takeover != "either" && tookOver != (f.takeover == "yes") {
				t.Fatalf("converging apply took over a lock: %v, want %s:\n%s", tookOver, f.takeover, convergeOut)
			}
			if tookOver {
				saw += "; converging apply took over the dead holder's lock"
			}
			after := readNodeTruth(t, node)
			st := c.stateAttrs(addr)
			verdict, _ := st["verdict"].(map[string]any)
			gen := fmt.Sprint(st["generation"])
			agree := after.running == slow && after.profile == slow && st["toplevel"] == slow && gen == after.generation &&
				verdict["ok"] == true && verdict["confirmed"] == true && gen != before.generation
			faultRow(t, f.name, saw+"; next plan: update + warning \"did not finish\"", agree)
			if !agree {
				t.Fatalf("after converging: node %+v (before %+v), state toplevel=%v generation=%s verdict ok=%v confirmed=%v", after, before, st["toplevel"], gen, verdict["ok"], verdict["confirmed"])
			}
			if _, actions := c.planActions(addr); len(actions) != 1 || actions[0] != "no-op" {
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
	return testAccConfig(accProvider() + fmt.Sprintf(`
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
	accLab(t)
	testAccPreCheck(t)
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
			a, b := newCLIDir(t), newCLIDir(t)
			a.write(cliSwitchConfigTimings(node, good, ""))
			a.mustApply("deploying good from A")
			a.write(cliSwitchConfigTimings(node, slow, ""))
			b.write(cliSwitchConfigTimings(node, goodV2, tc.lockWait))
			var aOut bytes.Buffer
			first := a.command(&aOut, "apply", "-auto-approve", "-no-color")
			if err := first.Start(); err != nil {
				t.Fatal(err)
			}
			labtest.WaitSwitchRunning(t, node)
			bOut, bCode := b.apply()
			aErr := first.Wait()
			if aErr != nil {
				t.Fatalf("the first apply failed:\n%s", aOut.String())
			}
			truth := readNodeTruth(t, node)
			aState, bState := a.stateAttrs(addr), b.stateAttrs(addr)
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
