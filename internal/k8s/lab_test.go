package k8s

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// labClient skips unless the control plane of lab/k8s/up.sh is meant to run.
func labClient(t *testing.T) *Client {
	t.Helper()
	if os.Getenv("FEDIVERSITY_K8S") != "1" {
		t.Skip("needs FEDIVERSITY_K8S=1 and the control plane of lab/k8s/up.sh")
	}
	kc := os.Getenv("KUBE_CONFIG_PATH")
	if kc == "" {
		kc = "/var/lib/fediversity-k8s/kubeconfig"
	}
	c, err := NewClient(kc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func labNamespace(t *testing.T, c *Client) string {
	var b [4]byte
	rand.Read(b[:])
	ns := fmt.Sprintf("engine-%x", b)
	if _, err := c.EnsureNamespace(context.Background(), ns, "", false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CS.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	return ns
}

// A Deployment whose RuntimeClass does not exist: the real ReplicaSet controller cannot
// create the pod ("pod rejected: RuntimeClass … not found"); the wait stops after the
// grace, long before its limit, and names the cause.
func TestLabMissingRuntimeClassFailsFast(t *testing.T) {
	c := labClient(t)
	ctx := context.Background()
	if err := c.RuntimeClassExists(ctx, "fediversity"); err != nil {
		t.Fatalf("the lab should have RuntimeClass fediversity: %v", err)
	}
	if err := c.RuntimeClassExists(ctx, "no-such-class"); err == nil || !strings.Contains(err.Error(), "no RuntimeClass") {
		t.Fatalf("err = %v", err)
	}
	ns := labNamespace(t, c)
	s := testSpec()
	s.Namespace, s.RuntimeClass, s.StorageClass = ns, "no-such-class", "fediversity-lab"
	s.Image = "127.0.0.1:1/x/web01@sha256:" + strings.Repeat("ab", 32)
	_, err := c.Rollout(ctx, s, WaitOptions{Limit: 5 * time.Minute, PullGrace: 2 * time.Second})
	var rerr *RolloutError
	if !errors.As(err, &rerr) {
		t.Fatalf("err = %v, want a RolloutError", err)
	}
	if rerr.Reason != ReasonReplicaFailure || !rerr.Early || !strings.Contains(rerr.Error(), `RuntimeClass "no-such-class" not found`) {
		t.Fatalf("got %s early=%v:\n%v", rerr.Reason, rerr.Early, rerr)
	}
	if rerr.RolledBack || !strings.Contains(rerr.Error(), "no previous image") {
		t.Fatalf("a first deploy has nothing to go back to:\n%v", rerr)
	}
	np, err := c.GetNamespace(ctx, ns)
	if err != nil || !np.Exists || !np.NetworkPolicy {
		t.Fatalf("namespace state %+v err %v", np, err)
	}
}

// A namespace deleted and re-created under the same name (with the provider's label, as
// another state of this provider would make it) is refused by the destroy of the first,
// and the real apiserver refuses a delete whose UID precondition is stale: the engine's
// check and delete are one step.
func TestLabNamespaceDeleteChecksUID(t *testing.T) {
	c := labClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var b [4]byte
	rand.Read(b[:])
	name := fmt.Sprintf("engine-%x", b)
	t.Cleanup(func() { _ = c.CS.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	first, err := c.EnsureNamespace(ctx, name, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteNamespace(ctx, name, first); err != nil {
		t.Fatalf("delete of our own namespace: %v", err)
	}
	second, err := c.EnsureNamespace(ctx, name, "", false) // someone else's, made the same way
	if err != nil || second == first {
		t.Fatalf("re-create: uid %s (first %s), err %v", second, first, err)
	}
	err = c.DeleteNamespace(ctx, name, first)
	var replaced *ReplacedNamespaceError
	if !errors.As(err, &replaced) || replaced.UID != second {
		t.Fatalf("err = %v, want a ReplacedNamespaceError naming %s", err, second)
	}
	stale := types.UID(first)
	err = c.CS.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &stale}})
	if !apierrors.IsConflict(err) {
		t.Fatalf("the apiserver answered a stale UID precondition with %v, want a conflict", err)
	}
	ns, err := c.CS.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err != nil || string(ns.UID) != second || ns.DeletionTimestamp != nil {
		t.Fatalf("the re-created namespace after the refused deletes: %v (err %v)", ns, err)
	}
}

// The namespace's NetworkPolicy, as the real apiserver stores it, admits ingress only
// from pods of the same namespace: it selects every pod, is of type Ingress only, and
// has one rule whose one peer is a pod selector matching all (no namespace selector, no
// IP block, no port limit). The lab cannot enforce it (no policy-enforcing network
// plugin): this proves what a plugin would be told, not traffic refused.
func TestLabNamespacePolicyAdmitsOnlyItsOwnPods(t *testing.T) {
	c := labClient(t)
	ns := labNamespace(t, c)
	p, err := c.CS.NetworkingV1().NetworkPolicies(ns).Get(context.Background(), NetworkPolicyName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the namespace %s has no NetworkPolicy %s: %v", ns, NetworkPolicyName, err)
	}
	s := p.Spec
	if len(s.PodSelector.MatchLabels) != 0 || len(s.PodSelector.MatchExpressions) != 0 {
		t.Errorf("the policy selects %v, not every pod of the namespace", s.PodSelector)
	}
	if len(s.PolicyTypes) != 1 || s.PolicyTypes[0] != "Ingress" || len(s.Egress) != 0 {
		t.Errorf("policy types %v, egress %v: want Ingress only", s.PolicyTypes, s.Egress)
	}
	if len(s.Ingress) != 1 || len(s.Ingress[0].From) != 1 || len(s.Ingress[0].Ports) != 0 {
		t.Fatalf("ingress rules %+v: want one rule with one peer and no port limit", s.Ingress)
	}
	peer := s.Ingress[0].From[0]
	if peer.PodSelector == nil || len(peer.PodSelector.MatchLabels) != 0 || len(peer.PodSelector.MatchExpressions) != 0 ||
		peer.NamespaceSelector != nil || peer.IPBlock != nil {
		t.Fatalf("ingress peer %+v: want every pod of this namespace only (an empty pod selector, no namespace selector, no IP block)", peer)
	}
}
