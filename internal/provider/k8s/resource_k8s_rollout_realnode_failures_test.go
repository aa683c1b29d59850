package k8s_test

// The k8s method's failures on the lab's real node (lab/k8s/node-up.sh), where no kwok
// stage decides a pod's fate: the kubelet really fails to pull an image, the scheduler
// really refuses a pod whose claim has no volume, and systemd really reports a failed
// unit through the readiness probe. Each apply fails early (well before rollout_wait),
// names why from the kubelet's or the scheduler's own words, and leaves a state that
// agrees with the cluster, so the next plan says what is unfinished.

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// failConfig is realNodeAcc.config with the rollout's image_ref given (a Terraform
// expression) and the pull grace short, as a test that expects a failure wants it.
func (a *realNodeAcc) failConfig(archive, tag, imageRef string) string {
	cfg := a.config(archive, tag, "3m")
	cfg = strings.Replace(cfg, "image_ref     = fediversity_image.node.image_ref", "image_ref     = "+imageRef, 1)
	return strings.Replace(cfg, `rollout_wait = "3m"`, `rollout_wait = "3m"
    pull_grace   = "5s"`, 1)
}

// provisioned is a real-node config whose claim gets its volume from the lab's
// provisioner (a new one for each new claim) instead of the test's static volume.
func provisioned(cfg string) string {
	return strings.Replace(cfg, fmt.Sprintf("storage_class = %q", acctest.RealNodeStorageClass),
		fmt.Sprintf("storage_class = %q", acctest.RealNodeProvisionedStorageClass), 1)
}

// onlyPod is the one pod of web01 that is not going away, ready or not.
func (a *realNodeAcc) onlyPod() (*corev1.Pod, error) {
	out, err := a.LivePodsOf("web01")
	if err != nil {
		return nil, err
	}
	if len(out) != 1 {
		return nil, fmt.Errorf("want one pod of web01, found %d", len(out))
	}
	return &out[0], nil
}

// TestAccK8sRolloutRealNode_unpullableImageRollsBack: the rollout names an image the
// registry does not hold. The real kubelet fails to pull it (ErrImagePull, then
// ImagePullBackOff); the apply stops after the pull grace with the kubelet's own message,
// sets the Deployment back to the booted image, and the state says the cluster runs that
// one, so the next plan shows the change still to make.
func TestAccK8sRolloutRealNode_unpullableImageRollsBack(t *testing.T) {
	a := newRealNodeAcc(t)
	v1Archive := nodeImage(t, t.TempDir(), nodeBaseLayer(t), "v1", nil)
	// The same repository as the pushed image, by a digest nothing was ever pushed as.
	missing := fmt.Sprintf("%s/%s/web01@sha256:%s", a.Reg.Host, a.Ns, strings.Repeat("0", 64))
	var first bootFacts
	var goodRef string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: a.failConfig(v1Archive, "v1", "fediversity_image.node.image_ref"),
				Check: func(s *terraform.State) error {
					goodRef = acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "image_ref")
					var err error
					first, err = a.checkBooted(s, "v1")
					return err
				},
			},
			{
				Config: a.failConfig(v1Archive, "v1", fmt.Sprintf("%q", missing)),
				// The kubelet's words: its container state and its "Failed" event.
				ExpectError: regexp.MustCompile(`(?s)stopped\s+after.*:\s+ImagePullBackOff\..*waiting: (ErrImagePull|ImagePullBackOff):.*` +
					`event Warning Failed: Failed to pull image "` + regexp.QuoteMeta(missing) + `".*not\s+found.*set\s+back\s+to\s+the\s+previous\s+image`),
			},
			{
				PreConfig: func() {
					img, _, err := a.DeploymentImage()
					if err != nil || img != goodRef {
						t.Fatalf("after the rollback the Deployment names %s (err %v), want %s", img, err, goodRef)
					}
					after, err := a.checkPod("v1")
					if err != nil {
						t.Fatalf("after the rollback: %v", err)
					}
					if after.machineID != first.machineID {
						t.Fatalf("after the rollback the machine ID is %s, want %s", after.machineID, first.machineID)
					}
				},
				// The state tells the truth: the cluster runs v1, not the missing image.
				Config:             a.failConfig(v1Archive, "v1", fmt.Sprintf("%q", missing)),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
		},
	})
}

// TestAccK8sRolloutRealNode_firstDeployNeverReady: a first deploy whose image boots with
// a failed unit, on a volume from the lab's provisioner. systemd says "degraded", so the
// kubelet's readiness probe fails with that answer and the pod never becomes ready; the
// apply stops after the degraded grace with the kubelet's event, and says there was
// nothing to set back. The Deployment keeps naming the image (there is no other), and
// the next plan shows the rollout still to finish: the node is tainted, so the next apply
// replaces it, with a new claim and volume, and a good image then boots.
func TestAccK8sRolloutRealNode_firstDeployNeverReady(t *testing.T) {
	acctest.RequireRealNode(t)
	a := &realNodeAcc{k8sAcc: newK8sAcc(t)} // the claim's volume comes from the provisioner
	dir := t.TempDir()
	base := nodeBaseLayer(t)
	failing := nodeImage(t, dir, base, "fails", map[string]string{
		"etc/systemd/system/fediversity-fails.service":                         "[Unit]\nDescription=A unit that fails at boot\n[Service]\nType=oneshot\nExecStart=/bin/false\n[Install]\nWantedBy=multi-user.target\n",
		"etc/systemd/system/multi-user.target.wants/fediversity-fails.service": "->/etc/systemd/system/fediversity-fails.service",
	})
	v1Archive := nodeImage(t, dir, base, "v1", nil)
	imageRef := "fediversity_image.node.image_ref"
	var failedVolume string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: provisioned(a.failConfig(failing, "fails", imageRef)),
				ExpectError: regexp.MustCompile(`(?s)stopped\s+after.*:\s+SystemDegraded\..*event Warning Unhealthy: Readiness\s+probe\s+failed:\s+degraded` +
					`.*no\s+previous\s+image\s+to\s+set\s+back\s+\(first\s+deploy\)`),
			},
			{
				PreConfig: func() {
					img, _, err := a.DeploymentImage()
					if err != nil || !strings.Contains(img, "/"+a.Ns+"/web01@sha256:") {
						t.Fatalf("after the failed first deploy the Deployment names %s (err %v), want the failing image", img, err)
					}
					pod, err := a.onlyPod()
					if err != nil {
						t.Fatalf("after the failed first deploy: %v", err)
					}
					if pod.Spec.NodeName != acctest.RealNodeName || !containerRunning(pod) || podIsReady(pod) {
						t.Fatalf("after the failed first deploy pod %s is on %q, running %v, ready %v: want running on the real node, not ready",
							pod.Name, pod.Spec.NodeName, containerRunning(pod), podIsReady(pod))
					}
					if state, err := a.Exec(pod, "systemctl", "is-system-running"); strings.TrimSpace(state) != "degraded" {
						t.Fatalf("after the failed first deploy systemd in the pod says %q (err %v), want degraded", state, err)
					}
					var err2 error
					if failedVolume, err2 = a.provisionedVolume(); err2 != nil {
						t.Fatalf("after the failed first deploy: %v", err2)
					}
				},
				// The state tells the truth: the rollout did not finish.
				Config:             provisioned(a.failConfig(failing, "fails", imageRef)),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{
				// The failed first deploy was tainted: the next apply replaces the node,
				// with a new claim and a new volume from the provisioner, and it boots.
				Config: provisioned(a.failConfig(v1Archive, "v1", imageRef)),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("fediversity_k8s_rollout.web01", plancheck.ResourceActionReplace),
				}},
				Check: func(s *terraform.State) error {
					if _, err := a.checkBooted(s, "v1"); err != nil {
						return err
					}
					v, err := a.provisionedVolume()
					if err == nil && v == failedVolume {
						err = fmt.Errorf("the replaced node's claim is bound to the failed deploy's volume %s, want a new one", v)
					}
					return err
				},
			},
		},
	})
}

// provisionedVolume is the volume bound to web01's claim, which must be one that
// kube-controller-manager's hostPath provisioner made for it.
func (a *realNodeAcc) provisionedVolume() (string, error) {
	ctx := context.Background()
	pvc, err := a.C.CS.CoreV1().PersistentVolumeClaims(a.Ns).Get(ctx, k8s.ClaimName("web01"), metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pvc.Status.Phase != corev1.ClaimBound {
		return "", fmt.Errorf("claim %s is %s, want Bound", pvc.Name, pvc.Status.Phase)
	}
	pv, err := a.C.CS.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if by := pv.Annotations["pv.kubernetes.io/provisioned-by"]; by != "kubernetes.io/host-path" {
		return "", fmt.Errorf("volume %s of claim %s was provisioned by %q, want kubernetes.io/host-path", pv.Name, pvc.Name, by)
	}
	return pv.Name, nil
}

func containerRunning(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == k8s.ContainerName && cs.State.Running != nil {
			return true
		}
	}
	return false
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestAccK8sRolloutRealNode_unboundClaimFirstDeploy: a first deploy whose claim has no
// volume to bind (the StorageClass has no provisioner and no static volume was made for
// it). The volume controller says it cannot provision the claim, and the scheduler
// refuses the pod ("pod has unbound immediate PersistentVolumeClaims"); the apply stops
// as soon as both have spoken, naming both, and there is nothing to set back. The pod is
// placed nowhere, the claim stays Pending, and the next plan says the rollout did not
// finish. (That such a node boots once its claim gets a volume, through the replacement
// the next apply makes, is TestAccK8sRolloutRealNode_firstDeployNeverReady's last step.)
func TestAccK8sRolloutRealNode_unboundClaimFirstDeploy(t *testing.T) {
	acctest.RequireRealNode(t)
	a := &realNodeAcc{k8sAcc: newK8sAcc(t)} // no volume for the claim web01-state
	v1Archive := nodeImage(t, t.TempDir(), nodeBaseLayer(t), "v1", nil)
	cfg := a.failConfig(v1Archive, "v1", "fediversity_image.node.image_ref")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				// The volume controller's event, and the scheduler's verdict and event.
				ExpectError: regexp.MustCompile(`(?s)stopped\s+after.*:\s+ClaimNotBound\..*claim web01-state is Pending and will not bind: no volume plugin matched` +
					`.*condition PodScheduled=False \(Unschedulable\):[^\n]*pod has unbound immediate PersistentVolumeClaims` +
					`.*event Warning FailedScheduling:[^\n]*pod has unbound immediate PersistentVolumeClaims` +
					`.*no\s+previous\s+image\s+to\s+set\s+back\s+\(first\s+deploy\)`),
			},
			{
				PreConfig: func() {
					pod, err := a.onlyPod()
					if err != nil {
						t.Fatalf("after the failed first deploy: %v", err)
					}
					if pod.Spec.NodeName != "" {
						t.Fatalf("pod %s was placed on %s although its claim has no volume", pod.Name, pod.Spec.NodeName)
					}
					pvc, err := a.C.CS.CoreV1().PersistentVolumeClaims(a.Ns).Get(context.Background(), k8s.ClaimName("web01"), metav1.GetOptions{})
					if err != nil || pvc.Status.Phase != corev1.ClaimPending {
						t.Fatalf("claim web01-state after the failed first deploy: %v (err %v), want Pending", pvc.Status.Phase, err)
					}
				},
				// The state tells the truth: the rollout did not finish.
				Config:             cfg,
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
		},
	})
}
