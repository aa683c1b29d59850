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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if err := c.EnsureNamespace(context.Background(), ns, false); err != nil {
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
