package k8s_test

// Acceptance tests of the k8s method on the lab's real node (lab/k8s/node-up.sh): a real
// kubelet, containerd and runc behind the RuntimeClass "fediversity-real", whose handler
// gives an unprivileged pod a delegated cgroup tree (lab/k8s/fediversity-runtime). The
// pod spec is the provider's own, unchanged. The node image is the lab's debootstrap
// Debian with systemd as /sbin/init, pushed by fediversity_image to a real registry in
// this process and pulled from it by containerd.
//
// They run when TF_ACC=1 and FEDIVERSITY_K8S_NODE=1, and fail (not skip) when asked for
// while the node is not up. kwok's tests keep to kwok's node: the RuntimeClass's
// scheduling holds the real node's label and toleration, and the real node is tainted.

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// nodeImage writes a docker archive of the lab's systemd rootfs (the base layer that
// node-up.sh keeps gzipped) with one small layer on top: /etc/fediversity-variant naming
// the variant, and the extra files given (path -> content; content "->target" is a symlink).
// Its stop signal is SIGRTMIN+3, as the image builder (internal/image) sets it.
func nodeImage(t *testing.T, dir string, base v1.Layer, variant string, files map[string]string) string {
	t.Helper()
	return nodeImageStoppedBy(t, dir, base, variant, files, "SIGRTMIN+3")
}

// nodeImageStoppedBy is nodeImage with the image's stop signal given; "" sets none, so
// the runtime stops the container with SIGTERM.
func nodeImageStoppedBy(t *testing.T, dir string, base v1.Layer, variant string, files map[string]string, stopSignal string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	all := map[string]string{"etc/fediversity-variant": variant + "\n"}
	for k, v := range files {
		all[k] = v
	}
	for p, content := range all {
		h := &tar.Header{Name: p, Mode: 0o644, ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Size: int64(len(content))}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			h = &tar.Header{Name: p, Mode: 0o777, ModTime: time.Unix(0, 0), Typeflag: tar.TypeSymlink, Linkname: target}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.WriteString(tw, content); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	top, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, base, top)
	if err != nil {
		t.Fatal(err)
	}
	// SIGRTMIN+3 asks systemd to halt: the old pod of a Recreate rollout stops at once
	// instead of at the end of its grace period (SIGTERM, with no stop signal, makes
	// systemd re-execute itself; see resource_k8s_rollout_realnode_stop_test.go).
	img, err = mutate.Config(img, v1.Config{Cmd: []string{"/sbin/init"}, StopSignal: stopSignal})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, variant+".tar")
	tag, _ := name.NewTag("fediversity.local/node:" + variant)
	if err := tarball.WriteToFile(p, tag, img); err != nil {
		t.Fatal(err)
	}
	return p
}

// nodeBaseLayer is the lab's systemd rootfs layer that node-up.sh keeps gzipped.
func nodeBaseLayer(t *testing.T) v1.Layer {
	t.Helper()
	base, err := tarball.LayerFromFile(filepath.Join(acctest.RealNodeState(), "node-layer.tar.gz"))
	if err != nil {
		t.Fatalf("node image base layer (made by node-up.sh): %v", err)
	}
	return base
}

// realNodeAcc is one test's namespace, registry and static volume on the real node.
type realNodeAcc struct {
	*k8sAcc
	volume string // host directory behind the claim web01-state
}

func newRealNodeAcc(t *testing.T) *realNodeAcc {
	acctest.RequireRealNode(t)
	a := &realNodeAcc{k8sAcc: newK8sAcc(t)}
	a.volume = a.RealNodeVolume("web01")
	return a
}

func (a *realNodeAcc) config(archive, tag, rolloutWait string) string {
	return acctest.Config(a.Provider(a.Reg.Host) + fmt.Sprintf(`
resource "fediversity_k8s_namespace" "ns" {
  runtime_class = %q
}

resource "fediversity_image" "node" {
  namespace = fediversity_k8s_namespace.ns.name
  node      = "web01"
  tag       = %q
  archive   = %q
}

resource "fediversity_k8s_rollout" "web01" {
  namespace     = fediversity_k8s_namespace.ns.name
  node          = "web01"
  image_ref     = fediversity_image.node.image_ref
  runtime_class = fediversity_k8s_namespace.ns.runtime_class
  storage_class = %q
  timings {
    rollout_wait = %q
  }
}
`, acctest.RealNodeRuntimeClass, tag, archive, acctest.RealNodeStorageClass, rolloutWait))
}

// hostUIDMap is /proc/<pid>/uid_map, read on the host, of the pod's PID 1.
func (a *realNodeAcc) hostUIDMap(pod *corev1.Pod) (string, error) {
	if len(pod.Status.ContainerStatuses) != 1 {
		return "", fmt.Errorf("pod %s has %d container statuses", pod.Name, len(pod.Status.ContainerStatuses))
	}
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	pid, err := os.ReadFile(filepath.Join(acctest.RealNodeState(), "run/containerd/io.containerd.runtime.v2.task/k8s.io", id, "init.pid"))
	if err != nil {
		return "", fmt.Errorf("host PID of container %s: %w", id, err)
	}
	m, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pid)), "uid_map"))
	return strings.TrimSpace(string(m)), err
}

// watchFirstEvent reports when an event of the namespace with this reason and a message
// containing msg is first seen (polled every 0.2 s, for at most 5 minutes).
func (a *realNodeAcc) watchFirstEvent(reason, msg string) <-chan time.Time {
	return a.watchFirstEventSince(reason, msg, time.Time{})
}

// watchFirstEventSince is watchFirstEvent for events last seen at or after since (to
// the second, as events are stamped): not those an earlier step left in the namespace.
func (a *realNodeAcc) watchFirstEventSince(reason, msg string, since time.Time) <-chan time.Time {
	since = since.Truncate(time.Second)
	seen := make(chan time.Time, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		for ctx.Err() == nil {
			list, err := a.C.CS.CoreV1().Events(a.Ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
			if err == nil {
				for _, e := range list.Items {
					last := e.LastTimestamp.Time
					if last.IsZero() {
						last = e.EventTime.Time
					}
					if strings.Contains(e.Message, msg) && !last.Before(since) {
						seen <- time.Now()
						return
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return seen
}

// subordinateRange is the first ID and the count of user's line in /etc/subuid.
func subordinateRange(path, user string) (int64, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		var first, n int64
		if rest, ok := strings.CutPrefix(line, user+":"); ok {
			if _, err := fmt.Sscanf(strings.ReplaceAll(rest, ":", " "), "%d %d", &first, &n); err == nil {
				return first, n, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("%s has no line for %s (node-up.sh writes it)", path, user)
}

// bootFacts are what a booted node pod shows from inside and from the host.
type bootFacts struct {
	podUID, state, machineID, variant, probe string
}

// checkBooted: the pod is ready, its PID 1 is systemd and says "running", it became
// ready only after systemd finished booting, it runs in a user namespace whose root is
// an unprivileged host uid, and its machine ID is the state's container_uuid.
func (a *realNodeAcc) checkBooted(s *terraform.State, want string) (bootFacts, error) {
	f, err := a.checkPod(want)
	if err != nil {
		return f, err
	}
	if want := k8s.MachineID(acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "container_uuid")); f.machineID != want {
		return f, fmt.Errorf("/etc/machine-id is %q, want the state's container_uuid as %q", f.machineID, want)
	}
	return f, nil
}

// checkPod is checkBooted without the state: the one ready pod of web01, booted.
func (a *realNodeAcc) checkPod(want string) (bootFacts, error) {
	a.T.Helper()
	var f bootFacts
	pod, err := a.ReadyPod()
	if err != nil {
		return f, err
	}
	f.podUID = string(pod.UID)
	finished, ready, err := a.SystemdBooted(pod)
	if err != nil {
		return f, err
	}
	f.state = "running"
	m, err := a.hostUIDMap(pod)
	if err != nil {
		return f, err
	}
	var inside, host, size int64
	if _, err := fmt.Sscanf(m, "%d %d %d", &inside, &host, &size); err != nil || inside != 0 || host == 0 || size > 1<<20 {
		return f, fmt.Errorf("uid_map of the pod's PID 1 on the host is %q: want root mapped to an unprivileged host range", m)
	}
	if first, n, err := subordinateRange("/etc/subuid", "kubelet"); err != nil || host < first || host+size > first+n {
		return f, fmt.Errorf("uid_map of the pod's PID 1 on the host is %q: want a range inside the kubelet's subordinate IDs (%d+%d, err %v), away from the host's other users", m, first, n, err)
	}
	if f.machineID, err = a.Exec(pod, "cat", "/etc/machine-id"); err != nil {
		return f, err
	}
	// want "" is an image with no variant file (one built from a toplevel).
	if want != "" {
		if f.variant, err = a.Exec(pod, "cat", "/etc/fediversity-variant"); err != nil || f.variant != want {
			return f, fmt.Errorf("the pod runs image variant %q (err %v), want %q", f.variant, err, want)
		}
	}
	f.probe, _ = a.Exec(pod, "cat", "/var/lib/fediversity-probe")
	a.T.Logf("pod %s (image %s) on %s: PID 1 systemd says %q; boot finished %s, Ready %s; uid_map on the host %q; machine ID %s; /var/lib/fediversity-probe %q",
		pod.Name, f.variant, pod.Spec.NodeName, f.state, finished.UTC().Format(time.TimeOnly), ready.UTC().Format(time.TimeOnly), m, f.machineID, f.probe)
	return f, nil
}

// TestAccK8sRolloutRealNode_bootKeepStateRollBack: systemd boots as PID 1 in the
// provider's pod on a real kubelet; /var/lib and the machine ID survive a changed image
// and a rollback after a unit fails at boot.
func TestAccK8sRolloutRealNode_bootKeepStateRollBack(t *testing.T) {
	a := newRealNodeAcc(t)
	dir := t.TempDir()
	base := nodeBaseLayer(t)
	v1Archive := nodeImage(t, dir, base, "v1", nil)
	v2Archive := nodeImage(t, dir, base, "v2", nil)
	failing := nodeImage(t, dir, base, "fails", map[string]string{
		"etc/systemd/system/fediversity-fails.service":                         "[Unit]\nDescription=A unit that fails at boot\n[Service]\nType=oneshot\nExecStart=/bin/false\n[Install]\nWantedBy=multi-user.target\n",
		"etc/systemd/system/multi-user.target.wants/fediversity-fails.service": "->/etc/systemd/system/fediversity-fails.service",
	})
	token := fmt.Sprintf("written-%d", time.Now().UnixNano())
	var first, second bootFacts
	var failStart time.Time
	var unrecoverable <-chan time.Time
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: a.config(v1Archive, "v1", "3m"),
				Check:  a.checkBootedAndWrite("v1", token, &first),
			},
			{
				// A changed image replaces the pod: the new one has the old /var/lib and machine ID.
				Config: a.config(v2Archive, "v2", "3m"),
				Check: func(s *terraform.State) error {
					var err error
					if second, err = a.checkBooted(s, "v2"); err != nil {
						return err
					}
					if second.podUID == first.podUID {
						return fmt.Errorf("pod %s was not replaced by the changed image", first.podUID)
					}
					if second.probe != token || second.machineID != first.machineID {
						return fmt.Errorf("after the replacement /var/lib/fediversity-probe is %q (want %q) and the machine ID %s (want %s)", second.probe, token, second.machineID, first.machineID)
					}
					return nil
				},
			},
			{
				// A unit that fails at boot: systemd says "degraded", the pod never becomes
				// ready, the wait stops well before rollout_wait, and the rollout is set back
				// with the reason.
				PreConfig: func() {
					failStart = time.Now()
					unrecoverable = a.watchFirstEvent("Unhealthy", "degraded")
				},
				Config:      a.config(failing, "fails", "3m"),
				ExpectError: regexp.MustCompile(`(?s)stopped\s+after.*SystemDegraded.*failed\s+unit.*Readiness\s+probe\s+failed:\s+degraded.*set\s+back\s+to\s+the\s+previous\s+image`),
			},
			{
				// After the rollback a new pod of v2 runs, with the same /var/lib and machine ID.
				PreConfig: func() {
					failed := time.Now()
					select {
					case seen := <-unrecoverable:
						t.Logf("figure: on the real node, from the first readiness failure \"degraded\" (a unit failed at boot) to the failed apply, rollback included: %s (whole apply %s, rollout_wait 3m)",
							failed.Sub(seen).Round(100*time.Millisecond), failed.Sub(failStart).Round(100*time.Millisecond))
					default:
						t.Fatalf("no readiness failure \"degraded\" was seen during the failed apply")
					}
					after, err := a.checkPod("v2")
					if err != nil {
						t.Fatalf("after the rollback: %v", err)
					}
					if after.podUID == second.podUID {
						t.Fatalf("pod %s was not replaced by the failed rollout and its rollback", second.podUID)
					}
					if after.probe != token || after.machineID != first.machineID {
						t.Fatalf("after the rollback /var/lib/fediversity-probe is %q (want %q) and the machine ID %s (want %s)", after.probe, token, after.machineID, first.machineID)
					}
				},
				// The state tells the truth: the cluster runs v2, not the failing image.
				Config:             a.config(failing, "fails", "3m"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
		},
	})
}

// TestAccK8sRolloutRealNode_neverReadyTimesOut: the time-out path on the real kubelet.
// The new image's boot never ends (a unit wanted at boot whose start never finishes), so
// systemd keeps answering "starting" and the pod runs but never becomes ready. The wait
// ends at rollout_wait, the error says what systemd last answered and what to look at,
// the rollout is set back to the previous image, a pod of that image runs again, and the
// state keeps saying the cluster does not run the new image.
func TestAccK8sRolloutRealNode_neverReadyTimesOut(t *testing.T) {
	a := newRealNodeAcc(t)
	dir := t.TempDir()
	base := nodeBaseLayer(t)
	v1Archive := nodeImage(t, dir, base, "v1", nil)
	stuck := nodeImage(t, dir, base, "stuck", map[string]string{
		"etc/systemd/system/fediversity-stuck.service":                         "[Unit]\nDescription=A unit whose start never finishes\n[Service]\nType=oneshot\nExecStart=/bin/sleep infinity\nTimeoutStartSec=infinity\n[Install]\nWantedBy=multi-user.target\n",
		"etc/systemd/system/multi-user.target.wants/fediversity-stuck.service": "->/etc/systemd/system/fediversity-stuck.service",
	})
	var first bootFacts
	var start time.Time
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: a.config(v1Archive, "v1", "3m"),
				Check: func(s *terraform.State) error {
					var err error
					first, err = a.checkBooted(s, "v1")
					return err
				},
			},
			{
				PreConfig:   func() { start = time.Now() },
				Config:      a.config(stuck, "stuck", "60s"),
				ExpectError: regexp.MustCompile(`(?s)did\s+not\s+become\s+ready\s+within.*systemd\s+still\s+says\s+"starting".*systemctl\s+list-jobs.*rollout_wait.*set\s+back\s+to\s+the\s+previous\s+image`),
			},
			{
				PreConfig: func() {
					t.Logf("figure: on the real node, a rollout that never becomes ready failed %s after the apply began (rollout_wait 60s, rollback included)", time.Since(start).Round(100*time.Millisecond))
					after, err := a.checkPod("v1")
					if err != nil {
						t.Fatalf("after the time-out's rollback: %v", err)
					}
					if after.podUID == first.podUID || after.machineID != first.machineID {
						t.Fatalf("after the rollback pod %s (first %s), machine ID %s (want %s): want a new pod of v1 with the same machine ID", after.podUID, first.podUID, after.machineID, first.machineID)
					}
				},
				// The state tells the truth: the cluster runs v1, not the stuck image.
				Config:             a.config(stuck, "stuck", "60s"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
		},
	})
}

// checkBootedAndWrite checks that the rollout of variant booted (its facts into *first)
// and writes token to /var/lib/fediversity-probe in its pod, synced, for the next pod
// to find: /var/lib is the node's state across replacements.
func (a *realNodeAcc) checkBootedAndWrite(variant, token string, first *bootFacts) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		var err error
		if *first, err = a.checkBooted(s, variant); err != nil {
			return err
		}
		pod, err := a.ReadyPod()
		if err != nil {
			return err
		}
		_, err = a.Exec(pod, "sh", "-c", "echo "+token+" > /var/lib/fediversity-probe && sync")
		return err
	}
}
