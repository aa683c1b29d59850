package node_test

// Acceptance tests of fediversity_node_switch on the lab: real sshd and incusd, real nix
// copies, real systemd in Incus containers. Each test deploys to a throwaway instance
// (labtest.NewInstance), so tests neither disturb the shared nodes nor each other.
// They need TF_ACC=1 and FEDIVERSITY_LAB=1 and run under Terraform and OpenTofu
// (see provider_test.go).
//
// An SSH connection cut during the switch is proven here through a whole apply
// (TestAccNodeSwitchSSHConnectionCutDuringSwitch: the node's loopback proxy is removed
// while the slow-switch closure activates) and at the transport level in
// internal/transport/ssh TestLabDeploy (the TCP connection under SSH is closed).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/submission"
)

// Small windows keep the suite short; the verdict logic does not depend on them.
const accTimings = `
  timings {
    node_wait       = "30s"
    settle          = "1s"
    watch           = "4s"
    sample_interval = "1s"
  }`

// sshBlock is the transport block of a lab node over its loopback SSH proxy.
func sshBlock(n labtest.Node) string {
	return fmt.Sprintf(`
  ssh {
    host     = %q
    port     = %d
    host_key = %q
  }`, n.SSHHost, n.SSHPort, n.HostKey)
}

func incusBlock(n labtest.Node) string {
	return fmt.Sprintf(`
  incus {
    instance = %q
    project  = %q
  }`, n.Instance, n.Project)
}

// switchConfig is one fediversity_node_switch "n" with the given transport and extras.
func switchConfig(node labtest.Node, transport, toplevel, extra string) string {
	return acctest.Config(acctest.LabProvider() + fmt.Sprintf(`
resource "fediversity_node_switch" "n" {
  node     = %q
  toplevel = %q
%s
%s
%s
}
`, node.Name, toplevel, transport, accTimings, extra))
}

const addr = "fediversity_node_switch.n"

func verdictList(name string, want ...string) statecheck.StateCheck {
	return verdictListCheck{name: name, want: want}
}

// verdictListCheck checks one list of the verdict: exactly len(want) units, each starting
// with its want. Unlike knownvalue.ListExact, a failure prints the units the verdict
// named, so a run that fails on a loaded machine says which unit was extra.
type verdictListCheck struct {
	name string
	want []string
}

func (c verdictListCheck) CheckState(_ context.Context, req statecheck.CheckStateRequest, resp *statecheck.CheckStateResponse) {
	if req.State == nil || req.State.Values == nil || req.State.Values.RootModule == nil {
		resp.Error = fmt.Errorf("verdict.%s: no state", c.name)
		return
	}
	for _, r := range req.State.Values.RootModule.Resources {
		if r.Address != addr {
			continue
		}
		verdict, _ := r.AttributeValues["verdict"].(map[string]any)
		raw, _ := verdict[c.name].([]any)
		got := make([]string, 0, len(raw))
		for _, v := range raw {
			got = append(got, fmt.Sprint(v))
		}
		ok := len(got) == len(c.want)
		for i := 0; ok && i < len(got); i++ {
			ok = strings.HasPrefix(got[i], c.want[i])
		}
		if !ok {
			resp.Error = fmt.Errorf("verdict.%s = %q, want %d unit(s) starting with %q; whole verdict: %v", c.name, got, len(c.want), c.want, verdict)
		}
		return
	}
	resp.Error = fmt.Errorf("verdict.%s: %s is not in the state", c.name, addr)
}

func verdictBool(name string, v bool) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New("verdict").AtMapKey(name), knownvalue.Bool(v))
}

// nodeExec runs a shell command on a lab instance (test setup only).
func nodeExec(t *testing.T, n labtest.Node, script string) string {
	t.Helper()
	return labtest.Incus(t, "exec", n.Instance, "--", "sh", "-c", script)
}

// SSH: a good closure deploys with a clean verdict and the next plan is empty; an
// out-of-band switch shows as drift of toplevel and the next apply puts it back; the
// node can be imported by its address.
func TestAccNodeSwitchSSHGoodDriftImport(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	goodV2 := labtest.BuildClosure(t, labtest.ClosureGoodV2)
	node := labtest.NewInstance(t, "acc-ssh-good")
	cfgGood := switchConfig(node, sshBlock(node), good, "")

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				// good-v2 first, so the node's store holds it for the out-of-band switch.
				Config: switchConfig(node, sshBlock(node), goodV2, ""),
			},
			{
				Config: cfgGood,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("toplevel"), knownvalue.StringExact(good)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("generation"), knownvalue.NotNull()),
					verdictBool("ok", true),
					verdictBool("unread", false),
					verdictBool("unreachable", false),
					verdictList("failed"),
					verdictList("set_aside"),
					verdictList("restart_loop"),
					verdictList("never_spawned_closure"),
					verdictList("never_spawned_host"),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("verdict").AtMapKey("switch_result"), knownvalue.StringExact("ok")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("verdict").AtMapKey("system_state"), knownvalue.StringExact("running")),
				},
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
			},
			{
				// Someone switches the node by hand: the plan shows toplevel changing back.
				PreConfig: func() {
					nodeExec(t, node, goodV2+"/bin/switch-to-configuration switch")
				},
				Config: cfgGood,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("toplevel"), knownvalue.StringExact(good)),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: func(*terraform.State) error {
					if got := strings.TrimSpace(nodeExec(t, node, "readlink -f /run/current-system")); got != good {
						return fmt.Errorf("after the repair the node runs %s, want %s", got, good)
					}
					return nil
				},
			},
			{
				ResourceName:  addr,
				ImportState:   true,
				ImportStateId: fmt.Sprintf("ssh://root@%s:%d/%s?known_hosts_file=%s", node.SSHHost, node.SSHPort, node.Name, writeKnownHosts(t, node)),
				ImportStateCheck: func(states []*terraform.InstanceState) error {
					if len(states) != 1 {
						return fmt.Errorf("imported %d states", len(states))
					}
					s := states[0].Attributes
					if s["toplevel"] != good || s["node"] != node.Name || s["ssh.port"] != fmt.Sprint(node.SSHPort) {
						return fmt.Errorf("imported toplevel=%q node=%q ssh.port=%q, want %q %q %d", s["toplevel"], s["node"], s["ssh.port"], good, node.Name, node.SSHPort)
					}
					return nil
				},
			},
		},
	})
}

// writeKnownHosts writes a known_hosts file pinning the instance's key.
func writeKnownHosts(t *testing.T, n labtest.Node) string {
	t.Helper()
	f := t.TempDir() + "/known_hosts"
	if err := os.WriteFile(f, []byte(fmt.Sprintf("[%s]:%d %s\n", n.SSHHost, n.SSHPort, n.HostKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// verdictScenarioSteps are the verdict classes (docs/design.md#verdict-classes) through one transport, as
// steps on one node: a failed unit fails a strict create and the next apply (taint),
// lenient mode succeeds naming it, a failed unit fails a strict update and the next
// apply (prior state kept), a restart loop is named and does not fail, a 214 unit is a
// host fault, a condition-skipped unit is named and not restarted, and a failed unit
// the configuration does not define is set aside.
func verdictScenarioSteps(t *testing.T, node labtest.Node, transport string) []resource.TestStep {
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	failed := labtest.BuildClosure(t, labtest.ClosureFailedUnit)
	loop := labtest.BuildClosure(t, labtest.ClosureRestartLoop)
	hostFault := labtest.BuildClosure(t, labtest.ClosureHostFault)
	skipped := labtest.BuildClosure(t, labtest.ClosureSkipped)
	failedErr := regexp.MustCompile(`Unit\s+fedi-broken\.service\s+failed\s+on\s+` + regexp.QuoteMeta(node.Name))
	cfg := func(top, extra string) string { return switchConfig(node, transport, top, extra) }
	// The watch of a step is the shortest that shows what it asserts. A step whose
	// units are all settled when the switch ends (a good system, whose switch starts
	// its units and waits for them; a unit skipped on its condition, which the switch's
	// start judged and no one restarts) shows its verdict in the first sample: it
	// watches for the least the engine takes, two samples a second apart. The others
	// keep accTimings' 4 s: a failed unit the deploy restarts (--no-block) must be
	// failed again by the last sample, however loaded the machine; a restart loop must
	// be seen restarting; the outsider fails only after the switch released its lock.
	settled := func(top, extra string) string {
		return strings.Replace(cfg(top, extra), `watch           = "4s"`, `watch           = "1s"`, 1)
	}

	return []resource.TestStep{
		{Config: cfg(failed, ""), ExpectError: failedErr},
		// A failed create: the resource is tainted, so the next apply deploys and fails again.
		{Config: cfg(failed, ""), ExpectError: failedErr},
		{
			Config: cfg(failed, "strict = false"),
			ConfigStateChecks: []statecheck.StateCheck{
				verdictBool("ok", true),
				verdictList("failed", "fedi-broken.service"),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("verdict").AtMapKey("reasons"), knownvalue.ListSizeExact(1)),
			},
		},
		{Config: settled(good, ""), ConfigStateChecks: []statecheck.StateCheck{verdictBool("ok", true), verdictList("failed")}},
		// A failed update: the prior state is kept, so the next apply fails again.
		{Config: cfg(failed, ""), ExpectError: failedErr},
		{Config: cfg(failed, ""), ExpectError: failedErr},
		{
			Config: cfg(loop, ""),
			ConfigStateChecks: []statecheck.StateCheck{
				verdictBool("ok", true),
				verdictList("restart_loop", "fedi-loop.service"),
				verdictList("failed"),
			},
		},
		{
			Config: cfg(hostFault, ""),
			ConfigStateChecks: []statecheck.StateCheck{
				verdictBool("ok", true),
				verdictList("never_spawned_host", "fedi-rt.service (214/SETSCHEDULER)"),
				verdictList("never_spawned_closure"),
				verdictList("failed"),
			},
		},
		{
			Config: settled(skipped, ""),
			ConfigStateChecks: []statecheck.StateCheck{
				verdictBool("ok", true),
				verdictList("skipped", "fedi-skipped.service"),
				verdictList("restarted"),
			},
		},
		{
			// A unit the configuration does not define fails on the node: set aside.
			// NixOS's switch-to-configuration forgets every failed unit (reset-failed,
			// before it starts units), so an outsider failed before the deploy is gone
			// from the verdict; this one fails after the switch: it waits for the
			// activation to move /run/current-system, then for the switch to release
			// its lock, and exits 1. It is transient (no file in the system's unit
			// directory), so the switch neither stops nor restarts it. The script sets
			// its own PATH, as a unit's PATH on NixOS is systemd's bin directory alone.
			PreConfig: func() {
				nodeExec(t, node, outsiderScript)
			},
			Config: cfg(good, "strict = true # redeploy"),
			ConfigStateChecks: []statecheck.StateCheck{
				verdictBool("ok", true),
				verdictList("set_aside", "fedi-outsider.service"),
				verdictList("failed"),
			},
		},
	}
}

// outsiderScript starts fedi-outsider.service, a transient unit that fails once the
// next switch has finished (see the set-aside step of verdictScenarioSteps). Its script
// is a file, so no $ of it is expanded by systemd-run or PID 1.
const outsiderScript = `cat >/run/fedi-outsider.sh <<'EOF'
PATH=/run/current-system/sw/bin
was=$(readlink /run/current-system)
i=0
while [ "$(readlink /run/current-system)" = "$was" ]; do
	i=$((i + 1))
	[ "$i" -lt 6000 ] || exit 0
	sleep 0.1
done
flock /run/nixos/switch-to-configuration.lock true
exit 1
EOF
systemd-run --unit=fedi-outsider /bin/sh /run/fedi-outsider.sh >/dev/null 2>&1
systemctl is-active fedi-outsider.service >/dev/null`

func TestAccNodeSwitchSSHVerdictClasses(t *testing.T) {
	acctest.Lab(t)
	node := labtest.NewInstance(t, "acc-ssh-classes")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps:                    verdictScenarioSteps(t, node, sshBlock(node)),
	})
}

// An unknown host key is refused, showing the fingerprint, before anything is copied.
func TestAccNodeSwitchSSHUnknownHostKey(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	nodes := labtest.Nodes(t)
	node := nodes[0]
	other := nodes[len(nodes)-1]
	if other.HostKey == node.HostKey {
		t.Fatal("the lab nodes share a host key (lab.sh gives each its own): cannot make a wrong pin")
	}
	wrong := node
	wrong.HostKey = other.HostKey // a real key, but not this node's
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config:      switchConfig(wrong, sshBlock(wrong), good, ""),
			ExpectError: regexp.MustCompile(`(?i)host key[\s\S]*SHA256:`),
		}},
	})
}

func TestAccNodeSwitchIncusVerdictClasses(t *testing.T) {
	acctest.Lab(t)
	node := labtest.NewInstance(t, "acc-incus-classes")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps:                    verdictScenarioSteps(t, node, incusBlock(node)),
	})
}

// buildConfig deploys testdata/node.nix built by the provider, with a node plan.
func buildConfig(node labtest.Node, transport, plan, args, extra string) string {
	return acctest.Config(acctest.LabProvider() + fmt.Sprintf(`
resource "fediversity_node_switch" "n" {
  node      = %q
  node_plan = jsonencode(%s)
  build {
    file = %q
    args = %s
  }
%s
%s
%s
}
`, node.Name, plan, testdataFile("node.nix"), args, transport, accTimings, extra))
}

func testdataFile(name string) string {
	wd, _ := os.Getwd()
	return wd + "/testdata/" + name
}

// ourSnapshots lists the instance's snapshots this provider took.
func ourSnapshots(t *testing.T, n labtest.Node) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(labtest.Incus(t, "snapshot", "list", n.Instance, "--format", "csv", "-c", "n"), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "fediversity-") {
			out = append(out, l)
		}
	}
	return out
}

// Incus: the provider builds the closure with the written node plan, takes a
// snapshot before each switch and keeps exactly `keep`; a stopped instance in Read keeps
// the state (with a warning) instead of dropping it; the node imports by address.
func TestAccNodeSwitchIncusBuildSnapshotsRead(t *testing.T) {
	acctest.Lab(t)
	node := labtest.NewInstance(t, "acc-incus-build")
	snap := "snapshot {\n    keep = 2\n  }"
	cfg := func(plan string) string { return buildConfig(node, incusBlock(node), plan, `{ seed = "acc" }`, snap) }
	planOnNode := func(want string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			got := strings.TrimSpace(nodeExec(t, node, "cat /run/current-system/etc/fediversity/node-plan.json"))
			if got != want {
				return fmt.Errorf("the node's closure was built from plan %s, want %s", got, want)
			}
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg(`{ domain = "a.example" }`),
				Check:  planOnNode(`{"domain":"a.example"}`),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("toplevel"), knownvalue.StringRegexp(regexp.MustCompile(`^/nix/store/.*-nixos-system-fedi-acc$`))),
				},
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{Config: cfg(`{ domain = "b.example" }`), Check: planOnNode(`{"domain":"b.example"}`)},
			{
				Config: cfg(`{ domain = "c.example" }`),
				Check: func(s *terraform.State) error {
					if err := planOnNode(`{"domain":"c.example"}`)(s); err != nil {
						return err
					}
					if got := ourSnapshots(t, node); len(got) != 2 {
						return fmt.Errorf("after 3 deploys with keep = 2 the instance has snapshots %v, want exactly 2", got)
					}
					return nil
				},
			},
			{
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     fmt.Sprintf("incus://local/%s/%s", node.Project, node.Instance),
				ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{
					"build", "derivation", "node_plan", "snapshot", "timings", "timeouts", "verdict", "changes", "generation", "incus.remote",
				},
			},
			{
				// The node is down: refresh keeps the state and warns; nothing is planned.
				PreConfig: func() { labtest.Incus(t, "stop", "--force", node.Instance) },
				Config:    cfg(`{ domain = "c.example" }`),
				PlanOnly:  true,
			},
		},
	})
}

// Incus: a closure that leaves the node unreachable after the switch: the snapshot
// taken before it is restored, the instance started, and the apply fails saying so.
// Its poweroff is slow (a unit takes 15 s to stop), so the node still answers through
// the watch with systemd "stopping", as a loaded host's did in CI, where the verdict
// then named units and the node was not restored; the other bricking tests power off
// at once (restore_set_lab_test.go and its neighbours).
func TestAccNodeSwitchIncusUnreachableRestoresSnapshot(t *testing.T) {
	acctest.Lab(t)
	node := labtest.NewInstance(t, "acc-incus-brick")
	snap := "snapshot {\n    keep = 3\n  }"
	var goodTop string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: buildConfig(node, incusBlock(node), `{}`, `{ seed = "acc-brick" }`, snap),
				Check: func(s *terraform.State) error {
					goodTop = s.RootModule().Resources[addr].Primary.Attributes["toplevel"]
					return nil
				},
			},
			{
				Config:      buildConfig(node, incusBlock(node), `{}`, `{ seed = "acc-brick", brick = "1", slowStop = "15" }`, snap),
				ExpectError: regexp.MustCompile(`(?s)unreachable\s+after\s+the\s+switch:\s+snapshot\s+fediversity-gen-\d+\s+restored.*kept\s+as\s+snapshot\s+fediversity-bricked-`),
			},
			{
				// The node is back, running, with the previous system as its boot entry;
				// the bricked state is kept aside as its own snapshot, which can be
				// copied out as a new instance to inspect it.
				PreConfig: func() {
					if got := strings.TrimSpace(nodeExec(t, node, "systemctl is-system-running; readlink -f /nix/var/nix/profiles/system")); !strings.HasSuffix(got, "\n"+goodTop) {
						t.Errorf("after the restore the node says %q, want it running with system profile %q", got, goodTop)
					}
					snaps := labtest.Incus(t, "snapshot", "list", node.Instance, "--format", "csv", "-c", "n")
					var bricked string
					for _, n := range strings.Fields(snaps) {
						if strings.HasPrefix(n, "fediversity-bricked-") {
							bricked = n
						}
					}
					if bricked == "" {
						t.Fatalf("no fediversity-bricked-* snapshot kept aside; snapshots: %s", snaps)
					}
					aside := node.Instance + "-aside"
					labtest.Incus(t, "copy", node.Instance+"/"+bricked, aside)
					_, _ = labtest.IncusErr("delete", "--force", aside)
				},
				Config:   buildConfig(node, incusBlock(node), `{}`, `{ seed = "acc-brick" }`, snap),
				PlanOnly: true,
			},
		},
	})
}

// accOnly skips unless TF_ACC is set (tests that need no lab: they fail before any node
// is contacted).
func accOnly(t *testing.T) {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1")
	}
}

// A submission that changed after the plan was made is refused at apply, with an error
// that shows both digests, before any node is contacted.
func TestAccNodeSwitchRefusesChangedSubmission(t *testing.T) {
	accOnly(t)
	dir := t.TempDir()
	file := dir + "/submission.json"
	if err := os.WriteFile(file, []byte(`{"tf":{"domain":"a.example"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	planned, err := submission.ReadAndDigest(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(`{"tf":{"domain":"b.example"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	current, err := submission.ReadAndDigest(file)
	if err != nil {
		t.Fatal(err)
	}
	node := labtest.Node{Name: "web01", SSHHost: "127.0.0.1", SSHPort: 1, HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3Cj0aK1mO4vVq7bWJm7pS9xXcG2d0dTq0m4Q1fG7kD"}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: switchConfig(node, sshBlock(node), "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-nixos-system-web01",
				fmt.Sprintf("submission_digest = %q\n  submission_file = %q", planned, file)),
			ExpectError: regexp.MustCompile(`(?s)` + planned + `.*` + current),
		}},
	})
}

// Configuration mistakes are refused at plan time, before anything runs.
func TestAccNodeSwitchConfigValidation(t *testing.T) {
	accOnly(t)
	node := labtest.Node{Name: "web01", Instance: "web01", Project: "default", SSHHost: "127.0.0.1", SSHPort: 22, HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3Cj0aK1mO4vVq7bWJm7pS9xXcG2d0dTq0m4Q1fG7kD"}
	top := "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-nixos-system-web01"
	step := func(cfg, want string) resource.TestStep {
		return resource.TestStep{Config: cfg, PlanOnly: true, ExpectError: regexp.MustCompile(want)}
	}
	// The node spec's own words (nodespec.Spec.Validate), which the command's roster
	// gets for the same settings: the CLI wraps them, so any space may be a line break.
	specWords := func(summary, detail string) string {
		words := func(s string) string { return strings.Join(strings.Fields(regexp.QuoteMeta(s)), `\s+`) }
		return `(?s)` + words(summary) + `.*` + words(detail)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			step(switchConfig(node, sshBlock(node)+incusBlock(node), top, ""), specWords("Conflicting transports", "Node web01: incus: give exactly one transport: SSH (host) or incus, not both")),
			step(switchConfig(node, "", top, ""), `(?s)No transport for web01.*exactly one of an ssh block or an incus block`),
			step(switchConfig(node, sshBlock(node), top, "snapshot {\n    keep = 2\n  }"), specWords("Snapshots need the Incus transport", "Node web01: snapshot: an SSH node has no native snapshots")),
			step(switchConfig(node, sshBlock(node), top, "build {\n    file = \"x.nix\"\n  }"), specWords("Conflicting build inputs", "Node web01: build: give toplevel (a prebuilt system) or build, not both")),
			step(switchConfig(node, sshBlock(node), top, `loop_budgets = { "a.service" = "many" }`), `(?i)incorrect\s+attribute\s+value\s+type|number\s+required|Inappropriate\s+value`),
			// Checked at plan, before anything runs (the lab is not needed for these).
			step(switchConfig(node, sshBlock(node), "/tmp/result", ""), specWords("Not a Nix store path", `Node web01: toplevel: "/tmp/result" is not a Nix store path`)),
			step(switchConfig(node, `
  ssh {
    host     = "127.0.0.1"
    host_key = "ssh-ed25519 not-a-key"
  }`, top, ""), `(?s)Not an SSH host key.*ssh.host_key`),
			step(acctest.Config(acctest.LabProvider()+fmt.Sprintf(`
resource "fediversity_node_switch" "n" {
  node     = "web01"
  toplevel = %q
%s
  timings {
    settle = "0s"
  }
}
`, top, sshBlock(node))), specWords("Invalid duration", `Node web01: timings.settle: "0s" is not a positive duration: settle = "0s" is zero`)),
			step(acctest.Config(acctest.LabProvider()+fmt.Sprintf(`
resource "fediversity_node_switch" "n" {
  node = "web01"
%s
  build {
    file = "x.nix"
    args = { key = "/run/user/0/agent.sock" }
  }
}
`, sshBlock(node))), `(?s)Per-run value refused.*under /run/user`),
		},
	})
}

// The network between the deployer and the node drops while the node switches: the
// node's loopback proxy (its only way in) is removed once the detached switch runs and
// put back two seconds later. The apply reconnects, reads the switch's real result and
// gives the right verdict; the state says the result was read after reconnecting.
func TestAccNodeSwitchSSHConnectionCutDuringSwitch(t *testing.T) {
	acctest.Lab(t)
	slow := labtest.BuildClosure(t, labtest.ClosureSlowSwitch) // its activation takes 15 s
	node := labtest.NewInstance(t, "acc-ssh-cut")
	proxy := strings.Fields(labtest.Incus(t, "config", "device", "get", node.Instance, "ssh", "listen"))
	if len(proxy) != 1 {
		t.Fatalf("the instance's ssh proxy listens on %v", proxy)
	}
	cut := make(chan error, 1)
	incus := func(args ...string) (string, error) {
		out, err := exec.Command("incus", args...).CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("incus %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	cutDuringSwitch := func() {
		// Bounded: 600 polls of 0.2 s, then give up (the Check step reports it).
		for i := 0; i < 600; i++ {
			out, _ := incus("exec", node.Instance, "--", "systemctl", "list-units", "--no-legend", "--plain", "--state=active", "fediversity-switch-*")
			if strings.Contains(out, "fediversity-switch-") {
				if _, err := incus("config", "device", "remove", node.Instance, "ssh"); err != nil {
					cut <- err
					return
				}
				time.Sleep(2 * time.Second)
				_, err := incus("config", "device", "add", node.Instance, "ssh", "proxy",
					"listen="+proxy[0], "connect=tcp:127.0.0.1:22", "bind=host")
				if err == nil {
					// The switch must still be running when the connection came back.
					if out, _ := incus("exec", node.Instance, "--", "sh", "-c", "ls /run/fediversity/*.rc 2>/dev/null; true"); strings.TrimSpace(out) != "" {
						err = fmt.Errorf("the switch had finished before the connection was cut: %s", out)
					}
				}
				cut <- err
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		cut <- fmt.Errorf("the switch never started on %s", node.Instance)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			PreConfig: func() { go cutDuringSwitch() },
			Config:    switchConfig(node, sshBlock(node), slow, ""),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("toplevel"), knownvalue.StringExact(slow)),
				verdictBool("ok", true),
				verdictBool("switch_reconnected", true),
				verdictList("failed"),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("verdict").AtMapKey("switch_result"), knownvalue.StringExact("ok")),
			},
			Check: func(*terraform.State) error {
				select {
				case err := <-cut:
					if err != nil {
						return err
					}
				case <-time.After(time.Minute):
					return fmt.Errorf("the connection was never cut")
				}
				if got := strings.TrimSpace(nodeExec(t, node, "readlink -f /run/current-system")); got != slow {
					return fmt.Errorf("the node runs %s, want %s", got, slow)
				}
				return nil
			},
		}},
	})
}

// A start job that does not finish is named stale (and does not fail the deploy): the
// switch starts fedi-waiter.service, which wants fedi-slowstart.service, a oneshot whose
// start takes 10 minutes. Its start job is first seen by the first watch sample and is
// older than stale_job (2 s) by the last one.
func TestAccNodeSwitchStaleStartJob(t *testing.T) {
	acctest.Lab(t)
	stale := labtest.BuildClosure(t, labtest.ClosureStaleJob)
	node := labtest.NewInstance(t, "acc-stale-job")
	cfg := acctest.Config(acctest.LabProvider() + fmt.Sprintf(`
resource "fediversity_node_switch" "n" {
  node     = %q
  toplevel = %q
%s
  timings {
    node_wait       = "30s"
    settle          = "1s"
    watch           = "4s"
    sample_interval = "1s"
    stale_job       = "2s"
  }
}
`, node.Name, stale, sshBlock(node)))
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: cfg,
			ConfigStateChecks: []statecheck.StateCheck{
				verdictBool("ok", true),
				verdictList("stale_jobs", "fedi-slowstart.service (job "),
				verdictList("failed"),
				verdictList("restart_loop"),
			},
			Check: func(*terraform.State) error {
				// The job is real: systemd still lists it on the node.
				if out := nodeExec(t, node, "systemctl list-jobs --no-legend"); !strings.Contains(out, "fedi-slowstart.service") {
					return fmt.Errorf("no start job of fedi-slowstart.service on the node: %q", out)
				}
				return nil
			},
		}},
	})
}

// A cycling unit on the deploy path: fedi-tick.timer starts the oneshot
// fedi-tick.service every second, so the service is activated again at every watch
// sample (a new InvocationID) while NRestarts stays 0. The verdict names it as cycling,
// not as a restart loop or a failure, and the deploy passes. The node's journal shows
// the real thing: the service started again and again, and systemd counted no
// restart.
func TestAccNodeSwitchCyclingUnit(t *testing.T) {
	acctest.Lab(t)
	cycling := labtest.BuildClosure(t, labtest.ClosureCycling)
	node := labtest.NewInstance(t, "acc-cycling")
	var since time.Time
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			PreConfig: func() { since = time.Now() },
			Config:    switchConfig(node, sshBlock(node), cycling, ""),
			ConfigStateChecks: []statecheck.StateCheck{
				verdictBool("ok", true),
				verdictList("cycling", "fedi-tick.service"),
				verdictList("restart_loop"),
				verdictList("failed"),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("verdict").AtMapKey("reasons"), knownvalue.ListSizeExact(0)),
			},
			Check: func(*terraform.State) error {
				starts := nodeExec(t, node, fmt.Sprintf("journalctl --no-pager -o cat --since=@%d -u fedi-tick.service | grep -c '^Starting ' || true", since.Unix()-1))
				n, _ := strconv.Atoi(strings.TrimSpace(starts))
				restarts := strings.TrimSpace(nodeExec(t, node, "systemctl show -p NRestarts --value fedi-tick.service"))
				if n < 3 || restarts != "0" {
					return fmt.Errorf("fedi-tick.service started %d times since the apply began, NRestarts=%s: want a unit activated again and again with no restart counted", n, restarts)
				}
				return nil
			},
		}},
	})
}

// A closure whose activation makes the node refuse new SSH logins (it stops sshd; the
// session the deploy runs on goes on). The revert armed before the switch is not
// disarmed, so the node switches itself back to the system it ran before: the apply
// fails within confirm_timeout plus a bound, saying the node locked the deployer out and
// which system it runs now; the node answers new logins again on its previous system
// and boot entry. A later good deploy of the same node works.
func TestAccNodeSwitchSSHLockoutReverts(t *testing.T) {
	acctest.Lab(t)
	node := labtest.NewInstance(t, "acc-ssh-lockout")
	cfg := func(args string) string {
		return acctest.Config(acctest.LabProvider() + fmt.Sprintf(`
resource "fediversity_node_switch" "n" {
  node = %q
  build {
    file = %q
    args = %s
  }
%s
  timings {
    node_wait       = "30s"
    settle          = "1s"
    watch           = "3s"
    sample_interval = "1s"
    confirm_timeout = "8s"
  }
}
`, node.Name, testdataFile("node.nix"), args, sshBlock(node)))
	}
	var goodTop string
	var started time.Time
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg(`{ seed = "acc-lockout" }`),
				Check: func(s *terraform.State) error {
					goodTop = s.RootModule().Resources[addr].Primary.Attributes["toplevel"]
					return nil
				},
			},
			{
				PreConfig:   func() { started = time.Now() },
				Config:      cfg(`{ seed = "acc-lockout", lockout = "1" }`),
				ExpectError: regexp.MustCompile(`(?s)locked\s+the\s+deployer\s+out.*no\s+new\s+login\s+was\s+accepted\s+within\s+8s.*put\s+itself\s+back\s+on\s+/nix/store/\S+-nixos-system-fedi-acc\s+\(generation\s+\d+\)`),
			},
			{
				PreConfig: func() {
					took := time.Since(started)
					t.Logf("lock-out apply failed %s after it started (confirm_timeout 8s)", took.Round(100*time.Millisecond))
					got := strings.Fields(nodeExec(t, node, "readlink -f /run/current-system; readlink -f /nix/var/nix/profiles/system; cat /nix/var/nix/fediversity-boot-entry; systemctl is-active ssh.service"))
					if len(got) != 4 || got[0] != goodTop || got[1] != goodTop || got[2] != goodTop || got[3] != "active" {
						t.Errorf("after the lock-out the node has running/profile/boot entry/sshd = %v, want %s x3 and sshd active", got, goodTop)
					}
				},
				// A new login works again: the good closure deploys over SSH.
				Config: cfg(`{ seed = "acc-lockout" }`),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("verdict").AtMapKey("ok"), knownvalue.Bool(true)),
				},
			},
		},
	})
}
