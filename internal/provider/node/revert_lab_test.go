package node_test

// Lab acceptance tests of the lock-out revert through the real binaries (issue 19): an
// armed revert must never switch a node back behind a state that says ok, and a late
// or interrupted confirm must be reported as what the node did. They reuse the CLI
// helpers of interrupt_lab_test.go. Timings are short (confirm_timeout of a few
// seconds) so that waiting past the node's window stays cheap.

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// revertTimings: a short window, and short settle and watch.
const revertTimings = `confirm_timeout = "5s"`

// revertConfirm is revertTimings' confirm_timeout.
const revertConfirm = 5 * time.Second

// killRun SIGKILLs the CLI and its provider plugin at once, as a cancelled CI job or
// an OOM kill of the session does: nothing of the run is left to disarm its revert.
func killRun(t *testing.T, a *runningApply) {
	t.Helper()
	pid := a.cmd.Process.Pid
	plugin := pluginOf(pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if plugin != 0 {
		_ = syscall.Kill(plugin, syscall.SIGKILL)
	}
	_ = a.wait(t)
}

// runningApply is an apply started in the background.
type runningApply struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan error
}

func startApply(t *testing.T, c *acctest.CLIDir) *runningApply {
	t.Helper()
	a := &runningApply{out: &bytes.Buffer{}, done: make(chan error, 1)}
	a.cmd = c.Command(a.out, "apply", "-auto-approve", "-no-color")
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	return a
}

// waitSwitch waits (bounded: 5 min, the machine may be loaded) until a detached
// switch runs on the node, and fails with the CLI's output if the apply ended first.
func (a *runningApply) waitSwitch(t *testing.T, node labtest.Node) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-a.done:
			a.done <- err
			t.Fatalf("the apply ended (%v) before its switch was seen:\n%s", err, a.out.String())
		default:
		}
		if out, _ := labtest.IncusErr("exec", node.Instance, "--", "systemctl", "list-units", "--no-legend", "--plain", "--state=active", "fediversity-switch-*"); strings.Contains(out, "fediversity-switch-") {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no switch ran on %s within 5 min:\n%s", node.Instance, a.out.String())
}

// wait waits for the apply to end (bounded: 10 min) and returns its error.
func (a *runningApply) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-a.done:
		return err
	case <-time.After(10 * time.Minute):
		_ = a.cmd.Process.Kill()
		t.Fatalf("the apply did not end within 10 min:\n%s", a.out.String())
	}
	return nil
}

// agreeAfterWindow waits past the node's window (plus a margin) and checks that the
// node runs and boots want, the state says want and the next plan is empty.
func agreeAfterWindow(t *testing.T, c *acctest.CLIDir, node labtest.Node, want, fault, saw string) {
	t.Helper()
	time.Sleep(revertConfirm + 15*time.Second)
	truth := readNodeTruth(t, node)
	st := c.StateAttrs(addr)
	_, actions := c.PlanActions(addr)
	agree := truth.running == want && truth.profile == want && st["toplevel"] == want && fmt.Sprint(st["generation"]) == truth.generation &&
		strings.Join(actions, ",") == "no-op"
	faultRow(t, fault, saw, agree)
	if !agree {
		t.Fatalf("%s later: node %+v, state toplevel=%v generation=%v, next plan %v; want all %s", revertConfirm+15*time.Second, truth, st["toplevel"], st["generation"], actions, want)
	}
}

// The orphan revert: the CLI and its plugin are killed while the switch to the slow
// closure runs, so the revert armed for it (back to good) is never disarmed. An apply
// started at once takes the node's lock, waits for the earlier switch, disarms the
// earlier revert before it began and says so; confirm_timeout + 15 s later the node
// still runs and boots what the state says, and the next plan is empty.
func TestAccNodeSwitchOrphanRevertSettled(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	slow := labtest.BuildClosure(t, labtest.ClosureSlowSwitch) // its activation takes 15 s
	node := labtest.NewInstance(t, "cli-orphan")
	c := acctest.NewCLIDir(t)
	c.Write(cliSwitchConfigTimings(node, good, revertTimings))
	start := time.Now()
	c.MustApply("deploying good")
	t.Logf("first apply took %s", time.Since(start).Round(time.Second))

	c.Write(cliSwitchConfigTimings(node, slow, revertTimings))
	cli := startApply(t, c)
	cli.waitSwitch(t, node)
	t.Logf("switch running %s after the start", time.Since(start).Round(time.Second))
	killRun(t, cli)
	if armed := nodeExec(t, node, "ls /run/fediversity/ | grep -c '^fediversity-revert-.*\\.state$' || true"); strings.TrimSpace(armed) != "1" {
		t.Fatalf("the killed run left %q armed reverts, want 1", armed)
	}

	second := strings.Join(strings.Fields(c.MustApply("applying again at once")), " ")
	t.Logf("second apply done %s after the start", time.Since(start).Round(time.Second))
	found := strings.Contains(second, "an earlier run left a revert armed on the node") && strings.Contains(second, "a new login made after its switch ended disarmed it before it began")
	if !found {
		t.Fatalf("the second apply did not say it dealt with the first run's revert:\n%s", second)
	}
	agreeAfterWindow(t, c, node, slow, "SIGKILL of CLI and plugin during the switch, apply again at once",
		"second apply: \"an earlier run left a revert armed … disarmed it before it began\"")
}

// A real Ctrl-C: SIGINT to the CLI during the switch, and again once the switch is
// over, while the run confirms (Terraform and OpenTofu then exit at once). Whatever
// the plugin got to do, the next plan and apply converge, and nothing reverts behind
// the state afterwards.
func TestAccNodeSwitchCtrlCDuringSwitchAndConfirm(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	slow := labtest.BuildClosure(t, labtest.ClosureSlowSwitch)
	node := labtest.NewInstance(t, "cli-ctrlc")
	c := acctest.NewCLIDir(t)
	c.Write(cliSwitchConfigTimings(node, good, revertTimings))
	c.MustApply("deploying good")

	c.Write(cliSwitchConfigTimings(node, slow, revertTimings))
	cli := startApply(t, c)
	cli.waitSwitch(t, node)
	_ = cli.cmd.Process.Signal(syscall.SIGINT)
	waitRunning(t, node, slow)
	_ = cli.cmd.Process.Signal(syscall.SIGINT)
	out := cli.out
	if err := cli.wait(t); err == nil {
		t.Fatalf("the interrupted apply succeeded:\n%s", out.String())
	}
	saw := firstMatchingLine(out.String(), "Error:", "interrupt", "Interrupt")
	if strings.Contains(out.String(), "stops new logins") {
		t.Fatalf("an interrupt was reported as a lock-out:\n%s", out.String())
	}
	c.MustApply("converging")
	agreeAfterWindow(t, c, node, slow, "SIGINT during the switch and again during the confirm", saw+"; next apply converges")
}

// holdingProxy forwards loopback TCP connections to target. While hold is set, a new
// connection waits that long before it is forwarded: a login that reaches the node
// late, which a real network cannot be made to do on demand.
type holdingProxy struct {
	ln    net.Listener
	hold  atomic.Int64 // nanoseconds
	mu    sync.Mutex
	conns []net.Conn
}

func startHoldingProxy(t *testing.T, target string) *holdingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{ln: ln}
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, conn)
			p.mu.Unlock()
			go func() {
				defer func() { _ = conn.Close() }()
				time.Sleep(time.Duration(p.hold.Load()))
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer func() { _ = up.Close() }()
				go func() { _, _ = io.Copy(up, conn); _ = up.Close() }()
				_, _ = io.Copy(conn, up)
			}()
		}
	}()
	return p
}

func (p *holdingProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// A late disarm: the deployer's new login after the switch reaches the node only
// after the node's window (the proxy holds new connections 9 s; confirm_timeout is
// 5 s). The node's revert has begun by then and is not stopped: the apply fails
// reporting a revert, never "disarmed"; the state, the node and its boot entry all
// say good, and the next plan deploys the slow closure again.
func TestAccNodeSwitchLateDisarmIsARevert(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	slow := labtest.BuildClosure(t, labtest.ClosureSlowSwitch)
	node := labtest.NewInstance(t, "cli-late-disarm")
	proxy := startHoldingProxy(t, net.JoinHostPort(node.SSHHost, strconv.Itoa(node.SSHPort)))
	viaProxy := node
	viaProxy.SSHPort = proxy.port()
	c := acctest.NewCLIDir(t)
	c.Write(cliSwitchConfigTimings(viaProxy, good, revertTimings))
	c.MustApply("deploying good")

	c.Write(cliSwitchConfigTimings(viaProxy, slow, revertTimings))
	cli := startApply(t, c)
	cli.waitSwitch(t, node)
	// The run's own connection is up; every new one from now on is late.
	proxy.hold.Store(int64(revertConfirm + 4*time.Second))
	err := cli.wait(t)
	out := cli.out
	proxy.hold.Store(0)
	flat := strings.Join(strings.Fields(out.String()), " ")
	reported := err != nil && strings.Contains(flat, "reached the node only after its confirm window (5s) had ended") &&
		strings.Contains(flat, "put itself back on "+good) && !strings.Contains(flat, "disarmed")
	truth := readNodeTruth(t, node)
	st := c.StateAttrs(addr)
	planOut, actions := c.PlanActions(addr)
	agree := truth.running == good && truth.profile == good && st["toplevel"] == good && strings.Join(actions, ",") == "update"
	faultRow(t, "the new login reaches the node after its window (proxy holds it 9 s)", firstMatchingLine(out.String(), "Error:"), reported && agree)
	if !reported {
		t.Fatalf("the late disarm was not reported as a revert (exit error %v):\n%s", err, out.String())
	}
	if !agree {
		t.Fatalf("node %+v, state toplevel %v, next plan %v; want good %s everywhere and an update planned:\n%s", truth, st["toplevel"], actions, good, planOut)
	}
}
