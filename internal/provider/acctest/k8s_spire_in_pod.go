package acctest

// A SPIRE agent inside a node's pod on the lab's real kubelet node, for the acceptance
// tests of any package that roll such a node out (the resources directly, or a group
// module): the route from the pods to the lab's spire-server, and what a test asks of
// the agent, of the server and of the pod.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

// realNodePodBridge is the real node's pod bridge (lab/k8s/node-up.sh): its address is
// the host as the node's pods reach it.
const realNodePodBridge = "fedik8s0"

// SpireInPod is one test's nodes with a SPIRE agent in their pods on the real node: the
// namespace (of K8s), the spire node, the route from the pods to spire-server and the
// real node's UID.
type SpireInPod struct {
	*K8s
	SN labtest.SpireNode
	// Server and Port are the address the pods' agents dial (PodSpireRoute).
	Server string
	Port   int
	// nodeUID is the real node's UID: k8s_psat names the agent after it.
	nodeUID string
}

// NewSpireInPod asks for the spire node, routes the real node's pods to its
// spire-server, and registers cleanups that leave no entries, files or agents of nodes
// on the spire node, nor the hand-off's RBAC, whatever the test's end. The caller makes
// the nodes' volumes (RealNodeVolume) and builds their systems (labtest.BuildBootableSpireAgent
// with Server and Port, or the same arguments through a roster's build).
func NewSpireInPod(t *testing.T, a *K8s, nodes ...string) *SpireInPod {
	t.Helper()
	RequireRealNode(t)
	s := &SpireInPod{K8s: a, SN: labtest.Spire(t)}
	// The provider reaches the spire node with this SSH credential (also from a last,
	// empty root whose provider block names none).
	t.Setenv("SSH_PRIVATE_KEY_FILE", labtest.KeyFile())
	t.Cleanup(func() {
		_ = a.C.DeleteSpireHandOff(context.Background(), a.Ns)
		_, _ = labtest.IncusErr("exec", s.SN.Name, "--", "rm", "-rf", "/var/lib/spire/fediversity/k8s/"+a.Ns)
		for _, n := range nodes {
			for _, kind := range []string{"alias", "host"} {
				_, _ = s.SpireServer("entry", "delete", "-entryID", spire.K8sEntryPrefix(a.Ns)+n+"."+kind)
			}
		}
		if ids, err := s.Agents(); err == nil {
			for _, id := range ids {
				_, _ = s.SpireServer("agent", "evict", "-spiffeID", id)
			}
		}
	})
	s.Server, s.Port = podSpireRoute(t, s.SN)
	node, err := a.C.CS.CoreV1().Nodes().Get(context.Background(), RealNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.nodeUID = string(node.UID)
	return s
}

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

// SpireServer runs spire-server with argv on the spire node.
func (s *SpireInPod) SpireServer(argv ...string) (string, error) {
	return labtest.IncusErr(append([]string{"exec", s.SN.Name, "--", "spire-server"}, argv...)...)
}

// AgentID is the SPIFFE ID k8s_psat gives the agent of node on the real node.
func (s *SpireInPod) AgentID(node string) string { return spire.K8sAgentID(s.Ns, node, s.nodeUID) }

// Agents are the SPIFFE IDs of the attested agents of the namespace's k8s_psat clusters.
func (s *SpireInPod) Agents() ([]string, error) {
	out, err := s.SpireServer("agent", "list", "-output", "json")
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
		if spire.IsK8sAgentOf(id, s.Ns) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// readyPodOf is the one ready, non-terminating pod of node.
func (s *SpireInPod) readyPodOf(node string) (*corev1.Pod, error) {
	list, err := s.C.CS.CoreV1().Pods(s.Ns).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.NodeLabel + "=" + node})
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

func (s *SpireInPod) agentLog(pod *corev1.Pod) string {
	out, _ := s.Exec(pod, "cat", "/run/spire-agent/agent.log")
	if len(out) > 3000 {
		out = out[len(out)-3000:]
	}
	return out
}

// AgentRuns: in node's pod, on the real node, the token copy ran and succeeded (a
// oneshot that its timer starts again), the timer and the agent are active, and the
// agent's token is the one the kubelet projected into this pod.
func (s *SpireInPod) AgentRuns(node string) (*corev1.Pod, error) {
	pod, err := s.readyPodOf(node)
	if err != nil {
		return nil, err
	}
	if pod.Spec.NodeName != RealNodeName {
		return nil, fmt.Errorf("pod %s runs on %q, want the real node %s", pod.Name, pod.Spec.NodeName, RealNodeName)
	}
	if st, err := s.Exec(pod, "systemctl", "show", "-p", "ActiveState,Result", "fedi-spire-token.service"); err != nil || st != "Result=success\nActiveState=inactive" {
		return nil, fmt.Errorf("in pod %s the token copy fedi-spire-token.service: %q (%v), want a success\nagent log:\n%s", pod.Name, st, err, s.agentLog(pod))
	}
	if st, err := s.Exec(pod, "systemctl", "is-active", "fedi-spire-token.timer", "fedi-spire-agent.service"); err != nil || st != "active\nactive" {
		return nil, fmt.Errorf("in pod %s the token copy's timer and the agent are %q (%v), want active\nagent log:\n%s", pod.Name, st, err, s.agentLog(pod))
	}
	if same, err := s.Exec(pod, "sh", "-c", `test -s /run/spire-agent/token/token && test "$(cat /run/spire-agent/token/token)" = "$(cat /run/spire-agent/node-token)" && echo same`); err != nil || same != "same" {
		return nil, fmt.Errorf("in pod %s the agent's token_path /run/spire-agent/node-token is not the projected token (%q, %v)", pod.Name, same, err)
	}
	return pod, nil
}

// HoldsHostSVID: root in node's pod gets the X.509 SVID of node's host entry, and no
// other host's, from the agent's Workload API (`spire-agent api fetch x509`; the host
// entry's selector is unix:uid:0). The agent attests once it has started, so it is
// asked until it answers with an SVID, for at most two minutes.
func (s *SpireInPod) HoldsHostSVID(pod *corev1.Pod, node string) error {
	host := spire.HostID(s.Ns, node)
	var svids string
	var err error
	for i := 0; i < 60; i++ {
		svids, err = s.Exec(pod, "spire-agent", "api", "fetch", "x509", "-socketPath", "/run/spire-agent/api.sock")
		if err == nil && strings.Contains(svids, "SPIFFE ID:") {
			break
		}
		time.Sleep(2 * time.Second)
	}
	got := regexp.MustCompile(`SPIFFE ID:\s+(\S+)`).FindAllStringSubmatch(svids, -1)
	if len(got) != 1 || got[0][1] != host {
		return fmt.Errorf("root in pod %s of %s gets SVIDs %q (%v), want only %s\nfetch output: %s\nagent log:\n%s", pod.Name, node, got, err, host, svids, s.agentLog(pod))
	}
	s.T.Logf("spire-agent api fetch x509, in pod %s of %s:\n%s", pod.Name, node, svids)
	return nil
}

// ServerListsAgentOf: the server lists node's agent, attested with k8s_psat, named
// after the node's cluster and the real node's UID, whose selectors name pod and the
// node's service account.
func (s *SpireInPod) ServerListsAgentOf(pod *corev1.Pod, node string) error {
	ids, err := s.Agents()
	if err != nil {
		return err
	}
	want := s.AgentID(node)
	if !slices.Contains(ids, want) {
		return fmt.Errorf("the server lists agents %q of namespace %s, none is %s (%s's cluster, the real node's UID)", ids, s.Ns, want, node)
	}
	list, err := s.SpireServer("agent", "list")
	if err != nil {
		return fmt.Errorf("agent list: %v %s", err, list)
	}
	if !regexp.MustCompile(`(?m)` + regexp.QuoteMeta(want) + `\s*\n\s*Attestation type\s*:\s*k8s_psat\s*$`).MatchString(list) {
		return fmt.Errorf("spire-server agent list does not show %s with attestation type k8s_psat:\n%s", want, list)
	}
	show, err := s.SpireServer("agent", "show", "-spiffeID", want)
	if err != nil {
		return fmt.Errorf("agent show: %v %s", err, show)
	}
	for _, sel := range []string{"k8s_psat:agent_pod_uid:" + string(pod.UID), "k8s_psat:agent_sa:node-" + node, "k8s_psat:agent_node_name:" + RealNodeName} {
		if !strings.Contains(show, sel) {
			return fmt.Errorf("the agent's selectors lack %s:\n%s", sel, show)
		}
	}
	s.T.Logf("spire-server agent show:\n%s", show)
	return nil
}

// AgentsEvicted is a CheckDestroy: the destroy of the hand-off evicted the agents.
func (s *SpireInPod) AgentsEvicted(*terraform.State) error {
	ids, err := s.Agents()
	if err != nil {
		return err
	}
	if len(ids) != 0 {
		return fmt.Errorf("agents of cluster %s left after the destroy: %q", s.Ns, ids)
	}
	return nil
}
