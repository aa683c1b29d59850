package node_test

// Lab acceptance test of a restore cut off in the middle, through the real binary (see
// interrupt_lab_test.go for the harness).

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// A restore cut off between the instance's stop and its start: a system that bricks
// the node (it powers off) and changes the marker on the data volume is deployed, and
// the provider plugin is SIGKILLed as soon as the restore's journal (the snapshot
// fediversity-restoring-<time>-from-<set>) appears, with the instance stopped.
//
//   - The next plan says the restore did not finish, naming the set and the journal,
//     and plans a deploy (with the good configuration back, whose toplevel the state
//     already holds).
//   - The next apply finishes the restore first, and says so, then deploys and judges:
//     with snapshot.interrupted_restore "finish" (the default) the data volume holds
//     what it held at the set's time; with "abort" the instance was put back on the
//     state kept aside, so the volume holds the bricked run's marker.
//   - The journal is closed: the bricked root disk is kept as fediversity-bricked-<time>,
//     the volume's bricked state holds the changed marker; the plan after is empty.
//
// The two modes run side by side, each on a node of its own.
func TestAccNodeSwitchIncusRestoreInterrupted(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	for _, mode := range []struct {
		name, setting, marker, says string
	}{
		{"finish", "", "before", "was restored again and the instance started"},
		{"abort", "\n    interrupted_restore = \"abort\"", "after", "put back on the state kept aside"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			node, vol := labtest.NewInstanceWithDataVolume(t, "cli-rcut-"+mode.name)
			nodeExec(t, node, "printf before > /var/lib/fediversity/marker && sync")
			snap := "snapshot {\n    keep = 3" + mode.setting + "\n  }"
			seed := "cli-rcut-" + mode.name
			good := buildConfig(node, incusBlock(node), `{}`, `{ seed = "`+seed+`" }`, snap)
			bad := buildConfig(node, incusBlock(node), `{}`, `{ seed = "`+seed+`", brick = "1", marker = "after" }`, snap)
			c := acctest.NewCLIDir(t)
			c.Write(good)
			c.MustApply("deploying good")
			goodTop := c.StateAttrs(addr)["toplevel"]

			c.Write(bad)
			var out bytes.Buffer
			cli := c.Command(&out, "apply", "-auto-approve", "-no-color")
			if err := cli.Start(); err != nil {
				t.Fatal(err)
			}
			journal, atCut := cutAtJournal(t, node, cli.Process.Pid)
			_ = cli.Wait()
			// Operations the plugin had sent go on in incusd: let them end before looking.
			time.Sleep(3 * time.Second)
			status := strings.TrimSpace(labtest.Incus(t, "list", "^"+node.Instance+"$", "--format", "csv", "-c", "s"))
			t.Logf("plugin killed when journal %s appeared, the instance %s; after its in-flight operations: %s", journal, atCut, status)
			if status != "STOPPED" {
				t.Fatalf("the cut came after the restore started the instance (%s): the test did not cut between stop and start:\n%s", status, out.String())
			}

			c.Write(good)
			planOut, actions := c.PlanActions(addr)
			flat := strings.Join(strings.Fields(planOut), " ")
			if strings.Join(actions, ",") != "update" || !strings.Contains(flat, "did not finish") || !strings.Contains(flat, journal) || !strings.Contains(flat, "has not finished") {
				t.Fatalf("after the cut restore the plan's actions are %v; want [update] and a warning naming the unfinished restore and %s:\n%s", actions, journal, planOut)
			}

			applyOut := strings.Join(strings.Fields(c.MustApply("finishing the restore")), " ")
			if !strings.Contains(applyOut, "restore of rollback point fediversity-gen-") || !strings.Contains(applyOut, mode.says) {
				t.Fatalf("the apply does not say it finished the earlier restore (%q):\n%s", mode.says, applyOut)
			}
			st := c.StateAttrs(addr)
			verdict, _ := st["verdict"].(map[string]any)
			got := strings.TrimSpace(nodeExec(t, node, "timeout 60 systemctl is-system-running --wait; readlink -f /run/current-system; cat /var/lib/fediversity/marker"))
			agree := got == "running\n"+goodTop.(string)+"\n"+mode.marker && st["toplevel"] == goodTop && verdict["ok"] == true
			faultRow(t, "SIGKILL of the plugin in the middle of a restore (interrupted_restore "+mode.name+")",
				"next plan: update + \"did not finish\"; next apply: "+mode.says+", then deployed", agree)
			if !agree {
				t.Fatalf("after the finishing apply the node says %q (want running %s, marker %q); state toplevel=%v verdict.ok=%v", got, goodTop, mode.marker, st["toplevel"], verdict["ok"])
			}
			bricked := brickedOfJournal(journal)
			snaps := ourSnapshots(t, node)
			if strings.Contains(strings.Join(snaps, " "), "fediversity-restoring-") || !strings.Contains(strings.Join(snaps, " "), bricked) {
				t.Fatalf("after the finishing apply the snapshots are %v: want the journal closed, the bricked state kept as %s", snaps, bricked)
			}
			checkAsideMarker(t, node, vol, bricked, "after")
			if _, actions := c.PlanActions(addr); len(actions) != 1 || actions[0] != "no-op" {
				t.Fatalf("after the finishing apply the plan is %v, want no-op", actions)
			}
		})
	}
}

// cutAtJournal watches the instance's snapshots (bounded: 10 minutes, the switch, the
// wait for the bricked node and the restore) and, as soon as a restore's journal
// appears with the instance stopped, stops and then kills the provider plugin under
// the CLI cliPID. It returns the journal's name and the status seen at the cut. It
// reads through the Incus API directly, not the incus command, to cut within the
// restore's window (about a second on the lab's btrfs pool).
func cutAtJournal(t *testing.T, node labtest.Node, cliPID int) (journal, status string) {
	t.Helper()
	c, err := incusapi.NewFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		snaps, err := c.ListSnapshots(ctx, node.Instance)
		if err == nil {
			for _, s := range snaps {
				if strings.HasPrefix(s.Name, "fediversity-restoring-") {
					journal = s.Name
				}
			}
		}
		if journal != "" {
			plugin := pluginOf(cliPID)
			if plugin == 0 {
				t.Fatalf("no provider process under the CLI (pid %d) when the journal %s appeared", cliPID, journal)
			}
			_ = syscall.Kill(plugin, syscall.SIGSTOP)
			if st, err := c.GetInstanceState(ctx, node.Instance); err == nil {
				status = st.Status
			}
			_ = syscall.Kill(plugin, syscall.SIGKILL)
			return journal, status
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no restore journal appeared on %s within 10 minutes", node.Instance)
	return "", ""
}

// brickedOfJournal is the name the bricked state of a restore's journal is kept under
// once the restore finished: fediversity-bricked-<time>.
func brickedOfJournal(journal string) string {
	stamp := strings.TrimPrefix(strings.SplitN(journal, "-from-", 2)[0], "fediversity-restoring-")
	stamp, _, _ = strings.Cut(stamp, "-") // the step (begun, restored)
	return "fediversity-bricked-" + stamp
}

// Issue 39, item 4: a restore cut off between its journal and the instance's stop. The
// bricking system powers the node off, but a unit whose stop takes ten minutes holds the
// shutdown, so the instance keeps running the state that stopped answering (systemd
// says "stopping"); the plugin is SIGKILLed as soon as the journal appears, before the
// restore's stop could end. The next plan, although the instance answers, names the
// unfinished restore and plans a deploy. The next apply finishes the restore: it tells a bricked
// instance that runs under a "begun" journal from one its restore started, restores the
// set (root disk and data volume), starts it, says so, and deploys. The node runs its
// previous system with the data volume's old marker, the journal is closed and the
// bricked state kept. On the current main the next apply took "it runs" for "the
// restore started it", closed the journal and restored nothing.
func TestAccNodeSwitchIncusRestoreCutBeforeTheStop(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	node, vol := labtest.NewInstanceWithDataVolume(t, "cli-rcut-run")
	nodeExec(t, node, "printf before > /var/lib/fediversity/marker && sync")
	snap := "snapshot {\n    keep = 3\n  }"
	seed := fmt.Sprintf("cli-rcut-run-%d", time.Now().UnixNano())
	good := buildConfig(node, incusBlock(node), `{}`, `{ seed = "`+seed+`" }`, snap)
	bad := buildConfig(node, incusBlock(node), `{}`, `{ seed = "`+seed+`", brick = "1", marker = "after", slowStop = "600" }`, snap)
	c := acctest.NewCLIDir(t)
	c.Write(good)
	c.MustApply("deploying good")
	goodTop := c.StateAttrs(addr)["toplevel"]

	c.Write(bad)
	var out bytes.Buffer
	cli := c.Command(&out, "apply", "-auto-approve", "-no-color")
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	journal, atCut := cutAtJournal(t, node, cli.Process.Pid)
	_ = cli.Wait()
	t.Logf("plugin killed when journal %s appeared, the instance %s", journal, atCut)
	if atCut != "Running" || !strings.Contains(journal, "-begun-from-") {
		t.Fatalf("the cut did not come between the journal and the stop (journal %s, instance %s):\n%s", journal, atCut, out.String())
	}

	// The instance answers, but the plan knows a restore is owed: it names the journal
	// and plans a deploy, also with the configuration that names the state's system.
	c.Write(good)
	planOut, actions := c.PlanActions(addr)
	if flatPlan := strings.Join(strings.Fields(planOut), " "); strings.Join(actions, ",") != "update" || !strings.Contains(flatPlan, journal) || !strings.Contains(flatPlan, "has not finished") {
		t.Fatalf("after the cut the plan's actions are %v; want [update] and a warning naming the unfinished restore %s:\n%s", actions, journal, planOut)
	}
	applyOut := strings.Join(strings.Fields(c.MustApply("finishing the restore")), " ")
	said := strings.Contains(applyOut, "still ran the state that stopped answering") && strings.Contains(applyOut, "was restored and the instance started")
	st := c.StateAttrs(addr)
	got := strings.TrimSpace(nodeExec(t, node, "timeout 60 systemctl is-system-running --wait; readlink -f /run/current-system; cat /var/lib/fediversity/marker"))
	agree := said && got == "running\n"+goodTop.(string)+"\nbefore" && st["toplevel"] == goodTop
	faultRow(t, "SIGKILL of the plugin between a restore's journal and its stop (the bricked instance still runs)", "next apply: \"still ran the state that stopped answering … restored\"", agree)
	if !said {
		t.Fatalf("the apply does not say it restored the bricked instance that still ran:\n%s", applyOut)
	}
	if !agree {
		t.Fatalf("after the finishing apply the node says %q (want running %s, marker \"before\"); state toplevel=%v", got, goodTop, st["toplevel"])
	}
	bricked := brickedOfJournal(journal)
	snaps := strings.Join(ourSnapshots(t, node), " ")
	if strings.Contains(snaps, "fediversity-restoring-") || !strings.Contains(snaps, bricked) {
		t.Fatalf("after the finishing apply the snapshots are %s: want the journal closed, the bricked state kept as %s", snaps, bricked)
	}
	checkAsideMarker(t, node, vol, bricked, "after")
}
