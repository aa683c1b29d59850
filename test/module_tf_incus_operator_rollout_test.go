package test

// Acceptance test of a staged rollout in modules/tf-incus with the operator variant
// (tf-incus-operator), on the lab's real incusd and real SPIRE server: a canary of 1
// under a failure budget of 0. The SPIRE registration sits in each node's wave, so a bad
// canary halts the apply at the gate before any node behind it is registered: no host
// entry on the server, no join token or bundle in its container, nothing copied or
// switched. Once the canary is fixed, the next apply registers, deploys and judges wave 2,
// and every agent attests. Named TestAccSpire… so that CI runs it in a suite with a
// spire node.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

func TestAccSpireModuleTFIncusOperatorRolloutHaltsAtTheGate(t *testing.T) {
	acctest.Lab(t)
	sn := labtest.Spire(t)
	agent := labtest.SpireAgentBinary(t)
	chain := labtest.BuildClosure(t, labtest.ClosureSpireChain)
	t.Setenv("SSH_PRIVATE_KEY_FILE", labtest.KeyFile())

	group := "ow" + strings.ReplaceAll(labtest.Prefix(), "-", "")
	names, roster := operatorNodes(t, sn, agent, group, "mopw")
	a, b, c := names[0], names[1], names[2] // a is the canary: the first by name
	g := newGroupSample(t, "tf-incus-operator", names)
	closures := labtest.RepoRoot(t) + "/lab/closures/default.nix"

	// canaryAttr is the closure the canary builds; the others build the group's.
	config := func(canaryAttr string) string {
		roster[a] = map[string]any{"instance": a, "build": map[string]any{"file": closures, "attribute": canaryAttr}}
		return acctest.Config(`provider "fediversity" {}` + fmt.Sprintf(`
module "group" {
  source          = %q
  method          = "tf-incus-operator"
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  build           = { file = %q, attribute = %q }
  secret_chain    = ["secret-chain-fetch.service", "secret-chain-install.service"]
  timings         = { node_wait = "60s", settle = "1s", watch = "3s", sample_interval = "1s", verdict_watch = "2s", chain_wait = "120s", no_progress = "60s" }
  strict          = false
  canary          = 1
  failure_budget  = "0"
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
	}
	wave := func(n int, kind string) string {
		return fmt.Sprintf("module.group.module.wave_%d.fediversity_%s.node", n, kind)
	}

	// b and c are in wave 2: after the halted apply they are as labtest made them.
	before := map[string]string{}
	untouched := labCheck(func() error {
		for _, n := range []string{b, c} {
			if cur, _ := currentSystem(n); cur != before[n] {
				return fmt.Errorf("%s runs %q after the halted apply, %q before; it is behind the gate and must not be switched", n, cur, before[n])
			}
			if _, err := labtest.IncusErr("exec", n, "--", "test", "-e", chain); err == nil {
				return fmt.Errorf("%s holds %s after the halted apply; nothing may be copied to a node behind the gate", n, chain)
			}
			if e := hostEntry(sn, group, n); strings.Contains(e, spire.HostID(group, n)) {
				return fmt.Errorf("%s has a host entry on the server after the halted apply; a node behind the gate must not be registered:\n%s", n, e)
			}
			if out, err := labtest.IncusErr("exec", n, "--", "ls", "-A", "/var/lib/spire/agent"); err == nil && strings.TrimSpace(out) != "" {
				return fmt.Errorf("%s holds a join token or bundle after the halted apply: /var/lib/spire/agent has %q", n, out)
			}
		}
		return nil
	})

	resource.Test(t, resource.TestCase{
		PreCheck: func() { acctest.PreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				// The canary's system has a failing unit beside the SPIRE lane: lenient, its
				// registration, deploy and verdict are made with the failure in their
				// verdicts, and the gate after wave 1 halts.
				PreConfig: func() {
					for _, n := range []string{b, c} {
						before[n], _ = currentSystem(n)
					}
					g.submit(names, nil)
				},
				Config: config(labtest.ClosureSpireChainBroken),
				ExpectError: wrapped(`The rollout halted after wave 1`,
					`the rollout halted after wave 1 of 2: 1 of the 1 nodes deployed failed (`+a+`), past the failure budget of 0`,
					a+`: unit fedi-broken.service failed`),
			},
			resource.TestStep{
				// Fixed: b and c were neither registered nor deployed (the plan creates
				// their registrations, deploys and verdicts), and the apply resumes.
				PreConfig: func() {
					if err := untouched(); err != nil {
						t.Fatal(err)
					}
				},
				Config: config(labtest.ClosureSpireChain),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: concatChecks(
					actions(wave(1, "node_switch"), []string{a}, map[string]plancheck.ResourceActionType{a: plancheck.ResourceActionUpdate}),
					actions(wave(2, "spire_registration"), []string{b, c}, map[string]plancheck.ResourceActionType{b: plancheck.ResourceActionCreate, c: plancheck.ResourceActionCreate}),
					actions(wave(2, "node_switch"), []string{b, c}, map[string]plancheck.ResourceActionType{b: plancheck.ResourceActionCreate, c: plancheck.ResourceActionCreate}),
					actions(wave(2, "verdict"), []string{b, c}, map[string]plancheck.ResourceActionType{b: plancheck.ResourceActionCreate, c: plancheck.ResourceActionCreate}),
					[]plancheck.PlanCheck{plancheck.ExpectResourceAction("module.group.fediversity_rollout_gate.after_wave_1[0]", plancheck.ResourceActionCreate)},
				),
					// Then nothing changed: nothing to do, the gate included.
					PostApplyPostRefresh: nothingToDo},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)),
					attestedWithSecret(sn, group, a, b, c),
				},
			},
			resource.TestStep{Config: emptyRoot()},
		),
	})
}
