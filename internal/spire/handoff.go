package spire

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Audience is the audience of the node tokens the k8s_psat attestor accepts.
const Audience = "spire-server"

// K8sCluster is the k8s_psat cluster of one node of a namespace, "<namespace>.<node>",
// whose allow list holds only the node's service account node-<node>. One cluster per
// node, not per namespace: k8s_psat names an agent after its cluster and the UID of the
// kubelet node its pod runs on (spiffe://<td>/spire/agent/k8s_psat/<cluster>/<node UID>),
// and every node runs an agent of its own. With one cluster per namespace, two nodes of a
// namespace on one kubelet node were one agent to the server: each attestation replaced
// the other's selectors, and one node's pod was given the other's host SVID (found by
// TestAccK8sRolloutRealNode_spireAgentsOfTwoNodesOnOneKubelet). A namespace is a DNS
// label, so the dot cannot be part of it and the name is unambiguous.
func K8sCluster(namespace, node string) string { return namespace + "." + node }

// AliasID is the node alias of a k8s node: the SPIFFE ID its agent gets through the
// k8s_psat selectors of cluster <namespace>.<node>, agent namespace <namespace> and agent
// service account node-<node>.
func AliasID(namespace, node string) string {
	return fmt.Sprintf("spiffe://%s/k8s/%s/%s/node-%s", TrustDomain, namespace, namespace, node)
}

// HostID is the host entry of a node of a group (for k8s, the group is the namespace).
func HostID(group, node string) string {
	return fmt.Sprintf("spiffe://%s/host/%s-%s", TrustDomain, group, node)
}

// HostSelector is what a workload on the node must be to get the host SVID: root, as
// seen by the agent's unix workload attestor.
const HostSelector = "unix:uid:0"

// K8sEntryPrefix is the entry ID prefix of one namespace's hand-off.
func K8sEntryPrefix(namespace string) string { return "fediversity.k8s." + namespace + "." }

// HandOff is the SPIRE side of one namespace of the k8s-operator method.
type HandOff struct {
	Namespace string
	Nodes     []string
}

// Entries are the registration entries of the hand-off: per node, the alias (parented to
// the server, matched by k8s_psat selectors) and the host entry parented to it.
func (h HandOff) Entries() []Entry {
	var out []Entry
	prefix := K8sEntryPrefix(h.Namespace)
	for _, n := range sortedCopy(h.Nodes) {
		out = append(out,
			Entry{
				ID: prefix + n + ".alias", SpiffeID: AliasID(h.Namespace, n), ParentID: ServerID,
				Selectors: sortedCopy([]string{
					"k8s_psat:cluster:" + K8sCluster(h.Namespace, n),
					"k8s_psat:agent_ns:" + h.Namespace,
					"k8s_psat:agent_sa:node-" + n,
				}),
			},
			Entry{ID: prefix + n + ".host", SpiffeID: HostID(h.Namespace, n), ParentID: AliasID(h.Namespace, n), Selectors: []string{HostSelector}},
		)
	}
	return out
}

// dropFile is the content of one node's drop-file: what the hand-off registered for it.
// It holds no secret.
type dropFile struct {
	Namespace      string `json:"namespace"`
	Node           string `json:"node"`
	ServiceAccount string `json:"service_account"`
	Alias          string `json:"alias"`
	Host           string `json:"host"`
}

func (s *Server) nsDir(namespace string) string { return s.Dir() + "/k8s/" + namespace }

// KubeConfigPath is where the namespace's kubeconfig lives on the spire node.
func (s *Server) KubeConfigPath(namespace string) string { return s.nsDir(namespace) + "/kubeconfig" }

// ApplyHandOff writes the namespace's kubeconfig (through stdin) and exactly one
// drop-file per node, regenerates the k8s_psat clusters and has the server reload them,
// then reconciles the namespace's entries.
func (s *Server) ApplyHandOff(ctx context.Context, h HandOff, kubeconfig []byte) (Changes, error) {
	if len(kubeconfig) == 0 {
		return Changes{}, fmt.Errorf("namespace %s: empty kubeconfig for the spire node (a bug)", h.Namespace)
	}
	if err := WriteFile(ctx, s.Runner, s.Node, s.KubeConfigPath(h.Namespace), "0600", kubeconfig); err != nil {
		return Changes{}, err
	}
	if err := s.writeDropFiles(ctx, h); err != nil {
		return Changes{}, err
	}
	if err := s.syncClusters(ctx); err != nil {
		return Changes{}, err
	}
	return s.Reconcile(ctx, K8sEntryPrefix(h.Namespace), h.Entries())
}

// RewriteKubeConfig only replaces the kubeconfig (a fresh token); the attestor reads it
// at its next TokenReview, so no reload is needed.
func (s *Server) RewriteKubeConfig(ctx context.Context, namespace string, kubeconfig []byte) error {
	return WriteFile(ctx, s.Runner, s.Node, s.KubeConfigPath(namespace), "0600", kubeconfig)
}

// writeDropFiles leaves exactly the drop-files of h.Nodes in the namespace's nodes dir.
// The files' content comes on stdin, one "<node>\t<json>" line each.
func (s *Server) writeDropFiles(ctx context.Context, h HandOff) error {
	var in strings.Builder
	for _, n := range sortedCopy(h.Nodes) {
		b, err := json.Marshal(dropFile{Namespace: h.Namespace, Node: n, ServiceAccount: h.Namespace + ":node-" + n,
			Alias: AliasID(h.Namespace, n), Host: HostID(h.Namespace, n)})
		if err != nil {
			return err
		}
		in.WriteString(n + "\t" + string(b) + "\n")
	}
	const script = `set -e; umask 077; d="$1/nodes"; mkdir -p "$d"
tab=$(printf '\t')
rm -f "$d"/*.json.new
while IFS= read -r line; do
  n=${line%%"$tab"*}; printf '%s\n' "${line#*"$tab"}" >"$d/$n.json.new"
done
for f in "$d"/*.json; do [ -e "$f" ] || continue; [ -e "$f.new" ] || rm -f "$f"; done
for f in "$d"/*.json.new; do [ -e "$f" ] || continue; mv -f "$f" "${f%.new}"; done`
	res, err := s.sh(ctx, []byte(in.String()), script, s.nsDir(h.Namespace))
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("spire node %s: write the drop-files of %s: %s", s.Node, h.Namespace, firstLines(string(res.Stderr), 3))
	}
	return nil
}

// syncClusters regenerates the k8s_psat attestor's clusters (one per drop-file:
// K8sCluster) from the hand-off tree on the spire node and signals the server (SIGUSR1 reloads plugin_data_file) only when the
// file changed. It holds a lock, so two namespaces applied at once do not lose one.
func (s *Server) syncClusters(ctx context.Context) error {
	const script = `set -e; umask 077; root=$1; svc=$2; out="$root/k8s_psat.hcl"; mkdir -p "$root/k8s"
exec 9>"$root/.lock"; if command -v flock >/dev/null; then flock 9; fi
{
  echo 'clusters = {'
  for d in "$root"/k8s/*; do
    [ -f "$d/kubeconfig" ] || continue
    ns=$(basename "$d")
    for f in "$d"/nodes/*.json; do
      [ -e "$f" ] || continue
      n=$(basename "$f" .json)
      printf '  "%s.%s" = {\n    service_account_allow_list = ["%s:node-%s"]\n    audience = ["spire-server"]\n    kube_config_file = "%s"\n  }\n' "$ns" "$n" "$ns" "$n" "$d/kubeconfig"
    done
  done
  echo '}'
} >"$out.tmp"
if cmp -s "$out.tmp" "$out" 2>/dev/null; then rm -f "$out.tmp"; exit 0; fi
mv -f "$out.tmp" "$out"
systemctl kill --signal=SIGUSR1 --kill-whom=main "$svc"`
	res, err := s.sh(ctx, nil, script, s.Dir(), s.service())
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("spire node %s: regenerate the k8s_psat clusters and reload %s: %s", s.Node, s.service(), firstLines(string(res.Stderr), 3))
	}
	return nil
}

// HandOffState is what the spire node holds for a namespace.
type HandOffState struct {
	KubeConfig bool     // the kubeconfig file exists
	Nodes      []string // the drop-files, sorted
	Entries    []Entry  // the namespace's entries on the server
}

// ReadHandOff reads the namespace's files and entries.
func (s *Server) ReadHandOff(ctx context.Context, namespace string) (HandOffState, error) {
	const script = `d="$1"; [ -f "$d/kubeconfig" ] && echo kubeconfig
for f in "$d"/nodes/*.json; do [ -e "$f" ] && echo "node $(basename "$f" .json)"; done; exit 0`
	res, err := s.sh(ctx, nil, script, s.nsDir(namespace))
	if err != nil {
		return HandOffState{}, err
	}
	var st HandOffState
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		switch {
		case line == "kubeconfig":
			st.KubeConfig = true
		case strings.HasPrefix(line, "node "):
			st.Nodes = append(st.Nodes, strings.TrimPrefix(line, "node "))
		}
	}
	sort.Strings(st.Nodes)
	if st.Entries, err = s.OwnedEntries(ctx, K8sEntryPrefix(namespace)); err != nil {
		return st, err
	}
	return st, nil
}

// RegisteredNodes are the nodes of st that have their drop-file and both entries as
// the hand-off makes them.
func (st HandOffState) RegisteredNodes(namespace string) []string {
	want := map[string]Entry{}
	for _, e := range (HandOff{Namespace: namespace, Nodes: st.Nodes}).Entries() {
		want[e.ID] = e
	}
	ok := map[string]int{}
	for _, e := range st.Entries {
		if w, found := want[e.ID]; found && w.equal(Entry{ID: e.ID, SpiffeID: e.SpiffeID, ParentID: e.ParentID, Selectors: sortedCopy(e.Selectors)}) {
			node := strings.TrimPrefix(e.ID, K8sEntryPrefix(namespace))
			node = node[:strings.LastIndex(node, ".")]
			ok[node]++
		}
	}
	var out []string
	for _, n := range st.Nodes {
		if ok[n] == 2 {
			out = append(out, n)
		}
	}
	return out
}

// K8sAgentPrefix is the SPIFFE ID prefix of the agents that attested with k8s_psat in
// the clusters of the namespace's nodes (K8sCluster), and in the namespace's own cluster
// as hand-offs before one cluster per node named it ("<namespace>/").
func K8sAgentPrefix(namespace string) string {
	return "spiffe://" + TrustDomain + "/spire/agent/k8s_psat/" + namespace
}

// IsK8sAgentOf reports whether the agent (a SPIFFE ID) attested in a cluster of the
// namespace.
func IsK8sAgentOf(agent, namespace string) bool {
	rest, ok := strings.CutPrefix(agent, K8sAgentPrefix(namespace))
	return ok && (strings.HasPrefix(rest, ".") || strings.HasPrefix(rest, "/"))
}

// K8sAgentID is the SPIFFE ID of the agent of node of the namespace on the kubelet node
// with UID kubeletNodeUID.
func K8sAgentID(namespace, node, kubeletNodeUID string) string {
	return "spiffe://" + TrustDomain + "/spire/agent/k8s_psat/" + K8sCluster(namespace, node) + "/" + kubeletNodeUID
}

// RetireHandOff removes the namespace from the spire node: its cluster leaves the
// k8s_psat attestor (reloaded), its kubeconfig and drop-files are deleted, its entries
// are deleted, and the agents that attested in its cluster are evicted (they could not
// attest again anyway, and would otherwise stay listed until their SVIDs expire).
func (s *Server) RetireHandOff(ctx context.Context, namespace string) (Changes, error) {
	res, err := s.sh(ctx, nil, `rm -rf "$1"`, s.nsDir(namespace))
	if err != nil {
		return Changes{}, err
	}
	if res.ExitCode != 0 {
		return Changes{}, fmt.Errorf("spire node %s: remove %s: %s", s.Node, s.nsDir(namespace), firstLines(string(res.Stderr), 3))
	}
	if err := s.syncClusters(ctx); err != nil {
		return Changes{}, err
	}
	ch, err := s.Reconcile(ctx, K8sEntryPrefix(namespace), nil)
	if err != nil {
		return ch, err
	}
	agents, err := s.Agents(ctx)
	if err != nil {
		return ch, err
	}
	for _, a := range agents {
		if IsK8sAgentOf(a, namespace) {
			if err := s.EvictAgent(ctx, a); err != nil {
				return ch, err
			}
		}
	}
	return ch, nil
}
