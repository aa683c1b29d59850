package node_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
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
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/submission"
)

const vaddr = "fediversity_verdict.v"

// handDeploy puts toplevel on the instance without the provider (test setup for the
// verdict-only pass, which never copies or switches): nix-store --export piped into
// `incus exec … nix-store --import`, then switch-to-configuration switch. The switch's
// exit code is not checked: scenarios with failing units exit 4 on purpose.
func handDeploy(t *testing.T, n labtest.Node, toplevel string) {
	t.Helper()
	paths, err := nixstore.Closure(t.Context(), toplevel)
	if err != nil {
		t.Fatal(err)
	}
	var nar bytes.Buffer
	if err := nixstore.Export(t.Context(), paths, &nar); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("incus", "exec", n.Instance, "--", "nix-store", "--import")
	cmd.Stdin = &nar
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("import %s into %s: %v\n%s", toplevel, n.Instance, err, out)
	}
	// Detached, so a switch that waits on units (a chain member that never finishes) does
	// not hold the test; the test goes on once the node points at the new system.
	unit := "hand-switch-" + fmt.Sprint(time.Now().UnixNano())
	labtest.Incus(t, "exec", n.Instance, "--", "systemd-run", "--collect", "--quiet", "--unit="+unit,
		toplevel+"/bin/switch-to-configuration", "switch")
	for i := 0; i < 60; i++ {
		out, _ := labtest.IncusErr("exec", n.Instance, "--", "readlink", "-e", "/run/current-system")
		if strings.TrimSpace(out) == toplevel {
			// The switch holds switch-to-configuration's lock until it has started the
			// units, as the real one does: a next switch right away would be turned
			// away (exit 11). Wait for it to end, within a bound (a chain member that
			// never finishes may hold it longer; the test goes on then).
			for j := 0; j < 60; j++ {
				if out, _ := labtest.IncusErr("exec", n.Instance, "--", "systemctl", "is-active", unit+".service"); strings.TrimSpace(out) != "active" && strings.TrimSpace(out) != "activating" {
					return
				}
				time.Sleep(500 * time.Millisecond)
			}
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s does not run %s 30 s after the hand-run switch", n.Instance, toplevel)
}

func verdictConfig(n labtest.Node, transport, toplevel, extra string) string {
	top := ""
	if toplevel != "" {
		top = fmt.Sprintf("toplevel = %q", toplevel)
	}
	return acctest.Config(acctest.LabProvider() + fmt.Sprintf(`
resource "fediversity_verdict" "v" {
  node = %q
  %s
%s
%s
}
`, n.Name, top, transport, extra))
}

// oneImported checks that an import made one state, and that check accepts its attributes.
func oneImported(check func(attrs map[string]string) error) resource.ImportStateCheckFunc {
	return func(states []*terraform.InstanceState) error {
		if len(states) != 1 {
			return fmt.Errorf("imported %d states, want 1", len(states))
		}
		return check(states[0].Attributes)
	}
}

// buildChain builds testdata/chain.nix with the given fetch behaviour (see that file).
func buildChain(t *testing.T, fetch string) string {
	t.Helper()
	top, err := nixstore.Build(t.Context(), nixstore.BuildSpec{File: testdataFile("chain.nix"), ArgStr: map[string]string{"fetch": fetch}})
	if err != nil {
		t.Fatalf("build the chain closure (%s): %v", fetch, err)
	}
	return top
}

const chainMembers = `secret_chain = ["secret-chain-fetch.service", "secret-chain-install.service"]`

func vBool(name string, v bool) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(vaddr, tfjsonpath.New("verdict").AtMapKey(name), knownvalue.Bool(v))
}

func vList(name string, want ...string) statecheck.StateCheck {
	vals := make([]knownvalue.Check, 0, len(want))
	for _, w := range want {
		vals = append(vals, knownvalue.StringRegexp(regexp.MustCompile("^"+regexp.QuoteMeta(w))))
	}
	return statecheck.ExpectKnownValue(vaddr, tfjsonpath.New("verdict").AtMapKey(name), knownvalue.ListExact(vals))
}

// A chain that converges: app.service fails until the chain has made /run/secret; the
// pass waits for the chain, restarts app.service, and the verdict is clean. A change of
// triggers runs the pass again. (testdata/chain.nix, not lab/closures: its members are
// oneshot units and its switch does not wait for them, so the pass really waits.)
func TestAccVerdictChainConverges(t *testing.T) {
	acctest.Lab(t)
	chain := buildChain(t, "ok")
	node := labtest.NewInstance(t, "acc-v-chain")
	timings := `
  timings {
    chain_wait      = "2m"
    no_progress     = "20s"
    settle          = "1s"
    watch           = "3s"
    sample_interval = "1s"
  }`
	cfg := func(trigger string) string {
		return verdictConfig(node, incusBlock(node), chain, chainMembers+timings+fmt.Sprintf("\n  triggers = { run = %q }", trigger))
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() { handDeploy(t, node, chain) },
				Config:    cfg("1"),
				ConfigStateChecks: []statecheck.StateCheck{
					vBool("ok", true),
					vBool("verdict_only", true),
					vList("failed"),
					vList("restarted", "app.service"),
					statecheck.ExpectKnownValue(vaddr, tfjsonpath.New("verdict").AtMapKey("switch_result"), knownvalue.StringExact("not-run")),
					statecheck.ExpectKnownValue(vaddr, tfjsonpath.New("judged_toplevel"), knownvalue.StringExact(chain)),
				},
			},
			{
				// The chain runs afresh (a new switch clears /run/secret); a new trigger
				// judges again, and app.service is restarted after the chain.
				PreConfig: func() { handDeploy(t, node, chain) },
				Config:    cfg("2"),
				ConfigStateChecks: []statecheck.StateCheck{
					vBool("ok", true),
					vList("failed"),
				},
			},
			{
				// Import by the node's SSH address (docs/resources/verdict.md#import): the
				// state names the node and how to reach it, and holds no verdict yet.
				ResourceName:  vaddr,
				ImportState:   true,
				ImportStateId: fmt.Sprintf("ssh://root@%s:%d/%s?known_hosts_file=%s", node.SSHHost, node.SSHPort, node.Name, writeKnownHosts(t, node)),
				ImportStateCheck: oneImported(func(s map[string]string) error {
					if s["id"] != node.Name || s["node"] != node.Name || s["ssh.host"] != node.SSHHost || s["ssh.port"] != fmt.Sprint(node.SSHPort) || s["ssh.user"] != "root" {
						return fmt.Errorf("imported id=%q node=%q ssh=%s@%s:%s, want %s root@%s:%d", s["id"], s["node"], s["ssh.user"], s["ssh.host"], s["ssh.port"], node.Name, node.SSHHost, node.SSHPort)
					}
					for k, v := range s {
						if (strings.HasPrefix(k, "verdict.") || k == "judged_toplevel") && v != "" && v != "0" {
							return fmt.Errorf("an import judges nothing, but the state holds %s = %q", k, v)
						}
					}
					return nil
				}),
			},
			{
				// Import by the Incus address, with the node's name: the same node and
				// transport as the resource created above.
				ResourceName:      vaddr,
				ImportState:       true,
				ImportStateId:     fmt.Sprintf("incus://local/%s/%s/%s", node.Project, node.Instance, node.Name),
				ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{
					"toplevel", "secret_chain", "timings", "triggers", "verdict", "judged_toplevel", "timeouts", "incus.remote",
				},
			},
			{
				// The verdict leaves the state (nothing changes on the node), so that the
				// next import is persisted into an empty address.
				Config: acctest.Config(acctest.LabProvider()),
			},
			{
				// The same import, persisted: the next step starts from the imported state.
				Config:             cfg("2"),
				ResourceName:       vaddr,
				ImportState:        true,
				ImportStateId:      fmt.Sprintf("incus://local/%s/%s/%s", node.Project, node.Instance, node.Name),
				ImportStatePersist: true,
			},
			{
				// The next apply after an import runs the pass (the configuration's
				// arguments differ from the imported state's), and judges the node.
				Config: cfg("2"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(vaddr, plancheck.ResourceActionUpdate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					vBool("ok", true),
					vList("failed"),
					statecheck.ExpectKnownValue(vaddr, tfjsonpath.New("judged_toplevel"), knownvalue.StringExact(chain)),
				},
			},
		},
	})
}

// A chain member that fails, or that makes no progress, stops the pass before
// chain_wait with an error naming the member.
func TestAccVerdictChainStopsEarly(t *testing.T) {
	acctest.Lab(t)
	fails := buildChain(t, "fails")
	stuck := buildChain(t, "stuck")
	node := labtest.NewInstance(t, "acc-v-chainstop")
	timings := `
  timings {
    chain_wait      = "10m"
    no_progress     = "6s"
    sample_interval = "1s"
  }`
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig:   func() { handDeploy(t, node, fails) },
				Config:      verdictConfig(node, incusBlock(node), fails, chainMembers+timings),
				ExpectError: regexp.MustCompile(`secret-chain-fetch\.service[\s\S]*(failed|fail)`),
			},
			{
				PreConfig:   func() { handDeploy(t, node, stuck) },
				Config:      verdictConfig(node, incusBlock(node), stuck, chainMembers+timings),
				ExpectError: regexp.MustCompile(`secret-chain-fetch\.service[\s\S]*progress`),
			},
		},
	})
}

// A unit still looping past its loop budget fails a strict verdict-only pass, naming
// the unit and the budget.
func TestAccVerdictLoopPastBudget(t *testing.T) {
	acctest.Lab(t)
	loop := labtest.BuildClosure(t, labtest.ClosureRestartLoop)
	node := labtest.NewInstance(t, "acc-v-loop")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			PreConfig: func() { handDeploy(t, node, loop) },
			Config: verdictConfig(node, sshBlock(node), "", `
  loop_budgets = { "fedi-loop.service" = 1 }
  timings {
    settle          = "1s"
    watch           = "4s"
    sample_interval = "1s"
    chain_wait      = "10s"
  }`),
			ExpectError: regexp.MustCompile(`fedi-loop\.service[\s\S]*budget\s+1`),
		}},
	})
}

// A stopped instance: the verdict says unreachable.
func TestAccVerdictStoppedInstanceUnreachable(t *testing.T) {
	acctest.Lab(t)
	node := labtest.NewInstance(t, "acc-v-stopped")
	labtest.Incus(t, "stop", "--force", node.Instance)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: verdictConfig(node, incusBlock(node), "", `
  timings {
    node_wait       = "5s"
    sample_interval = "1s"
    watch           = "3s"
  }`),
			ExpectError: regexp.MustCompile(`(?i)unreachable`),
		}},
	})
}

// A severed system bus: the unit sets are unread, not empty. Lenient, so the pass
// succeeds and the state shows what was (not) read.
func TestAccVerdictSeveredBusUnread(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	node := labtest.NewInstance(t, "acc-v-bus")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			PreConfig: func() {
				handDeploy(t, node, good)
				nodeExec(t, node, "mount --bind /dev/null /run/systemd/private && mount --bind /dev/null /run/dbus/system_bus_socket")
				if out, _ := labtest.IncusErr("exec", node.Instance, "--", "systemctl", "list-units"); !strings.Contains(out, "Failed to connect to bus") {
					t.Fatalf("the bus is not severed: systemctl said %q", out)
				}
			},
			Config: verdictConfig(node, sshBlock(node), good, `
  strict = false
  timings {
    node_wait       = "5s"
    settle          = "1s"
    watch           = "3s"
    sample_interval = "1s"
  }`),
			ConfigStateChecks: []statecheck.StateCheck{
				vBool("unread", true),
				statecheck.ExpectKnownValue(vaddr, tfjsonpath.New("verdict").AtMapKey("failed"), knownvalue.Null()),
				statecheck.ExpectKnownValue(vaddr, tfjsonpath.New("verdict").AtMapKey("set_aside"), knownvalue.Null()),
				statecheck.ExpectKnownValue(vaddr, tfjsonpath.New("verdict").AtMapKey("skipped"), knownvalue.Null()),
				vBool("unreachable", false),
			},
			Check: func(s *terraform.State) error {
				a := s.RootModule().Resources[vaddr].Primary.Attributes
				for i := 0; i < 20; i++ {
					if strings.Contains(a[fmt.Sprintf("verdict.unread_sources.%d", i)], "bus") {
						return nil
					}
				}
				return fmt.Errorf("no unread source names the bus: %s sources, first %q", a["verdict.unread_sources.#"], a["verdict.unread_sources.0"])
			},
		}},
	})
}

// The verdict pass refuses a submission that changed after the plan, as the deploy
// does, before the node is contacted (port 1 answers nothing, so a pass that ran would
// fail differently).
func TestAccVerdictRefusesChangedSubmission(t *testing.T) {
	accOnly(t)
	file := t.TempDir() + "/submission.json"
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
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
resource "fediversity_verdict" "v" {
  node              = "web01"
  submission_digest = %q
  submission_file   = %q
  ssh {
    host     = "127.0.0.1"
    port     = 1
    host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3Cj0aK1mO4vVq7bWJm7pS9xXcG2d0dTq0m4Q1fG7kD"
  }
}`, planned, file),
			ExpectError: regexp.MustCompile(`(?s)Refusing to judge web01: the submission changed.*` + planned + `.*` + current),
		}},
	})
}

// A verdict pass given a toplevel the node does not run says so: strict fails naming
// both systems; lenient succeeds, warns and records the given toplevel as judged.
func TestAccVerdictGivenToplevelNotRunning(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	goodV2 := labtest.BuildClosure(t, labtest.ClosureGoodV2)
	node := labtest.NewInstance(t, "acc-verdict-other")
	handDeploy(t, node, good)
	handDeploy(t, node, goodV2)
	handDeploy(t, node, good) // the node holds good-v2 but runs good
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				// Checked at plan, before anything runs.
				Config:      verdictConfig(node, sshBlock(node), "/tmp/not-a-store-path", ""),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?i)not\s+a\s+Nix\s+store\s+path`),
			},
			{
				Config:      verdictConfig(node, sshBlock(node), goodV2, ""),
				ExpectError: regexp.MustCompile(`runs\s+` + regexp.QuoteMeta(good) + `,\s+not\s+the\s+toplevel\s+` + regexp.QuoteMeta(goodV2)),
			},
			{
				Config: verdictConfig(node, sshBlock(node), goodV2, "strict = false"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(vaddr, tfjsonpath.New("judged_toplevel"), knownvalue.StringExact(goodV2)),
				},
			},
		},
	})
}
