package test

// Acceptance test of modules/tf-incus with the operator variant (method
// tf-incus-operator) on the lab's real incusd and real SPIRE server: the module
// registers each node (its host entry, a one-time join token and the trust bundle in
// the container) before the node's deploy; the node's new system starts its SPIRE agent,
// which attests with that token; the verdict-only pass judges a secret chain whose first
// member fetches the node's X.509 SVID from the agent. Named TestAccSpire… so that CI
// runs it in the suite that has a spire node.

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

func TestAccSpireModuleTFIncusOperator(t *testing.T) {
	acctest.Lab(t)
	sn := labtest.Spire(t)
	agent := labtest.SpireAgentBinary(t)
	labtest.BuildClosure(t, labtest.ClosureSpireChain) // built once here; the module builds it again from the file (a no-op)
	// The provider reaches the spire node with its SSH credential from the environment,
	// so every step's provider block (and the last, empty root's) stays empty.
	t.Setenv("SSH_PRIVATE_KEY_FILE", labtest.KeyFile())

	group := "op" + strings.ReplaceAll(labtest.Prefix(), "-", "")
	names, roster := operatorNodes(t, sn, agent, group, "mop")
	a, b, c := names[0], names[1], names[2]
	g := newGroupSample(t, "tf-incus-operator", names)
	closures := labtest.RepoRoot(t) + "/lab/closures/default.nix"
	config := acctest.Config(`provider "fediversity" {}` + fmt.Sprintf(`
module "group" {
  source          = %q
  method          = "tf-incus-operator"
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  build           = { file = %q, attribute = %q }
  secret_chain    = ["secret-chain-fetch.service", "secret-chain-install.service"]
  timings         = { node_wait = "60s", settle = "1s", watch = "3s", sample_interval = "1s", verdict_watch = "2s", chain_wait = "120s", no_progress = "60s" }
  spire = {
    group      = %q
    spire_node = { host = %q, port = %d, host_key = %q }
  }
}

output "summary" {
  value = module.group.summary
}
`, modulePath(t, "tf-incus"), g.file, hcl(g.baked()), hcl(roster), closures, labtest.ClosureSpireChain,
		group, sn.SSHHost, sn.SSHPort, sn.HostKey))

	const (
		registration = "module.group.module.wave_1.fediversity_spire_registration.node"
		sw           = "module.group.module.wave_1.fediversity_node_switch.node"
		verdict      = "module.group.module.wave_1.fediversity_verdict.node"
	)
	entries := func(n string) string { return hostEntry(sn, group, n) }
	attested := func(nodes ...string) labCheck { return attestedWithSecret(sn, group, nodes...) }
	every := func(action plancheck.ResourceActionType) map[string]plancheck.ResourceActionType {
		return map[string]plancheck.ResourceActionType{a: action, b: action, c: action}
	}

	resource.Test(t, resource.TestCase{
		PreCheck: func() { acctest.PreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				PreConfig: func() { g.submit(names, nil) },
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(append(
					actions(registration, names, every(plancheck.ResourceActionCreate)),
					actions(sw, names, every(plancheck.ResourceActionCreate))...),
					actions(verdict, names, every(plancheck.ResourceActionCreate))...),
					// Then the same submission again: nothing to do.
					PostApplyPostRefresh: nothingToDo},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)),
					attested(a, b, c),
				},
			},
			resource.TestStep{
				// The submission turns c off: its registration goes with its deploy and
				// verdict (the entries deleted, the agent evicted); a and b keep theirs.
				PreConfig: func() { g.submit([]string{a, b}, nil) },
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(append(
					actions(registration, names, map[string]plancheck.ResourceActionType{c: plancheck.ResourceActionDestroy}),
					actions(sw, names, map[string]plancheck.ResourceActionType{c: plancheck.ResourceActionDestroy})...),
					actions(verdict, names, map[string]plancheck.ResourceActionType{c: plancheck.ResourceActionDestroy})...)},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("summary", summaryCheck([]string{a, b}, []string{c})),
					attested(a, b),
					labCheck(func() error {
						if strings.Contains(entries(c), spire.HostID(group, c)) {
							return fmt.Errorf("the host entry of %s is left after the submission turned it off", c)
						}
						return nil
					}),
				},
			},
			resource.TestStep{
				// The SPIRE lane without its method is refused at plan, naming the setting.
				Config:      strings.Replace(config, `method          = "tf-incus-operator"`, `method          = "tf-incus"`, 1),
				ExpectError: regexp.MustCompile(`var.spire is set but method is "tf-incus"`),
				PlanOnly:    true,
			},
			resource.TestStep{
				Config: emptyRoot(),
				ConfigStateChecks: []statecheck.StateCheck{labCheck(func() error {
					for _, n := range []string{a, b} {
						if strings.Contains(entries(n), spire.HostID(group, n)) {
							return fmt.Errorf("the host entry of %s is left after the module went", n)
						}
					}
					return nil
				})},
			},
		),
	})
}

// hostEntry is what the spire node shows of node's host entry in group ("" or an error
// text when there is none).
func hostEntry(sn labtest.SpireNode, group, node string) string {
	out, _ := labtest.IncusErr("exec", sn.Name, "--", "spire-server", "entry", "show", "-entryID", spire.IncusEntryPrefix(group, node)+"host")
	return out
}

// attestedWithSecret: each node's agent holds the SVID of its own host entry, the server
// has that entry, and the secret chain's product, which app.service needs, is there.
func attestedWithSecret(sn labtest.SpireNode, group string, nodes ...string) labCheck {
	return func() error {
		for _, n := range nodes {
			out, err := labtest.IncusErr("exec", n, "--", "/usr/local/bin/spire-agent", "api", "fetch", "x509", "-socketPath", "/run/spire-agent/api.sock")
			if err != nil || !strings.Contains(out, spire.HostID(group, n)) {
				journal, _ := labtest.IncusErr("exec", n, "--", "journalctl", "-u", "fedi-spire-agent", "--no-pager", "-n", "20")
				return fmt.Errorf("the agent of %s holds no SVID of %s (%v):\n%s\n%s", n, spire.HostID(group, n), err, out, journal)
			}
			if _, err := labtest.IncusErr("exec", n, "--", "test", "-e", "/run/secret"); err != nil {
				return fmt.Errorf("%s: the secret chain's product /run/secret is missing", n)
			}
			if !strings.Contains(hostEntry(sn, group, n), spire.HostID(group, n)) {
				return fmt.Errorf("%s: no host entry on the server", n)
			}
		}
		return nil
	}
}

// operatorNodes makes three lab containers, prefix-a to prefix-c, as a real node's
// configuration and host give them: the agent binary, and the SPIRE server at their own
// 127.0.0.1:8081 (here a proxy device to the spire node). It returns their names and a
// roster naming each by its instance; their entries in group go with the test.
func operatorNodes(t *testing.T, sn labtest.SpireNode, agent, group, prefix string) ([]string, map[string]any) {
	var names []string
	roster := map[string]any{}
	for _, s := range []string{"a", "b", "c"} {
		node := labtest.NewInstance(t, prefix+"-"+s)
		labtest.Incus(t, "config", "device", "add", node.Instance, "spire", "proxy", "listen=tcp:127.0.0.1:8081",
			fmt.Sprintf("connect=tcp:127.0.0.1:%d", sn.ServerPort), "bind=instance")
		labtest.Incus(t, "file", "push", "--mode", "0755", agent, node.Instance+"/usr/local/bin/spire-agent")
		names = append(names, node.Instance)
		roster[node.Instance] = map[string]any{"instance": node.Instance}
	}
	deleteEntriesAround(t, sn, group, names)
	return names, roster
}

// deleteEntriesAround deletes the SPIRE entries of names in group now and when t ends.
// Before as well as after: the entries' IDs follow from the lab's prefix, and a run
// killed before its cleanup leaves them on the shard's spire node, which outlives runs.
// A CI run found such a leftover host entry of a node behind the gate and took it for
// this run's registration.
func deleteEntriesAround(t *testing.T, sn labtest.SpireNode, group string, names []string) {
	deleteEntries := func() {
		for _, n := range names {
			for _, id := range []string{"alias", "host"} {
				_, _ = labtest.IncusErr("exec", sn.Name, "--", "spire-server", "entry", "delete", "-entryID", spire.IncusEntryPrefix(group, n)+id)
			}
		}
	}
	deleteEntries()
	t.Cleanup(deleteEntries)
}
