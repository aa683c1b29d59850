package node_test

// Lab acceptance test of data source fediversity_node_health in a `check {}` block,
// through the real binary: terraform-plugin-testing does not show a plan's warnings,
// and the proof is what `plan` prints and how it exits.

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// healthCheckConfig is the node's switch (lenient, so a failed unit deploys) and a
// check block judging it; extra holds more blocks. The check names the switch's
// toplevel, so an apply judges the node after its switch, never beside it.
func healthCheckConfig(node labtest.Node, toplevel, extra string) string {
	return switchConfig(node, sshBlock(node), toplevel, "strict = false") + fmt.Sprintf(`
check "n_health" {
  data "fediversity_node_health" "n" {
    node     = %q
    toplevel = fediversity_node_switch.n.toplevel
%s
%s
  }
  assert {
    condition     = data.fediversity_node_health.n.ok
    error_message = data.fediversity_node_health.n.message
  }
}
%s`, node.Name, sshBlock(node), accTimings, extra)
}

// sshHealthCheck is a check block named name judging node "<name>-node" at
// host:port with the host key pinned to hostKey, with a short node_wait.
func sshHealthCheck(name, host string, port int, hostKey string) string {
	return fmt.Sprintf(`
check "%[1]s_health" {
  data "fediversity_node_health" "%[1]s" {
    node = "%[1]s-node"
    ssh {
      host     = %[2]q
      port     = %[3]d
      host_key = %[4]q
    }
    timings {
      node_wait       = "5s"
      sample_interval = "1s"
    }
  }
  assert {
    condition     = data.fediversity_node_health.%[1]s.ok
    error_message = data.fediversity_node_health.%[1]s.message
  }
}
`, name, host, port, hostKey)
}

// unreachableCheck judges a node whose sshd does not listen: a port taken and freed
// again, so nothing answers on it.
func unreachableCheck(t *testing.T, node labtest.Node) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return sshHealthCheck("gone", "127.0.0.1", port, node.HostKey)
}

// refusedCheck judges the node through a pinned host key that is not its own (a fresh
// one): the transport refuses it, so the pass reaches no verdict and the data source
// fails; inside a check block that is a warning.
func refusedCheck(t *testing.T, node labtest.Node) string {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	wrongKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub)))
	return sshHealthCheck("refused", node.SSHHost, node.SSHPort, wrongKey)
}

// A node with a failed unit: `plan` warns naming the unit and exits 0; the pass did
// not restart the unit (its invocation is the same) and left the node's lock free (an
// apply right after it runs). An unreachable node in another check block is a warning
// too, and so is a node whose host key is refused (no verdict: the data source's error),
// not a failed plan. A healthy node gives no warning of its health.
func TestAccNodeHealthCheckWarnsAndPlanSucceeds(t *testing.T) {
	acctest.Lab(t)
	acctest.PreCheck(t)
	failed := labtest.BuildClosure(t, labtest.ClosureFailedUnit)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	// One instance per binary, so that the Terraform and the OpenTofu run can go at once.
	node := labtest.NewInstance(t, "health-"+filepath.Base(acctest.Binary.Path))
	c := acctest.NewCLIDir(t)

	c.Write(switchConfig(node, sshBlock(node), failed, "strict = false"))
	c.MustApply("deploying the failed-unit system")
	invocation := func() string {
		return strings.TrimSpace(nodeExec(t, node, "systemctl show -p InvocationID --value fedi-broken.service; systemctl is-failed fedi-broken.service || true"))
	}
	before := invocation()
	if !strings.HasSuffix(before, "failed") {
		t.Fatalf("after the deploy fedi-broken.service is not failed: %q", before)
	}

	c.Write(healthCheckConfig(node, failed, unreachableCheck(t, node)+refusedCheck(t, node)))
	out, code := c.Run("plan", "-no-color")
	flat := strings.Join(strings.Fields(out), " ")
	t.Logf("plan (exit %d):\n%s", code, out)
	if code != 0 {
		t.Fatalf("plan exited %d, want 0: an unhealthy node is a warning", code)
	}
	for _, want := range []string{
		"Warning: Check block assertion failed",
		"Unit fedi-broken.service failed on " + node.Name,
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("the plan does not say %q", want)
		}
	}
	for _, other := range []string{"gone-node", "refused-node"} {
		if !strings.Contains(flat, other) {
			t.Errorf("the plan does not warn about %s", other)
		}
	}
	if after := invocation(); after != before {
		t.Fatalf("the health check changed the unit: before %q, after %q", before, after)
	}

	// The pass released the node's lock: an apply (which takes it) runs at once.
	c.Write(healthCheckConfig(node, good, ""))
	out = c.MustApply("deploying the good system after the health check")
	flat = strings.Join(strings.Fields(out), " ")
	if strings.Contains(flat, "Check block assertion failed") {
		t.Fatalf("the healthy node still warns:\n%s", out)
	}
	out, code = c.Run("plan", "-no-color")
	flat = strings.Join(strings.Fields(out), " ")
	if code != 0 || strings.Contains(flat, "Check block assertion failed") || strings.Contains(flat, "Warning: Health check of") {
		t.Fatalf("plan of a healthy node exited %d with warnings of its health:\n%s", code, out)
	}
}
