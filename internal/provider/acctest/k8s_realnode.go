package acctest

// The lab's real kubelet node (lab/k8s/node-up.sh), for the acceptance tests of any
// package that roll a node out onto it: a real kubelet, containerd and runc behind the
// RuntimeClass "fediversity-real", and host-directory volumes behind the StorageClass
// "fediversity-real" (no provisioner: a test binds a static volume to each claim) or
// "fediversity-real-provisioned" (made by the in-tree hostPath provisioner).

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
)

const (
	RealNodeName         = "fediversity-real-0"
	RealNodeRuntimeClass = "fediversity-real"
	RealNodeStorageClass = "fediversity-real"
	// RealNodeProvisionedStorageClass has a provisioner: kube-controller-manager's
	// in-tree hostPath one (lab/k8s/up.sh), which makes a volume for each new claim.
	RealNodeProvisionedStorageClass = "fediversity-real-provisioned"
)

// RealNodeState is node-up.sh's state directory (volumes, the node image's base layer,
// containerd's run directory).
func RealNodeState() string {
	if d := os.Getenv("FEDIVERSITY_K8S_NODE_STATE"); d != "" {
		return d
	}
	return "/var/lib/fediversity-k8s-node"
}

// RequireRealNode skips unless the real node is asked for (TF_ACC=1 and
// FEDIVERSITY_K8S_NODE=1), and fails when it is asked for but is not Ready.
func RequireRealNode(t *testing.T) {
	t.Helper()
	if os.Getenv("TF_ACC") == "" || os.Getenv("FEDIVERSITY_K8S_NODE") != "1" {
		t.Skip("real-node test: needs TF_ACC=1 and FEDIVERSITY_K8S_NODE=1 after `bash lab/k8s/node-up.sh`")
	}
	c, _ := AccK8s(t)
	n, err := c.CS.CoreV1().Nodes().Get(context.Background(), RealNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("FEDIVERSITY_K8S_NODE=1 but node %s: %v (run `bash lab/k8s/node-up.sh`)", RealNodeName, err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
			t.Fatalf("FEDIVERSITY_K8S_NODE=1 but node %s is not Ready: %s (run `bash lab/k8s/node-up.sh`)", RealNodeName, cond.Message)
		}
	}
}

// RealNodeVolume binds a static volume of the real node (a host directory, which
// outlives every pod as a cluster's volume would) to the claim the provider makes for
// node in the test's namespace, and returns the directory. Both go at the test's end.
func (a *K8s) RealNodeVolume(node string) string {
	t := a.T
	t.Helper()
	dir := filepath.Join(RealNodeState(), "volumes", a.Ns+"-"+node)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: a.Ns + "-" + node},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: k8sresource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              RealNodeStorageClass,
			ClaimRef:                      &corev1.ObjectReference{Namespace: a.Ns, Name: k8s.ClaimName(node)},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}
	if _, err := a.C.CS.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = a.C.CS.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
		_ = os.RemoveAll(dir)
	})
	return dir
}

// Exec runs a command in the pod's node container through the apiserver and the real
// kubelet, and returns its standard output, trimmed.
func (a *K8s) Exec(pod *corev1.Pod, cmd ...string) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", a.Kc)
	if err != nil {
		return "", err
	}
	req := a.C.CS.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: k8s.ContainerName, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return "", err
	}
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
		return out.String(), fmt.Errorf("exec %v in %s: %w (stderr %q)", cmd, pod.Name, err, errOut.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// SystemdBooted says why the pod is not a node booted on the real node, or nil when it
// is: it runs on the real node, its PID 1 is systemd, systemd says "running", and the
// kubelet made the pod ready only after systemd finished booting (FinishTimestamp, when
// it reached the default target; the Ready transition has second precision). finished
// and ready are those two times, for a test's log.
func (a *K8s) SystemdBooted(pod *corev1.Pod) (finished, ready time.Time, err error) {
	if pod.Spec.NodeName != RealNodeName {
		return finished, ready, fmt.Errorf("pod %s runs on %q, want the real node %s", pod.Name, pod.Spec.NodeName, RealNodeName)
	}
	if comm, err := a.Exec(pod, "cat", "/proc/1/comm"); err != nil || comm != "systemd" {
		return finished, ready, fmt.Errorf("pod %s: PID 1 is %q (err %v), want systemd", pod.Name, comm, err)
	}
	if state, err := a.Exec(pod, "systemctl", "is-system-running"); err != nil || state != "running" {
		return finished, ready, fmt.Errorf("pod %s: systemctl is-system-running says %q (err %v) in a ready pod", pod.Name, state, err)
	}
	finish, err := a.Exec(pod, "systemctl", "show", "-p", "FinishTimestamp", "--timestamp=unix", "--value")
	if err != nil {
		return finished, ready, err
	}
	var sec int64
	if _, err := fmt.Sscanf(strings.TrimPrefix(finish, "@"), "%d", &sec); err != nil {
		return finished, ready, fmt.Errorf("pod %s: FinishTimestamp %q: %v", pod.Name, finish, err)
	}
	finished = time.Unix(sec, 0)
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.LastTransitionTime.Time
		}
	}
	if ready.Unix() < sec {
		return finished, ready, fmt.Errorf("pod %s became ready at %s, before systemd finished booting at %s", pod.Name, ready.UTC(), finished.UTC())
	}
	return finished, ready, nil
}
