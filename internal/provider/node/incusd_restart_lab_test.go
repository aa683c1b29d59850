package node_test

// Lab acceptance test of a deploy over the Incus transport while the Incus daemon
// restarts, through the real binary (see interrupt_lab_test.go for the harness).
//
// The daemon is the lab's only one, shared by every lab on this machine: the test
// restarts it once, during one 15 s switch. The containers and their proxy devices
// outlive a daemon restart (the LXC monitors and forkproxy processes are not the
// daemon), as with `systemctl restart incus` on a host with systemd.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// incusdPIDFile and incusdLog are where lab/lab.sh keeps the daemon it starts on a
// machine without systemd.
const (
	incusdPIDFile = "/run/fediversity-incusd.pid"
	incusdLog     = "/var/log/fediversity-incusd.log"
	// incusdStopWait is how long a SIGTERMed daemon may take to stop: the lab's
	// core.shutdown_timeout (1 minute) and a margin.
	incusdStopWait = 90 * time.Second
)

// restartIncusd restarts the Incus daemon: with systemctl where systemd runs the host,
// else the way lab.sh runs it (SIGTERM to the daemon, then the same command line). It
// waits, bounded, until the daemon answers again.
func restartIncusd(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		if out, err := exec.Command("systemctl", "restart", "incus").CombinedOutput(); err != nil {
			t.Fatalf("systemctl restart incus: %v: %s", err, out)
		}
	} else {
		b, err := os.ReadFile(incusdPIDFile)
		if err != nil {
			t.Fatalf("no systemd and no %s (lab.sh starts incusd and writes it): %v", incusdPIDFile, err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if pid <= 1 || !strings.Contains(string(cmdline), "incusd\x00--group") {
			t.Fatalf("%s names process %d, which is not the Incus daemon (%q)", incusdPIDFile, pid, cmdline)
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatalf("stopping incusd (%d): %v", pid, err)
		}
		// On SIGTERM incusd waits for its running operations (a deploy's exec sessions)
		// up to core.shutdown_timeout, which lab.sh sets to one minute. Past that and a
		// margin it is killed, as systemd kills it after the unit's TimeoutStopSec; a
		// killed daemon is a restart too, and the test says which one it saw. Either
		// way the daemon is started again: the suites after this one need it.
		stopping := time.Now()
		for time.Since(stopping) < incusdStopWait && syscall.Kill(pid, 0) == nil {
			time.Sleep(100 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			t.Logf("incusd (%d) did not stop within %s of SIGTERM: killing it, as systemd would", pid, incusdStopWait)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(100 * time.Millisecond)
			}
		} else {
			t.Logf("incusd (%d) stopped %s after SIGTERM", pid, time.Since(stopping).Round(time.Millisecond))
		}
		logf, err := os.OpenFile(incusdLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = logf.Close() }()
		d := exec.Command("/usr/libexec/incus/incusd", "--group", "root", "--logfile", incusdLog)
		d.Stdout, d.Stderr = logf, logf
		d.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // it outlives the test
		if err := d.Start(); err != nil {
			t.Fatalf("starting incusd again: %v", err)
		}
		if err := os.WriteFile(incusdPIDFile, []byte(strconv.Itoa(d.Process.Pid)+"\n"), 0o644); err != nil {
			t.Errorf("writing %s: %v", incusdPIDFile, err)
		}
		_ = d.Process.Release()
	}
	for i := 0; i < 120; i++ {
		if _, err := labtest.IncusErr("info"); err == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("incusd does not answer 60 s after its restart (see %s)", incusdLog)
}

// A deploy over the Incus transport while the daemon restarts: the restart comes during
// the 15 s switch (the switch runs detached on the node, so it goes on). The apply
// either succeeds, and then the node runs and boots what the state says with a good
// verdict, or fails saying so; the next apply converges either way, and the plan after
// it is empty.
func TestAccNodeSwitchIncusdRestart(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	slow := labtest.BuildClosure(t, labtest.ClosureSlowSwitch)
	node := labtest.NewInstance(t, "cli-incusd")
	cfg := func(top string) string {
		return switchConfig(node, incusBlock(node), top, "") + "\noutput \"toplevel\" {\n  value = fediversity_node_switch.n.toplevel\n}\n"
	}
	c := acctest.NewCLIDir(t)
	c.Write(cfg(good))
	c.MustApply("deploying good")

	c.Write(cfg(slow))
	var out bytes.Buffer
	cli := c.Command(&out, "apply", "-auto-approve", "-no-color")
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	labtest.WaitSwitchRunning(t, node)
	restarted := time.Now()
	restartIncusd(t)
	t.Logf("incusd restarted in %s", time.Since(restarted).Round(time.Millisecond))
	applyErr := cli.Wait()
	truth := readNodeTruth(t, node)
	st := c.StateAttrs(addr)
	verdict, _ := st["verdict"].(map[string]any)
	saw := "apply succeeded"
	if applyErr == nil {
		// A success must be true: the node runs and boots it, and the state says so.
		if truth.running != slow || truth.profile != slow || st["toplevel"] != slow || verdict["ok"] != true || fmt.Sprint(st["generation"]) != truth.generation {
			t.Fatalf("the apply succeeded but node %+v, state toplevel=%v generation=%v verdict.ok=%v:\n%s", truth, st["toplevel"], st["generation"], verdict["ok"], out.String())
		}
	} else {
		saw = "apply failed: " + firstMatchingLine(out.String(), "Error:")
		if st["toplevel"] == slow && verdict["ok"] == true {
			t.Fatalf("the apply failed but the state claims the new system with a good verdict:\n%s", out.String())
		}
		_, actions := c.PlanActions(addr)
		if strings.Join(actions, ",") != "update" {
			t.Fatalf("after the failed apply the plan's actions are %v, want [update] (node %+v):\n%s", actions, truth, out.String())
		}
		c.MustApply("converging after the restart")
		truth = readNodeTruth(t, node)
		st = c.StateAttrs(addr)
		verdict, _ = st["verdict"].(map[string]any)
	}
	agree := truth.running == slow && truth.profile == slow && st["toplevel"] == slow && verdict["ok"] == true && fmt.Sprint(st["generation"]) == truth.generation
	faultRow(t, "incusd restarted during the switch", saw, agree)
	if !agree {
		t.Fatalf("after converging: node %+v, state toplevel=%v generation=%v verdict.ok=%v", truth, st["toplevel"], st["generation"], verdict["ok"])
	}
	if _, actions := c.PlanActions(addr); len(actions) != 1 || actions[0] != "no-op" {
		t.Fatalf("after converging the plan is %v, want no-op", actions)
	}
}
