package test

// Acceptance test of modules/k8s with the operator variant (method k8s-operator) on the
// lab's real kubelet node, in one apply: each node's image is built in the graph from
// the submission, the namespace's SPIRE hand-off registers the nodes on the lab's real
// spire-server, and inside each node's pod the SPIRE agent attests with the token the
// kubelet projected. The nodes' source is the lab's bootable stand-in with an agent
// (lab/closures/default.nix, bootable-spire-agent), whose fedi-spire-attested unit ends
// only once root holds the node's host SVID: systemd says "running", the pod is ready
// and the module's verdict is given only after the attestation. Named TestAccSpire… so
// that CI runs it in the suite that has a spire node.
// TestAccSpireModuleK8sOperator is the same module on kwok, whose pods never boot.

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

func TestAccSpireModuleK8sOperatorRealNode(t *testing.T) {
	acctest.RequireRealNode(t)
	k := acctest.NewK8s(t)
	names := []string{"web01", "web02"}
	for _, n := range names {
		k.RealNodeVolume(n)
	}
	a := acctest.NewSpireInPod(t, k, names...)
	g := newGroupSample(t, "k8s-operator", names)

	src := operatorClosures(t)
	agent := labtest.SpireAgentBinary(t)
	roster := map[string]any{}
	for _, n := range names {
		// Each node's agent names the node's own k8s_psat cluster, which the hand-off
		// trusts, and dials the server where the real node's pods reach it.
		roster[n] = map[string]any{"build": map[string]any{"file": src, "attribute": "bootable-spire-agent", "args": map[string]string{
			"spireAgent": agent, "spireCluster": spire.K8sCluster(k.Ns, n),
			"spireServer": a.Server, "spireServerPort": fmt.Sprint(a.Port),
			"seed": fmt.Sprintf("mk8s-op-real-%d", time.Now().UnixNano()),
		}}}
	}
	config := acctest.Config(k.Provider(k.Reg.Host) + fmt.Sprintf(`
data "fediversity_spire_trust_bundle" "central" {
  spire_node {
    host     = %[7]q
    port     = %[8]d
    host_key = %[9]q
  }
}

resource "fediversity_spire_handoff" "group" {
  namespace    = module.group.namespace
  nodes        = module.group.enabled_nodes
  trust_bundle = data.fediversity_spire_trust_bundle.central.pem

  spire_node {
    host     = %[7]q
    port     = %[8]d
    host_key = %[9]q
  }
}

module "group" {
  source          = %[1]q
  method          = "k8s-operator"
  submission_file = %[2]q
  baked_json      = %[3]s
  nodes           = %[4]s
  runtime_class   = %[5]q
  storage_class   = %[6]q
  timings         = { rollout_wait = "3m" }
  addresses       = %[10]s
  spire_handoff   = fediversity_spire_handoff.group.id
}

output "summary" {
  value = module.group.summary
}

output "node_plans" {
  value = module.group.node_plans
}
`+dnsOutputs, modulePath(t, "k8s"), g.file, hcl(g.baked()), hcl(roster), acctest.RealNodeRuntimeClass, acctest.RealNodeStorageClass,
		a.SN.SSHHost, a.SN.SSHPort, a.SN.HostKey, hcl(map[string][]string{names[0]: {"192.0.2.11"}, names[1]: {"192.0.2.12"}})))

	const (
		img     = "module.group.module.wave_1.fediversity_image.node" // unstaged: every node is in wave 1
		rollout = "module.group.module.wave_1.fediversity_k8s_rollout.node"
	)
	create := map[string]plancheck.ResourceActionType{names[0]: plancheck.ResourceActionCreate, names[1]: plancheck.ResourceActionCreate}
	var start time.Time
	resource.Test(t, resource.TestCase{
		PreCheck:     func() { acctest.PreCheck(t) },
		CheckDestroy: a.AgentsEvicted,
		Steps: moduleSteps(t,
			resource.TestStep{
				PreConfig: func() { g.submit(names, nil); start = time.Now() },
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(
					actions(img, names, create), actions(rollout, names, create)...)},
				ConfigStateChecks: []statecheck.StateCheck{
					labCheck(func() error {
						t.Logf("figure: one apply of 2 k8s-operator nodes on the real node (hand-off, evaluate, build, push, roll out until the agent attested and systemd says running): %s",
							time.Since(start).Round(100*time.Millisecond))
						return nil
					}),
					// The verdict: both nodes ok, given after their attestation (the pods were
					// ready only once fedi-spire-attested ended).
					statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)),
					nodePlansCheck(func(plans map[string]string) error {
						for _, n := range names {
							if _, err := bootedWithPlan(k, n, plans[n]); err != nil {
								return err
							}
							pod, err := a.AgentRuns(n)
							if err != nil {
								return err
							}
							if st, err := k.Exec(pod, "systemctl", "show", "-p", "ActiveState,Result", "fedi-spire-attested.service"); err != nil || st != "Result=success\nActiveState=active" {
								return fmt.Errorf("in pod %s of %s, fedi-spire-attested.service: %q (%v), want it ended with success before the verdict", pod.Name, n, st, err)
							}
							if err := a.HoldsHostSVID(pod, n); err != nil {
								return err
							}
							if err := a.ServerListsAgentOf(pod, n); err != nil {
								return err
							}
						}
						return nil
					}),
				},
			},
			resource.TestStep{
				Config:           config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			// The empty root destroys the group and the hand-off, which evicts the agents
			// (CheckDestroy).
			resource.TestStep{Config: emptyRoot()},
		),
	})
}
