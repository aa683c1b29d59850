// Package k8s is the rollout engine of the k8s method (docs/kubernetes.md#k8s): it prepares the target
// namespace, applies the per-node objects, waits for the rollout, classifies why a pod
// does not become ready, and sets a Deployment back to its previous pod template.
//
// Decisions, in the order an apply meets them:
//
//   - Namespace: created with a NetworkPolicy "same-namespace-only" that selects every
//     pod and admits ingress only from pods of the same namespace. It is applied
//     before any Deployment. Nothing in the test control plane enforces it; a cluster with
//     a policy-enforcing network plugin does.
//   - RuntimeClass: checked for existence before anything is pushed (the provider calls
//     RuntimeClassExists at plan time). Without it the ReplicaSet controller cannot create
//     the pod at all.
//   - Per node: the claim "<node>-state" (mounted on /var/lib, never deleted by a rollout
//     or a rollback), the service account "node-<node>", and a Deployment "<node>" with one
//     replica and strategy Recreate, so two pods never share the claim.
//   - The pod runs systemd as PID 1: its own user namespace (hostUsers: false), a tty,
//     tmpfs on /run and /tmp, the environment "container=fediversity" (systemd's container
//     detection reads it) and "container_uuid" (systemd takes it as the machine ID, so the
//     machine ID is the same across pod replacements and distinct per node). The
//     pod asks for no capability and no host path: what systemd needs beyond its own user
//     namespace (a delegated, writable cgroup tree and the capabilities of that user
//     namespace) is the method's RuntimeClass handler's job, as the lab's real node shows
//     (lab/k8s/fediversity-runtime).
//   - Readiness is `systemctl is-system-running`, which exits non-zero for "starting" and
//     "degraded", so a failed unit keeps the pod unready.
//   - The image is always named by digest, so a later change of the tag does not change the pod.
//   - Applying the Deployment and waiting for it are separate calls. The wait has
//     an operator-set limit and stops early on states that do not recover: ErrImagePull or
//     ImagePullBackOff seen for longer than a grace period, CrashLoopBackOff, an
//     Unschedulable pod, a claim whose provisioning failed, a ReplicaSet that cannot
//     create its pod, and a systemd that booted with a failed unit (the readiness probe
//     answers "degraded": that does not change by itself once the boot is done). The error carries the pod-level reasons: container waiting reasons
//     and messages, the pod's false conditions, the claim's phase, and recent Warning
//     events of the pod and the claim.
//   - Rollback restores the whole previous pod template, as `kubectl rollout undo` does,
//     not just the image, and then waits (bounded) for the old pod to be ready again. It
//     sets back only what this run rolled out: the apply records the generation and the
//     template of its own write, and a Deployment changed since by another writer is
//     left as that writer left it; the apply fails naming that writer's image and, from
//     the managedFields, its field manager.
//   - Namespace destroy deletes only the namespace the state recorded: same UID, still
//     labelled as the provider's. The delete carries the UID as a precondition.
//
// This package must not import the plugin framework.
package k8s

import (
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeConfigEnv names the kubeconfig file.
const KubeConfigEnv = "KUBE_CONFIG_PATH"

// ErrNoKubeConfig is returned when no kubeconfig path was given.
var ErrNoKubeConfig = errors.New("no kubeconfig is set: set " + KubeConfigEnv + " (or the provider's kube_config_path) to the kubeconfig file of the cluster")

// Client talks to one cluster.
type Client struct {
	CS kubernetes.Interface
	// Poll is the interval of every wait loop; zero means one second.
	Poll time.Duration
}

// NewClient reads the kubeconfig at path. The file's content never leaves this process.
func NewClient(path string) (*Client, error) {
	if path == "" {
		return nil, ErrNoKubeConfig
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("kubeconfig (%s) %s: %w", KubeConfigEnv, path, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig (%s) %s is not usable: %w", KubeConfigEnv, path, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.Timeout = 30 * time.Second
	cfg.UserAgent = "terraform-provider-fediversity"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig (%s) %s: %w", KubeConfigEnv, path, err)
	}
	return &Client{CS: cs}, nil
}

func (c *Client) poll() time.Duration {
	if c.Poll > 0 {
		return c.Poll
	}
	return time.Second
}
