package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

// realNodePodBridge is the real node's pod bridge (lab/k8s/node-up.sh): its address is
// the host as the node's pods reach it.
const realNodePodBridge = "fedik8s0"

// podSpireRoute makes the lab's spire-server reachable from the real node's pods: an
// Incus proxy device of the spire node that listens on the pod bridge's address of the
// host (a port of its own) and connects to spire-server inside the spire node. It
// returns the address and port the pods' agents dial.
//
// Why a proxy device: the lab has no kube-proxy, so a Service (or selectorless
// Endpoints) to the spire node would route nowhere; the provider's pod spec has no
// hostNetwork (and should not: a node's pod has a network of its own); spire-server
// listens on the spire node's loopback only, as lab/spire/up.sh sets it, reached from
// the host through proxy devices, and this is one more of those, where the pods can
// reach it. Pods of the real node reach only each other and the host (node-up.sh), so
// the bridge's address is the one host address open to them.
func podSpireRoute(t *testing.T, sn labtest.SpireNode) (string, int) {
	t.Helper()
	ifc, err := net.InterfaceByName(realNodePodBridge)
	if err != nil {
		t.Fatalf("the real node's pod bridge %s: %v (run `bash lab/k8s/node-up.sh`, which makes it)", realNodePodBridge, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	var host string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			host = ipn.IP.String()
		}
	}
	if host == "" {
		t.Fatalf("the real node's pod bridge %s has no IPv4 address (%v): run `bash lab/k8s/node-up.sh`", realNodePodBridge, addrs)
	}
	port := labtest.FreePort(t)
	dev := fmt.Sprintf("pods-%d", port)
	labtest.Incus(t, "config", "device", "add", sn.Name, dev, "proxy",
		fmt.Sprintf("listen=tcp:%s:%d", host, port), "connect=tcp:127.0.0.1:8081", "bind=host")
	t.Cleanup(func() {
		if out, err := labtest.IncusErr("config", "device", "remove", sn.Name, dev); err != nil {
			t.Errorf("remove the proxy device %s of %s: %v %s", dev, sn.Name, err, out)
		}
	})
	return host, port
}

// spireInPod is one test of node pods with a SPIRE agent on the real node: the
// namespace, the spire node, the route from the pods to spire-server and each node's
// toplevel of bootable-spire-agent (the node's k8s_psat cluster is in it).
type spireInPod struct {
	*realNodeAcc
	sn      labtest.SpireNode
	tops    map[string]string // node -> toplevel
	nodeUID string            // the real node's UID: k8s_psat names the agent after it
}

func newSpireInPod(t *testing.T, nodes ...string) *spireInPod {
	a := &spireInPod{realNodeAcc: newRealNodeAcc(t)}
	a.sn = labtest.Spire(t)
	for _, n := range nodes {
		if n != "web01" { // newRealNodeAcc made web01's
			a.RealNodeVolume(n)
		}
	}
	// The provider reaches the spire node with this SSH credential (as the module test).
	t.Setenv("SSH_PRIVATE_KEY_FILE", labtest.KeyFile())
	t.Cleanup(func() { // a failed test must leave no entries, files or agents on the spire node, nor the hand-off's RBAC
		_ = a.C.DeleteSpireHandOff(context.Background(), a.Ns)
		_, _ = labtest.IncusErr("exec", a.sn.Name, "--", "rm", "-rf", "/var/lib/spire/fediversity/k8s/"+a.Ns)
		for _, n := range nodes {
			for _, kind := range []string{"alias", "host"} {
				_, _ = a.spireServer("entry", "delete", "-entryID", spire.K8sEntryPrefix(a.Ns)+n+"."+kind)
			}
		}
		if ids, err := a.agents(); err == nil {
			for _, id := range ids {
				_, _ = a.spireServer("agent", "evict", "-spiffeID", id)
			}
		}
	})
	server, port := podSpireRoute(t, a.sn)
	a.tops = map[string]string{}
	for _, n := range nodes {
		a.tops[n] = labtest.BuildBootableSpireAgent(t, spire.K8sCluster(a.Ns, n), server, port)
		t.Logf("toplevel of %s %s: agent of cluster %s, server %s:%d", n, a.tops[n], spire.K8sCluster(a.Ns, n), server, port)
	}
	node, err := a.C.CS.CoreV1().Nodes().Get(context.Background(), acctest.RealNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.nodeUID = string(node.UID)
	return a
}

func (a *spireInPod) spireServer(argv ...string) (string, error) {
	return labtest.IncusErr(append([]string{"exec", a.sn.Name, "--", "spire-server"}, argv...)...)
}

// agentID is the SPIFFE ID k8s_psat gives the agent of node on the real node.
func (a *spireInPod) agentID(node string) string { return spire.K8sAgentID(a.Ns, node, a.nodeUID) }

// agents are the SPIFFE IDs of the attested agents of the namespace's k8s_psat clusters.
func (a *spireInPod) agents() ([]string, error) {
	out, err := a.spireServer("agent", "list", "-output", "json")
	if err != nil {
		return nil, fmt.Errorf("agent list: %v %s", err, out)
	}
	var resp struct {
		Agents []struct {
			ID struct {
				TrustDomain string `json:"trust_domain"`
				Path        string `json:"path"`
			} `json:"id"`
		} `json:"agents"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		return nil, fmt.Errorf("agent list: %v: %s", err, out)
	}
	var ids []string
	for _, ag := range resp.Agents {
		id := "spiffe://" + ag.ID.TrustDomain + ag.ID.Path
		if spire.IsK8sAgentOf(id, a.Ns) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// readyPodOf is the one ready, non-terminating pod of node.
func (a *spireInPod) readyPodOf(node string) (*corev1.Pod, error) {
	list, err := a.C.CS.CoreV1().Pods(a.Ns).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.NodeLabel + "=" + node})
	if err != nil {
		return nil, err
	}
	var ready []corev1.Pod
	for _, p := range list.Items {
		for _, c := range p.Status.Conditions {
			if p.DeletionTimestamp == nil && c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = append(ready, p)
			}
		}
	}
	if len(ready) != 1 {
		return nil, fmt.Errorf("want one ready pod of %s, found %d of %d", node, len(ready), len(list.Items))
	}
	return &ready[0], nil
}

func (a *spireInPod) agentLog(pod *corev1.Pod) string {
	out, _ := a.Exec(pod, "cat", "/run/spire-agent/agent.log")
	return tail(out, 3000)
}

// agentRuns: in node's pod, the token copy ran and succeeded (a oneshot that its timer
// starts again), the timer and the agent are active, and the agent's token is the one
// the kubelet projected into this pod.
func (a *spireInPod) agentRuns(node string) (*corev1.Pod, error) {
	pod, err := a.readyPodOf(node)
	if err != nil {
		return nil, err
	}
	if pod.Spec.NodeName != acctest.RealNodeName {
		return nil, fmt.Errorf("pod %s runs on %q, want the real node %s", pod.Name, pod.Spec.NodeName, acctest.RealNodeName)
	}
	if st, err := a.Exec(pod, "systemctl", "show", "-p", "ActiveState,Result", "fedi-spire-token.service"); err != nil || st != "Result=success\nActiveState=inactive" {
		return nil, fmt.Errorf("in pod %s the token copy fedi-spire-token.service: %q (%v), want a success\nagent log:\n%s", pod.Name, st, err, a.agentLog(pod))
	}
	if st, err := a.Exec(pod, "systemctl", "is-active", "fedi-spire-token.timer", "fedi-spire-agent.service"); err != nil || st != "active\nactive" {
		return nil, fmt.Errorf("in pod %s the token copy's timer and the agent are %q (%v), want active\nagent log:\n%s", pod.Name, st, err, a.agentLog(pod))
	}
	if same, err := a.Exec(pod, "sh", "-c", `test -s /run/spire-agent/token/token && test "$(cat /run/spire-agent/token/token)" = "$(cat /run/spire-agent/node-token)" && echo same`); err != nil || same != "same" {
		return nil, fmt.Errorf("in pod %s the agent's token_path /run/spire-agent/node-token is not the projected token (%q, %v)", pod.Name, same, err)
	}
	return pod, nil
}

// fetchSVIDs is what root in the pod gets from the agent's Workload API (the host
// entry's selector is unix:uid:0): `spire-agent api fetch x509`.
func (a *spireInPod) fetchSVIDs(pod *corev1.Pod) (string, error) {
	return a.Exec(pod, "spire-agent", "api", "fetch", "x509", "-socketPath", "/run/spire-agent/api.sock")
}

// holdsHostSVID: root in node's pod gets the X.509 SVID of node's host entry, and no
// other host's. The agent attests once it has started, so it is asked until it answers
// with an SVID, for at most two minutes.
func (a *spireInPod) holdsHostSVID(pod *corev1.Pod, node string) error {
	host := spire.HostID(a.Ns, node)
	var svids string
	var err error
	for i := 0; i < 60; i++ {
		if svids, err = a.fetchSVIDs(pod); err == nil && strings.Contains(svids, "SPIFFE ID:") {
			break
		}
		time.Sleep(2 * time.Second)
	}
	got := regexp.MustCompile(`SPIFFE ID:\s+(\S+)`).FindAllStringSubmatch(svids, -1)
	if len(got) != 1 || got[0][1] != host {
		return fmt.Errorf("root in pod %s of %s gets SVIDs %q (%v), want only %s\nfetch output: %s\nagent log:\n%s", pod.Name, node, got, err, host, svids, a.agentLog(pod))
	}
	a.T.Logf("spire-agent api fetch x509, in pod %s of %s:\n%s", pod.Name, node, svids)
	return nil
}

// serverListsAgentOf: the server lists node's agent, attested with k8s_psat, named
// after the node's cluster and the real node's UID, whose selectors name pod and the
// node's service account.
func (a *spireInPod) serverListsAgentOf(pod *corev1.Pod, node string) error {
	ids, err := a.agents()
	if err != nil {
		return err
	}
	want := a.agentID(node)
	if !slices.Contains(ids, want) {
		return fmt.Errorf("the server lists agents %q of namespace %s, none is %s (%s's cluster, the real node's UID)", ids, a.Ns, want, node)
	}
	list, err := a.spireServer("agent", "list")
	if err != nil {
		return fmt.Errorf("agent list: %v %s", err, list)
	}
	if !regexp.MustCompile(`(?m)` + regexp.QuoteMeta(want) + `\s*\n\s*Attestation type\s*:\s*k8s_psat\s*$`).MatchString(list) {
		return fmt.Errorf("spire-server agent list does not show %s with attestation type k8s_psat:\n%s", want, list)
	}
	show, err := a.spireServer("agent", "show", "-spiffeID", want)
	if err != nil {
		return fmt.Errorf("agent show: %v %s", err, show)
	}
	for _, sel := range []string{"k8s_psat:agent_pod_uid:" + string(pod.UID), "k8s_psat:agent_sa:node-" + node, "k8s_psat:agent_node_name:" + acctest.RealNodeName} {
		if !strings.Contains(show, sel) {
			return fmt.Errorf("the agent's selectors lack %s:\n%s", sel, show)
		}
	}
	a.T.Logf("spire-server agent show:\n%s", show)
	return nil
}

// agentsEvicted is a CheckDestroy: the destroy of the hand-off evicted the agents.
func (a *spireInPod) agentsEvicted(*terraform.State) error {
	ids, err := a.agents()
	if err != nil {
		return err
	}
	if len(ids) != 0 {
		return fmt.Errorf("agents of cluster %s left after the destroy: %q", a.Ns, ids)
	}
	return nil
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
		CheckDestroy:             a.agentsEvicted,
		Steps: []resource.TestStep{{
			PreConfig: func() { start = time.Now() },
			Config:    spireInPodConfig(a.realNodeAcc, a.sn, a.tops),
			Check: func(s *terraform.State) error {
				t.Logf("figure: apply (hand-off, build, push, rollout until systemd says running) on the real node: %s", time.Since(start).Round(100*time.Millisecond))
				pod, err := a.agentRuns("web01")
				if err != nil {
					return err
				}
				if err := a.holdsHostSVID(pod, "web01"); err != nil {
					return err
				}
				return a.serverListsAgentOf(pod, "web01")
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
		CheckDestroy:             a.agentsEvicted,
		Steps: []resource.TestStep{{
			Config: spireInPodConfig(a.realNodeAcc, a.sn, a.tops),
			Check: func(s *terraform.State) error {
				pods := map[string]*corev1.Pod{}
				for _, n := range nodes {
					pod, err := a.agentRuns(n)
					if err != nil {
						return err
					}
					if err := a.holdsHostSVID(pod, n); err != nil {
						return err
					}
					pods[n] = pod
				}
				// Both have attested by now: the server holds two agents, and each pod
				// still gets its own node's SVID only.
				for _, n := range nodes {
					if err := a.serverListsAgentOf(pods[n], n); err != nil {
						return err
					}
				}
				if ids, err := a.agents(); err != nil || len(ids) != len(nodes) {
					return fmt.Errorf("the server lists agents %q (%v) of namespace %s, want one per node, %d", ids, err, a.Ns, len(nodes))
				}
				for _, n := range nodes {
					if err := a.holdsHostSVID(pods[n], n); err != nil {
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

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
