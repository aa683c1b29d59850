package node_test

// Lab acceptance tests of issue 39's safety nets over SSH, through the real binaries
// (Terraform, or OpenTofu with TF_ACC_TERRAFORM_PATH), on the NixOS-shaped lab node: a
// retry never disarms a lock-out revert before a login made after the guarded switch
// proves the new system accepts logins (item 1); a run interrupted while it waits for
// an earlier switch releases the node's lock (item 2); a begun revert whose unit died
// does not keep the node from being deployed (item 3). They reuse the CLI helpers of
// interrupt_lab_test.go and revert_lab_test.go.

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// buildAccNode builds testdata/node.nix with args (seed, lockout, slowSwitch, …) and
// returns its toplevel.
func buildAccNode(t *testing.T, args map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	top, err := nixstore.Build(ctx, nixstore.BuildSpec{File: testdataFile("node.nix"), ArgStr: args})
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// flat is out with its runs of blanks (Terraform's wrapping) made single spaces.
func flat(out string) string { return strings.Join(strings.Fields(out), " ") }

// waitNodeFile waits (bounded: 5 min) until the node's shell test cond holds, and fails
// with the apply's output if a, when given, ended first.
func waitNodeFile(t *testing.T, node labtest.Node, a *runningApply, what, cond string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		if a != nil {
			select {
			case err := <-a.done:
				a.done <- err
				t.Fatalf("the apply ended (%v) before %s:\n%s", err, what, a.out.String())
			default:
			}
		}
		if out, _ := labtest.IncusErr("exec", node.Instance, "--", "sh", "-c", cond+" && echo yes"); strings.TrimSpace(out) == "yes" {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not within 5 min on %s", what, node.Instance)
}

// Item 1: the CLI and its plugin are SIGKILLed during the slow switch of a system that
// stops sshd once activated (new logins are refused; open sessions go on). An apply
// started at once connects while that switch runs, waits for it, and does not take its
// own connection, older than the switch's end, for proof that the new system accepts
// logins: it logs in anew, the node refuses, and the earlier run's revert switches the
// node back and takes the lock. The retry fails saying the node locks out new logins;
// the node runs and boots the good system, which the state still names, and the next
// plan deploys the failing system again. On the current main the retry disarmed the
// revert over its old connection and reported ok for a node refusing every login.
func TestAccNodeSwitchRetryAfterALockingOutSwitch(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	node := labtest.NewInstance(t, "cli-retry-lockout")
	seed := fmt.Sprintf("retry-lockout-%d", time.Now().UnixNano())
	good := buildAccNode(t, map[string]string{"seed": seed})
	bad := buildAccNode(t, map[string]string{"seed": seed, "lockout": "1", "slowSwitch": "30"})
	c := acctest.NewCLIDir(t)
	c.Write(cliSwitchConfigTimings(node, good, revertTimings))
	c.MustApply("deploying good")

	c.Write(cliSwitchConfigTimings(node, bad, revertTimings))
	first := startApply(t, c)
	first.waitSwitch(t, node)
	killRun(t, first)
	retry := startApply(t, c)
	err := retry.wait(t)
	out := flat(retry.out.String())
	reported := err != nil && strings.Contains(out, "no new login reached the node") && strings.Contains(out, "stops new logins") &&
		strings.Contains(out, "switched the node back to "+good)
	// The revert is done once the retry fails: nothing changes after it.
	time.Sleep(revertConfirm + 10*time.Second)
	truth := readNodeTruth(t, node)
	st := c.StateAttrs(addr)
	_, actions := c.PlanActions(addr)
	agree := truth.running == good && truth.profile == good && st["toplevel"] == good && strings.Join(actions, ",") == "update"
	if i := strings.Index(out, "Error:"); i >= 0 {
		t.Logf("the retry: %s", out[i:])
	}
	faultRow(t, "SIGKILL during the slow switch of a system that refuses new logins, apply again at once", firstMatchingLine(retry.out.String(), "Error:"), reported && agree)
	if !reported {
		t.Fatalf("the retry did not fail saying the node locks out new logins and was switched back (exit %v):\n%s", err, retry.out.String())
	}
	if !agree {
		t.Fatalf("node %+v, state toplevel %v, next plan %v; want the good system %s everywhere and an update planned", truth, st["toplevel"], actions, good)
	}
	if got := strings.TrimSpace(nodeExec(t, node, "systemctl is-active ssh.service")); got != "active" {
		t.Fatalf("after the revert sshd is %q, want active (the good system starts it)", got)
	}
}

// Item 2: an apply waits for an earlier run's switch (its run was SIGKILLed), and is
// interrupted there (SIGINT, as Ctrl-C sends it). The lock it took is released at once:
// no lock file is left, and a second deployer (another state directory, lock_wait 5 s)
// takes the node at once and deploys. On the current main the lock stayed, its
// heartbeat kept fresh while the plugin lived, and then until it went stale (60 s).
func TestAccNodeSwitchCtrlCWhileWaitingReleasesTheLock(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	node := labtest.NewInstance(t, "cli-ctrlc-lock")
	seed := fmt.Sprintf("ctrlc-lock-%d", time.Now().UnixNano())
	good := buildAccNode(t, map[string]string{"seed": seed})
	slow := buildAccNode(t, map[string]string{"seed": seed, "slowSwitch": "60"})
	c := acctest.NewCLIDir(t)
	c.Write(cliSwitchConfigTimings(node, good, revertTimings))
	c.MustApply("deploying good")

	c.Write(cliSwitchConfigTimings(node, slow, revertTimings))
	first := startApply(t, c)
	first.waitSwitch(t, node)
	killRun(t, first)
	waiting := startApply(t, c)
	// The second run holds the lock (its token is not the killed run's) while the
	// earlier switch still runs: it is waiting for it.
	killedToken := strings.TrimSpace(nodeExec(t, node, "sed -n 's/^token=//p' /run/fediversity/node.lock"))
	waitNodeFile(t, node, waiting, "the second run took the lock",
		`t=$(sed -n 's/^token=//p' /run/fediversity/node.lock 2>/dev/null); [ -n "$t" ] && [ "$t" != "`+killedToken+`" ] && systemctl is-active --quiet 'fediversity-switch-*'`)
	time.Sleep(2 * time.Second) // it is in its wait now
	_ = waiting.cmd.Process.Signal(syscall.SIGINT)
	werr := waiting.wait(t)
	left := strings.TrimSpace(nodeExec(t, node, "cat /run/fediversity/node.lock 2>/dev/null; true"))
	other := acctest.NewCLIDir(t)
	other.Write(cliSwitchConfigTimings(node, slow, revertTimings+"\n    lock_wait = \"5s\""))
	start := time.Now()
	otherOut, otherCode := other.Apply()
	took := time.Since(start)
	agree := werr != nil && left == "" && otherCode == 0
	faultRow(t, "Ctrl-C while waiting for an earlier switch, then a second deployer", fmt.Sprintf("lock left: %q; second deployer: exit %d after %s", left, otherCode, took.Round(time.Second)), agree)
	if werr == nil {
		t.Fatalf("the interrupted apply succeeded:\n%s", waiting.out.String())
	}
	if left != "" {
		t.Fatalf("the interrupted run left the node's lock behind:\n%s\n--- its output:\n%s", left, waiting.out.String())
	}
	if otherCode != 0 {
		t.Fatalf("the second deployer did not get the node (lock_wait 5s): exit %d\n%s", otherCode, otherOut)
	}
	if truth := readNodeTruth(t, node); truth.running != slow || truth.profile != slow {
		t.Fatalf("after the second deployer the node is %+v, want %s", truth, slow)
	}
}

// Item 3: a revert that began (the new login reached the node only after its window: the
// proxy holds new connections 9 s, confirm_timeout is 5 s) is switching the node back to
// a system whose switch takes 40 s when the run that armed it is killed and the revert's
// unit is stopped (systemctl stop; its time limit or an out-of-memory kill end it the
// same way). Its state stays "begun" on the node. The next apply takes the lock once the dead revert's heartbeat is stale, hears
// that the revert died, says so with what the node runs, and deploys. On the current
// main every later deploy waited timings.switch_timeout for the "begun" revert and
// failed, until the node rebooted or someone removed its state file by hand.
func TestAccNodeSwitchRevertWhoseUnitDied(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	node := labtest.NewInstance(t, "cli-revert-died")
	proxy := startHoldingProxy(t, net.JoinHostPort(node.SSHHost, strconv.Itoa(node.SSHPort)))
	viaProxy := node
	viaProxy.SSHPort = proxy.port()
	seed := fmt.Sprintf("revert-died-%d", time.Now().UnixNano())
	slowBack := buildAccNode(t, map[string]string{"seed": seed, "slowSwitch": "40"})
	next := buildAccNode(t, map[string]string{"seed": seed + "-next"})
	const timings = revertTimings + "\n    switch_timeout = \"2m\""
	c := acctest.NewCLIDir(t)
	c.Write(cliSwitchConfigTimings(viaProxy, slowBack, timings))
	c.MustApply("deploying the system whose switch takes 40 s")

	c.Write(cliSwitchConfigTimings(viaProxy, next, timings))
	first := startApply(t, c)
	first.waitSwitch(t, node)
	proxy.hold.Store(int64(revertConfirm + 4*time.Second)) // every new login is late
	waitNodeFile(t, node, nil, "the revert began", `grep -qx begun /run/fediversity/fediversity-revert-*.state`)
	// The run that armed it is gone (a run still waiting would hear of the death
	// itself), and the revert's unit is stopped while it switches back.
	killRun(t, first)
	nodeExec(t, node, "systemctl stop 'fediversity-revert-*'")
	proxy.hold.Store(0)
	if st := strings.TrimSpace(nodeExec(t, node, "cat /run/fediversity/fediversity-revert-*.state")); st != "begun" {
		t.Fatalf("the stopped revert's state is %q, want it left begun", st)
	}
	out, code := c.Apply()
	f := flat(out)
	said := strings.Contains(f, "its unit stopped before it ended")
	truth := readNodeTruth(t, node)
	st := c.StateAttrs(addr)
	agree := code == 0 && said && truth.running == next && truth.profile == next && st["toplevel"] == next
	if i := strings.Index(f, "an earlier run left a revert"); i >= 0 {
		t.Logf("the next apply: %s", f[i:min(len(f), i+600)])
	}
	faultRow(t, "a begun revert whose unit was stopped, then the next apply", firstMatchingLine(out, "unit stopped", "Error:"), agree)
	if code != 0 || !said {
		t.Fatalf("the next apply (exit %d) did not deploy over the dead revert, saying so:\n%s", code, out)
	}
	if !agree {
		t.Fatalf("node %+v, state toplevel %v; want %s", truth, st["toplevel"], next)
	}
}
