package k8s_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// crashLoopError is what the failed apply of the crash-looping image says: it stopped
// early on CrashLoopBackOff, in the kubelet's own state: init's exit code 3, the
// restarts so far, the back-off, and where the container's last output is.
const crashLoopError = `(?s)stopped\s+after\s+\S+\s+on\s+a\s+state\s+that\s+does\s+not\s+recover:\s+CrashLoopBackOff\.` +
	`.*pod\s+web01-\S+:\s+the\s+container's\s+PID\s+1\s+\(the\s+image's\s+init\)\s+exited\s+with\s+code\s+3\s+\(Error\)\s+and\s+the\s+kubelet\s+restarted\s+it\s+[1-9]\d*\s+times?;` +
	`\s+it\s+now\s+waits\s+longer\s+before\s+each\s+restart\s+\(CrashLoopBackOff\).*logs\s+--previous\s+web01-` +
	`.*container\s+node\s+(last\s+)?exited\s+with\s+code\s+3\s+\(Error\)\s+after\s+[1-9]\d*\s+restarts`

// TestAccK8sRolloutRealNode_crashLoopingInit: a node image whose PID 1 ends, built in the
// graph by fediversity_image from a toplevel whose init exits 3 a second after it starts
// (lab/closures/default.nix, bootable-init-fails). On the real kubelet the container
// ends with its PID 1, the kubelet restarts it, and after the first restarts backs off
// (CrashLoopBackOff). As a first deploy, the apply stops on that well before rollout_wait,
// names the exit code, the restarts and the back-off, and has nothing to set back: the
// Deployment keeps the image, its pod keeps crashing, and the next plan replaces the
// node, which then boots a good toplevel. As an update of that running good node, the
// apply stops the same way and sets the Deployment back to the good image, whose new
// pod is ready again with the node's machine ID; the state says the cluster runs the
// good image, so the next plan shows the change still to make.
func TestAccK8sRolloutRealNode_crashLoopingInit(t *testing.T) {
	acctest.RequireRealNode(t)
	// The claim's volume comes from the provisioner: the failed first deploy is replaced,
	// with a new claim, which a static volume bound to the old one would not serve.
	a := &realNodeAcc{k8sAcc: newK8sAcc(t)}
	good := labtest.BuildClosure(t, labtest.ClosureBootable)
	crashing := labtest.BuildClosure(t, labtest.ClosureBootableInitFails)
	goodCfg, crashCfg := provisioned(a.toplevelConfig(good)), provisioned(a.toplevelConfig(crashing))
	var start time.Time
	var backOff <-chan time.Time
	startFailing := func() {
		start = time.Now()
		backOff = a.watchFirstEventSince("BackOff", "Back-off restarting failed container", start)
	}
	// failedFast logs how long the failed apply took, from its start and from the
	// kubelet's first BackOff event (which the kubelet may send only just after its
	// status showed the second end, where the wait stops), against rollout_wait.
	failedFast := func(what string) {
		ended := time.Now()
		backedOff := "no BackOff event of the kubelet was seen before it failed"
		select {
		case seen := <-backOff:
			backedOff = fmt.Sprintf("%s after the kubelet's first BackOff event", ended.Sub(seen).Round(100*time.Millisecond))
		default:
		}
		t.Logf("figure: on the real node, %s: the apply failed %s after it began, %s (rollout_wait 3m)",
			what, ended.Sub(start).Round(100*time.Millisecond), backedOff)
	}
	var goodRef string
	var booted bootFacts
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig:   startFailing,
				Config:      crashCfg,
				ExpectError: regexp.MustCompile(crashLoopError + `.*no\s+previous\s+image\s+to\s+set\s+back\s+\(first\s+deploy\)`),
			},
			{
				PreConfig: func() {
					failedFast("a first deploy whose init exits")
					img, _, err := a.DeploymentImage()
					if err != nil || !strings.Contains(img, "/"+a.Ns+"/web01@sha256:") {
						t.Fatalf("after the failed first deploy the Deployment names %s (err %v), want the crashing image", img, err)
					}
					if err := a.checkCrashLooping(img); err != nil {
						t.Fatalf("after the failed first deploy: %v", err)
					}
				},
				// The state tells the truth: the rollout did not finish.
				Config:             crashCfg,
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{
				// The failed first deploy was tainted: the next apply replaces the node,
				// and the good toplevel boots.
				Config: goodCfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("fediversity_k8s_rollout.web01", plancheck.ResourceActionReplace),
				}},
				Check: func(s *terraform.State) error {
					goodRef = acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "image_ref")
					var err error
					booted, err = a.checkBooted(s, "")
					return err
				},
			},
			{
				// An update of the running good node to the crashing image: stopped the
				// same way, and set back.
				PreConfig: startFailing,
				Config:    crashCfg,
				// (The image set back to is checked against the state below: the regexp is
				// made before the good image's digest is known.)
				ExpectError: regexp.MustCompile(crashLoopError + `.*set\s+back\s+to\s+the\s+previous\s+image\s+\S+/` + a.Ns + `/web01@sha256:[0-9a-f]{64},\s+whose\s+pod\s+is\s+ready\s+again`),
			},
			{
				PreConfig: func() {
					failedFast("an update whose init exits")
					img, _, err := a.DeploymentImage()
					if err != nil || img != goodRef {
						t.Fatalf("after the rollback the Deployment names %s (err %v), want the good image %s", img, err, goodRef)
					}
					after, err := a.checkPod("")
					if err != nil {
						t.Fatalf("after the rollback: %v", err)
					}
					if after.podUID == booted.podUID || after.machineID != booted.machineID {
						t.Fatalf("after the rollback pod %s (before %s), machine ID %s (want %s): want a new pod of the good image with the node's machine ID",
							after.podUID, booted.podUID, after.machineID, booted.machineID)
					}
					pod, err := a.ReadyPod()
					if err != nil {
						t.Fatal(err)
					}
					if cur, err := a.Exec(pod, "readlink", "/run/current-system"); err != nil || cur != good {
						t.Fatalf("after the rollback /run/current-system is %q (err %v), want the good toplevel %s", cur, err, good)
					}
				},
				// The state tells the truth: the cluster runs the good image.
				Config:             crashCfg,
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
		},
	})
}

// checkCrashLooping: web01's one live pod runs image on the real node, is not ready, and
// the kubelet has restarted its container after it exited with init's code 3, whose
// last words (the console of the run that ended last) are the stand-in init's.
func (a *realNodeAcc) checkCrashLooping(image string) error {
	pod, err := a.onlyPod()
	if err != nil {
		return err
	}
	if pod.Spec.NodeName != acctest.RealNodeName || podIsReady(pod) || len(pod.Status.ContainerStatuses) != 1 {
		return fmt.Errorf("pod %s is on %q, ready %v, with %d container statuses: want one container on the real node, not ready",
			pod.Name, pod.Spec.NodeName, podIsReady(pod), len(pod.Status.ContainerStatuses))
	}
	cs := pod.Status.ContainerStatuses[0]
	if got := pod.Spec.Containers[0].Image; got != image {
		return fmt.Errorf("pod %s runs %s, want %s", pod.Name, got, image)
	}
	last := cs.LastTerminationState.Terminated
	if cs.RestartCount < 1 || last == nil || last.ExitCode != 3 {
		return fmt.Errorf("pod %s: container %s restarted %d times, last termination %+v: want restarts after init's exit code 3", pod.Name, cs.Name, cs.RestartCount, last)
	}
	// The run that ended last: the current container while the status shows it
	// terminated, else the one before (the kubelet keeps one ended container a pod). The
	// kubelet may restart it between the two reads: then the other one.
	var logs []byte
	for _, previous := range []bool{cs.State.Terminated == nil, cs.State.Terminated != nil} {
		logs, err = a.C.CS.CoreV1().Pods(a.Ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: k8s.ContainerName, Previous: previous}).DoRaw(context.Background())
		if err == nil && strings.Contains(string(logs), "fedi-init: stage 2 failed") {
			break
		}
	}
	if err != nil || !strings.Contains(string(logs), "fedi-init: stage 2 failed") {
		return fmt.Errorf("pod %s: the console of the container's last ended run is %q (err %v), want the stand-in init's last words", pod.Name, logs, err)
	}
	a.T.Logf("pod %s: container %s restarted %d times, last exited with code %d (%s); waiting: %v; its console: %q",
		pod.Name, cs.Name, cs.RestartCount, last.ExitCode, last.Reason, cs.State.Waiting, strings.TrimSpace(string(logs)))
	return nil
}
