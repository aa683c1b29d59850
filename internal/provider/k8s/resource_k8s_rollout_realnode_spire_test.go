package k8s_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

// spireInPod is one test of node pods with a SPIRE agent on the real node: the
// namespace, the spire node and the route from the pods to spire-server
// (acctest.SpireInPod), and each node's toplevel of bootable-spire-agent (the node's
// k8s_psat cluster is in it).
type spireInPod struct {
	*acctest.SpireInPod
	real *realNodeAcc
	tops map[string]string // node -> toplevel
}

func newSpireInPod(t *testing.T, nodes ...string) *spireInPod {
	real := newRealNodeAcc(t)
	for _, n := range nodes {
		if n != "web01" { // newRealNodeAcc made web01's
			real.RealNodeVolume(n)
		}
	}
	a := &spireInPod{SpireInPod: acctest.NewSpireInPod(t, real.K8s, nodes...), real: real, tops: map[string]string{}}
	for _, n := range nodes {
		a.tops[n] = labtest.BuildBootableSpireAgent(t, spire.K8sCluster(a.Ns, n), a.Server, a.Port)
		t.Logf("toplevel of %s %s: agent of cluster %s, server %s:%d", n, a.tops[n], spire.K8sCluster(a.Ns, n), a.Server, a.Port)
	}
	return a
}

// TestAccK8sRolloutRealNode_spireAgentAttestsInPod: the SPIRE agent inside a node's pod
// (issue 22, item 5). On the real kubelet node, a fediversity_k8s_rollout with the
// namespace's fediversity_spire_handoff runs an image built from the bootable stand-in
// with a SPIRE agent (lab/closures/default.nix, bootable-spire-agent): the store's
// systemd starts a unit that copies the pod's projected token (which the kubelet made
// for node-web01, audience spire-server) and the agent, which attests with k8s_psat to
// the lab's spire-server, trusting the bundle of the ConfigMap spire-agent. The server
// reviews the token against the apiserver and lists the agent with attestation type
// k8s_psat under the real node's UID, with the running pod's UID among its selectors;
// inside the pod, root fetches the X.509 SVID of web01's host entry from the agent. The
// destroy evicts the agent.
func TestAccK8sRolloutRealNode_spireAgentAttestsInPod(t *testing.T) {
	a := newSpireInPod(t, "web01")
	var start time.Time
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		CheckDestroy:             a.AgentsEvicted,
		Steps: []resource.TestStep{{
			PreConfig: func() { start = time.Now() },
			Config:    spireInPodConfig(a.real, a.SN, a.tops),
			Check: func(s *terraform.State) error {
				t.Logf("figure: apply (hand-off, build, push, rollout until systemd says running) on the real node: %s", time.Since(start).Round(100*time.Millisecond))
				pod, err := a.AgentRuns("web01")
				if err != nil {
					return err
				}
				if err := a.HoldsHostSVID(pod, "web01"); err != nil {
					return err
				}
				return a.ServerListsAgentOf(pod, "web01")
			},
		}},
	})
}

// TestAccK8sRolloutRealNode_spireAgentsOfTwoNodesOnOneKubelet: web01 and web02 of one
// namespace, both on the real node, each with its agent. k8s_psat names an agent after
// its cluster and its kubelet node, so with one cluster per namespace the two were one
// agent to the server, and web02's pod got web01's host SVID. With one cluster per node
// (spire.K8sCluster) the server lists two agents, each with its own pod's selectors, and
// root in each pod gets its own node's host SVID and no other.
func TestAccK8sRolloutRealNode_spireAgentsOfTwoNodesOnOneKubelet(t *testing.T) {
	nodes := []string{"web01", "web02"}
	a := newSpireInPod(t, nodes...)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		CheckDestroy:             a.AgentsEvicted,
		Steps: []resource.TestStep{{
			Config: spireInPodConfig(a.real, a.SN, a.tops),
			Check: func(s *terraform.State) error {
				pods := map[string]*corev1.Pod{}
				for _, n := range nodes {
					pod, err := a.AgentRuns(n)
					if err != nil {
						return err
					}
					if err := a.HoldsHostSVID(pod, n); err != nil {
						return err
					}
					pods[n] = pod
				}
				// Both have attested by now: the server holds two agents, and each pod
				// still gets its own node's SVID only.
				for _, n := range nodes {
					if err := a.ServerListsAgentOf(pods[n], n); err != nil {
						return err
					}
				}
				if ids, err := a.Agents(); err != nil || len(ids) != len(nodes) {
					return fmt.Errorf("the server lists agents %q (%v) of namespace %s, want one per node, %d", ids, err, a.Ns, len(nodes))
				}
				for _, n := range nodes {
					if err := a.HoldsHostSVID(pods[n], n); err != nil {
						return err
					}
				}
				return nil
			},
		}},
	})
}

// spireInPodConfig: the namespace's hand-off of the nodes of tops, and for each node an
// image of its toplevel and its rollout on the real node with the hand-off.
func spireInPodConfig(a *realNodeAcc, sn labtest.SpireNode, tops map[string]string) string {
	nodes := slices.Sorted(maps.Keys(tops))
	var perNode strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&perNode, `
resource "fediversity_image" "%[1]s" {
  namespace = fediversity_k8s_namespace.ns.name
  node      = %[1]q
  toplevel  = %[2]q
}

resource "fediversity_k8s_rollout" "%[1]s" {
  namespace     = fediversity_k8s_namespace.ns.name
  node          = %[1]q
  image_ref     = fediversity_image.%[1]s.image_ref
  runtime_class = fediversity_k8s_namespace.ns.runtime_class
  storage_class = %[3]q
  spire_handoff = fediversity_spire_handoff.h.id
  timings {
    rollout_wait = "3m"
  }
}
`, n, tops[n], acctest.RealNodeStorageClass)
	}
	return acctest.Config(a.Provider(a.Reg.Host) + fmt.Sprintf(`
resource "fediversity_k8s_namespace" "ns" {
  runtime_class = %[1]q
}

data "fediversity_spire_trust_bundle" "central" {
  spire_node {
    host     = %[3]q
    port     = %[4]d
    host_key = %[5]q
  }
}

resource "fediversity_spire_handoff" "h" {
  namespace    = fediversity_k8s_namespace.ns.name
  nodes        = %[2]s
  trust_bundle = data.fediversity_spire_trust_bundle.central.pem

  spire_node {
    host     = %[3]q
    port     = %[4]d
    host_key = %[5]q
  }
}
`, acctest.RealNodeRuntimeClass, hclList(nodes), sn.SSHHost, sn.SSHPort, sn.HostKey) + perNode.String())
}

func hclList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
