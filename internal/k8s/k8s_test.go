package k8s

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

const testImage = "127.0.0.1:5000/fediversity/web01@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func testSpec() NodeSpec {
	return NodeSpec{Namespace: "fediversity", Node: "web01", Image: testImage, RuntimeClass: "fediversity",
		StorageSize: "1Gi", ContainerUUID: "6f1c2b7e-0d4a-4c55-9a3e-1b2c3d4e5f60", ProgressDeadline: time.Minute}
}

func TestBuildDeployment(t *testing.T) {
	d := BuildDeployment(testSpec())
	p := d.Spec.Template.Spec
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("replicas %d strategy %s: want 1 and Recreate, so two pods never share the claim", *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	if p.RuntimeClassName == nil || *p.RuntimeClassName != "fediversity" {
		t.Errorf("runtimeClassName = %v", p.RuntimeClassName)
	}
	if p.HostUsers == nil || *p.HostUsers {
		t.Error("hostUsers must be false: the pod gets its own user namespace")
	}
	if p.ServiceAccountName != "node-web01" {
		t.Errorf("service account %q", p.ServiceAccountName)
	}
	c := p.Containers[0]
	if c.Image != testImage {
		t.Errorf("image %q, want the digest reference", c.Image)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["container_uuid"] != testSpec().ContainerUUID || env["container"] == "" {
		t.Errorf("env %v: systemd needs container and container_uuid", env)
	}
	var claim string
	for _, v := range p.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	var varLib bool
	for _, m := range c.VolumeMounts {
		varLib = varLib || (m.MountPath == "/var/lib" && m.Name == "state")
	}
	if claim != "web01-state" || !varLib {
		t.Errorf("claim %q mounted on /var/lib: %v", claim, varLib)
	}
	if c.ReadinessProbe == nil || strings.Join(c.ReadinessProbe.Exec.Command, " ") != "systemctl is-system-running" {
		t.Errorf("readiness probe %+v", c.ReadinessProbe)
	}
	if *d.Spec.ProgressDeadlineSeconds != 60 {
		t.Errorf("progressDeadlineSeconds %d", *d.Spec.ProgressDeadlineSeconds)
	}
}

func TestValidateWantsDigest(t *testing.T) {
	s := testSpec()
	s.Image = "127.0.0.1:5000/fediversity/web01:latest"
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("err = %v", err)
	}
}

func TestUUIDAndMachineID(t *testing.T) {
	a, _ := NewUUID()
	b, _ := NewUUID()
	if a == b || len(a) != 36 || a[14] != '4' {
		t.Fatalf("uuids %s %s", a, b)
	}
	if m := MachineID(a); len(m) != 32 || strings.Contains(m, "-") {
		t.Fatalf("machine id %s", m)
	}
}

func TestNamespaceName(t *testing.T) {
	for _, c := range []struct{ base, app, want string }{{"", "", "fediversity"}, {"", "mastodon", "fediversity-mastodon"}, {"acme", "", "acme"}, {"acme", "pixelfed", "acme-pixelfed"}} {
		if got := NamespaceName(c.base, c.app); got != c.want {
			t.Errorf("NamespaceName(%q,%q) = %q, want %q", c.base, c.app, got, c.want)
		}
	}
}

// The fail-fast classification is tested with client-go's fake clientset, and only it:
// a real kubelet cannot be told to show ErrImagePull for exactly some seconds, or a
// ReplicaFailure, on demand, and the pull grace needs a controllable clock. The lab's
// kwok stages show the same states end to end in the acceptance tests, and its real node
// shows a real pull failure and a real unbound claim
// (internal/provider/k8s/resource_k8s_rollout_realnode_failures_test.go).

func pod(name string, mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "fediversity", UID: types.UID("uid-" + name), Labels: map[string]string{NodeLabel: "web01"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: ContainerName, Image: testImage}}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	mutate(p)
	return p
}

func waiting(reason string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "msg of " + reason}}}}
	}
}

// exited: the node's container has ended with code, after restarts restarts.
func exited(code int32, restarts int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, RestartCount: restarts,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error"}}}}
	}
}

func deploymentNotDone(conds ...appsv1.DeploymentCondition) *appsv1.Deployment {
	d := BuildDeployment(testSpec())
	d.Generation = 2
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, Conditions: conds}
	return d
}

func TestClassifyFailFast(t *testing.T) {
	unsched := func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims."}}
	}
	cases := []struct {
		name       string
		objs       []*corev1.Pod
		deployment *appsv1.Deployment
		// at: the two instants check runs (seconds after start); grace is 20s.
		at         []int
		wantReason string // "" means keep waiting
		wantDetail string
	}{
		{"pending without status keeps waiting", []*corev1.Pod{pod("a", func(*corev1.Pod) {})}, nil, []int{0, 100}, "", ""},
		{"ContainerCreating keeps waiting", []*corev1.Pod{pod("a", waiting("ContainerCreating"))}, nil, []int{0, 100}, "", ""},
		{"ImagePullBackOff within grace keeps waiting", []*corev1.Pod{pod("a", waiting("ImagePullBackOff"))}, nil, []int{0, 19}, "", ""},
		{"ImagePullBackOff past grace fails", []*corev1.Pod{pod("a", waiting("ImagePullBackOff"))}, nil, []int{0, 21}, ReasonImagePull, "msg of ImagePullBackOff"},
		{"ErrImagePull past grace fails", []*corev1.Pod{pod("a", waiting("ErrImagePull"))}, nil, []int{0, 21}, ReasonImagePull, "ErrImagePull"},
		{"CrashLoopBackOff fails at once", []*corev1.Pod{pod("a", waiting("CrashLoopBackOff"))}, nil, []int{0}, ReasonCrashLoop, "CrashLoopBackOff"},
		// The real kubelet shows the waiting reason only at the sync after the one that
		// chose to back off: until then the container is "terminated", with its restarts.
		{"ended again after a restart fails at once, before the kubelet says CrashLoopBackOff", []*corev1.Pod{pod("a", exited(3, 1))}, nil, []int{0}, ReasonCrashLoop, "exited with code 3 (Error) and the kubelet restarted it 1 time;"},
		{"ended once keeps waiting (the kubelet restarts it at once)", []*corev1.Pod{pod("a", exited(3, 0))}, nil, []int{0, 100}, "", ""},
		{"running again after a restart keeps waiting", []*corev1.Pod{pod("a", func(p *corev1.Pod) {
			exited(3, 1)(p)
			cs := &p.Status.ContainerStatuses[0]
			cs.LastTerminationState, cs.State = cs.State, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		})}, nil, []int{0, 100}, "", ""},
		{"CreateContainerConfigError fails at once", []*corev1.Pod{pod("a", waiting("CreateContainerConfigError"))}, nil, []int{0}, ReasonContainerConfig, ""},
		{"Unschedulable within grace keeps waiting (the scheduler retries)", []*corev1.Pod{pod("a", unsched)}, nil, []int{0, 19}, "", ""},
		{"Unschedulable past grace fails", []*corev1.Pod{pod("a", unsched)}, nil, []int{0, 21}, ReasonUnschedulable, "unbound immediate PersistentVolumeClaims"},
		{"Failed pod fails", []*corev1.Pod{pod("a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })}, nil, []int{0}, ReasonPodFailed, ""},
		{"old image's crash is not ours", []*corev1.Pod{pod("a", func(p *corev1.Pod) { waiting("CrashLoopBackOff")(p); p.Spec.Containers[0].Image = "other@sha256:00" })}, nil, []int{0, 100}, "", ""},
		{"terminating pod is not ours", []*corev1.Pod{pod("a", func(p *corev1.Pod) {
			waiting("CrashLoopBackOff")(p)
			now := metav1.Now()
			p.DeletionTimestamp = &now
			p.Finalizers = []string{"x"}
		})}, nil, []int{0, 100}, "", ""},
		{"progress deadline fails", nil, deploymentNotDone(appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: "ReplicaSet \"web01-1\" has timed out progressing."}), []int{0}, ReasonProgressDeadline, "timed out progressing"},
		{"ReplicaFailure within grace keeps waiting", nil, deploymentNotDone(appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: `pods "web01-x" is forbidden: pod rejected: RuntimeClass "fediversity" not found`}), []int{0, 5}, "", ""},
		{"ReplicaFailure past grace fails", nil, deploymentNotDone(appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: `pods "web01-x" is forbidden: pod rejected: RuntimeClass "fediversity" not found`}), []int{0, 21}, ReasonReplicaFailure, "RuntimeClass"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := c.deployment
			if d == nil {
				d = deploymentNotDone()
			}
			cs := fake.NewClientset(d)
			for _, p := range c.objs {
				if _, err := cs.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := cs.CoreV1().Events("fediversity").Create(context.Background(), &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: "ev1", Namespace: "fediversity"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "a", Namespace: "fediversity"},
				Type:           corev1.EventTypeWarning, Reason: "Failed", Message: "event for pod a",
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			w := &watcher{c: &Client{CS: cs}, s: testSpec(), ours: writtenBy(d), o: WaitOptions{Limit: time.Hour, PullGrace: 20 * time.Second}.withDefaults(), firstSeen: map[string]time.Time{}}
			t0 := time.Unix(1_000_000, 0)
			var rerr *RolloutError
			for _, s := range c.at {
				done, stop, err := w.check(context.Background(), t0.Add(time.Duration(s)*time.Second))
				if err != nil || done {
					t.Fatalf("done=%v err=%v", done, err)
				}
				if stop != nil {
					rerr = stop.(*RolloutError)
					break
				}
			}
			if c.wantReason == "" {
				if rerr != nil {
					t.Fatalf("stopped with %v, want to keep waiting", rerr)
				}
				return
			}
			if rerr == nil {
				t.Fatalf("kept waiting, want %s", c.wantReason)
			}
			if rerr.Reason != c.wantReason {
				t.Errorf("reason %s, want %s", rerr.Reason, c.wantReason)
			}
			msg := rerr.Error()
			if !strings.Contains(msg, c.wantDetail) || !strings.Contains(msg, "web01") {
				t.Errorf("error lacks %q or the node:\n%s", c.wantDetail, msg)
			}
			if len(c.objs) > 0 && c.objs[0].Spec.Containers[0].Image == testImage && !strings.Contains(msg, "event for pod a") {
				t.Errorf("error lacks the pod's events:\n%s", msg)
			}
		})
	}
}

// TestClaimNotBoundAfterTheScheduler: a claim whose provisioning failed stops the wait at
// once, but only after the scheduler has judged the pod, so that the error carries the
// scheduler's verdict beside the volume controller's. A fake clientset, for the moment
// between the controller's event and the scheduler's, which a real cluster passes in
// milliseconds; the lab's real node shows both end to end.
func TestClaimNotBoundAfterTheScheduler(t *testing.T) {
	ctx := context.Background()
	d := deploymentNotDone()
	cs := fake.NewClientset(d)
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: ClaimName("web01"), Namespace: "fediversity"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	if _, err := cs.CoreV1().PersistentVolumeClaims("fediversity").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Events("fediversity").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "ev1", Namespace: "fediversity"},
		InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Name: claim.Name, Namespace: "fediversity"},
		Type:           corev1.EventTypeWarning, Reason: "ProvisioningFailed", Message: "no volume plugin matched name: kubernetes.io/no-provisioner",
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := pod("a", func(*corev1.Pod) {})
	if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := &watcher{c: &Client{CS: cs}, s: testSpec(), ours: writtenBy(d), o: WaitOptions{Limit: time.Hour, PullGrace: 20 * time.Second}.withDefaults(), firstSeen: map[string]time.Time{}}
	t0 := time.Unix(1_000_000, 0)
	if done, stop, err := w.check(ctx, t0); done || stop != nil || err != nil {
		t.Fatalf("before the scheduler judged the pod: done=%v stop=%v err=%v, want to keep waiting", done, stop, err)
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims."}}
	if _, err := cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, stop, err := w.check(ctx, t0.Add(time.Second))
	rerr, ok := stop.(*RolloutError)
	if err != nil || !ok || rerr.Reason != ReasonClaimNotBound || !rerr.Early {
		t.Fatalf("after the scheduler's verdict: stop=%v err=%v, want an early %s", stop, err, ReasonClaimNotBound)
	}
	for _, want := range []string{"no volume plugin matched", "pod has unbound immediate PersistentVolumeClaims"} {
		if !strings.Contains(rerr.Error(), want) {
			t.Errorf("error lacks %q:\n%s", want, rerr)
		}
	}
}

// TestDegradedSystemFails: a running pod whose readiness probe (systemctl
// is-system-running) answers "degraded" stops the wait after the grace; one that answers
// "starting" does not. A fake clientset, because the kubelet's probe events need a clock
// the test controls; the lab's real node shows the same end to end.
func TestDegradedSystemFails(t *testing.T) {
	for _, c := range []struct {
		probe      string
		at         []int
		wantReason string
	}{
		{"degraded", []int{0, 9}, ""},
		{"degraded", []int{0, 11}, ReasonSystemDegraded},
		{"starting", []int{0, 100}, ""},
	} {
		t.Run(fmt.Sprint(c.probe, c.at), func(t *testing.T) {
			d := deploymentNotDone()
			cs := fake.NewClientset(d)
			p := pod("a", func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodRunning
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"}}
			})
			ctx := context.Background()
			if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.CoreV1().Events("fediversity").Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: "ev1", Namespace: "fediversity"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "a", Namespace: "fediversity"},
				Type:           corev1.EventTypeWarning, Reason: "Unhealthy", Message: "Readiness probe failed: " + c.probe + "\n",
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			w := &watcher{c: &Client{CS: cs}, s: testSpec(), ours: writtenBy(d), o: WaitOptions{Limit: time.Hour, PullGrace: 20 * time.Second}.withDefaults(), firstSeen: map[string]time.Time{}}
			t0 := time.Unix(1_000_000, 0)
			var rerr *RolloutError
			for _, s := range c.at {
				done, stop, err := w.check(ctx, t0.Add(time.Duration(s)*time.Second))
				if err != nil || done {
					t.Fatalf("done=%v err=%v", done, err)
				}
				if stop != nil {
					rerr = stop.(*RolloutError)
					break
				}
			}
			switch {
			case c.wantReason == "" && rerr != nil:
				t.Fatalf("stopped with %v, want to keep waiting", rerr)
			case c.wantReason != "" && (rerr == nil || rerr.Reason != c.wantReason):
				t.Fatalf("got %v, want %s", rerr, c.wantReason)
			case rerr != nil && (!strings.Contains(rerr.Error(), "systemctl --failed") || !strings.Contains(rerr.Error(), "Readiness probe failed: degraded")):
				t.Errorf("error lacks the reason or the probe's event:\n%s", rerr.Error())
			}
		})
	}
}

// TestTimeoutSaysWhatSystemdSaid: a pod that runs but never becomes ready ends the wait
// at its limit, and the error names what systemd last answered to the readiness probe.
// A fake clientset, for a wait of a fraction of a second (a real cluster cannot be made
// to time out that fast); TestAccK8sRolloutRealNode_neverReadyTimesOut shows it on the
// real node at a real limit.
func TestTimeoutSaysWhatSystemdSaid(t *testing.T) {
	d := deploymentNotDone()
	cs := fake.NewClientset(d)
	ctx := context.Background()
	p := pod("a", func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"}}
	})
	if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Events("fediversity").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "ev1", Namespace: "fediversity"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "a", Namespace: "fediversity"},
		Type:           corev1.EventTypeWarning, Reason: "Unhealthy", Message: "(combined from similar events): Readiness probe failed: starting\n",
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := &Client{CS: cs, Poll: 20 * time.Millisecond}
	err := c.Wait(ctx, testSpec(), writtenBy(d), WaitOptions{Limit: 300 * time.Millisecond})
	var rerr *RolloutError
	if !errors.As(err, &rerr) || rerr.Reason != ReasonTimeout || rerr.Early {
		t.Fatalf("err = %v, want a RolloutError with reason %s at the limit", err, ReasonTimeout)
	}
	for _, want := range []string{"did not become ready within", `pod a runs but is not ready: systemd still says "starting"`, "systemctl list-jobs", "rollout_wait"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%s", want, err)
		}
	}
}

func TestCheckDoneWhenRolloutComplete(t *testing.T) {
	d := BuildDeployment(testSpec())
	d.Generation = 3
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	w := &watcher{c: &Client{CS: fake.NewClientset(d)}, s: testSpec(), ours: writtenBy(d), firstSeen: map[string]time.Time{}}
	done, rerr, err := w.check(context.Background(), time.Now())
	if !done || rerr != nil || err != nil {
		t.Fatalf("done=%v rerr=%v err=%v", done, rerr, err)
	}
}

func TestRolloutErrorTellsRollback(t *testing.T) {
	e := &RolloutError{Namespace: "ns", Node: "n1", Image: "i@sha256:1", Reason: ReasonCrashLoop, Early: true, RolledBack: true, RolledBackTo: "i@sha256:0", RollbackReady: true}
	if !strings.Contains(e.Error(), "set back to the previous image i@sha256:0") {
		t.Error(e.Error())
	}
	e = &RolloutError{Node: "n1", Reason: ReasonTimeout}
	if !strings.Contains(e.Error(), "no previous image") {
		t.Error(e.Error())
	}
	// A wait of unknown length, or one that stopped at its first read, never says it
	// waited "0s" (issue 39, item 9).
	for _, w := range []time.Duration{0, 300 * time.Millisecond} {
		for _, early := range []bool{false, true} {
			e := &RolloutError{Node: "n1", Reason: ReasonCrashLoop, Waited: w, Early: early}
			if msg := e.Error(); strings.Contains(msg, " 0s") || (w > 0 && !strings.Contains(msg, "300ms")) {
				t.Errorf("waited %s, early %v: %s", w, early, msg)
			}
		}
	}
	if !errors.As(error(e), new(*RolloutError)) {
		t.Error("not a RolloutError")
	}
}

// An API that fails during the wait is not a failed pod: the reads are retried, a
// rollout seen complete once the API answers again is done, and a limit that runs out
// while the API fails says the readiness is unknown. Fake clientset: an engine unit
// test; the lab test TestLabAPIOutageDuringWait shows it through a cut connection.
func TestWaitRetriesAPIErrors(t *testing.T) {
	d := BuildDeployment(testSpec())
	d.Generation = 3
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	cs := fake.NewClientset(d)
	var calls atomic.Int64
	failFirst := int64(5)
	cs.PrependReactor("get", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
		if calls.Add(1) <= failFirst {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	c := &Client{CS: cs, Poll: 20 * time.Millisecond}
	if err := c.Wait(context.Background(), testSpec(), writtenBy(d), WaitOptions{Limit: 10 * time.Second}); err != nil {
		t.Fatalf("the API came back and the rollout is complete, but Wait says %v", err)
	}
	calls.Store(0)
	failFirst = 1 << 40
	err := c.Wait(context.Background(), testSpec(), writtenBy(d), WaitOptions{Limit: 300 * time.Millisecond})
	var unknown *ReadinessUnknownError
	if !errors.As(err, &unknown) || errors.As(err, new(*RolloutError)) {
		t.Fatalf("err = %v, want a ReadinessUnknownError and no RolloutError", err)
	}
	if !strings.Contains(err.Error(), "nothing was rolled back") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("message: %v", err)
	}
	// The caller giving up (Ctrl-C, timeouts, a killed CLI) is not an API failure: the
	// wait ends as a timeout, which the rollout answers with a rollback.
	parent, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = c.Wait(parent, testSpec(), writtenBy(d), WaitOptions{Limit: time.Minute})
	if !errors.As(err, new(*RolloutError)) {
		t.Fatalf("err = %v after the caller gave up, want a RolloutError", err)
	}
}

// A read that the wait's own limit cuts short, after reads that answered, is the limit,
// not an API outage: the wait ends as a timeout (which the rollout answers with a
// rollback), never as "readiness unknown" (no rollback). A CI run on the real node met
// it: a never-ready pod was left without its rollback. Fake clientset: a real API cannot
// be made to be in the middle of a read exactly when the limit runs out.
func TestWaitLimitCuttingAReadIsTheLimit(t *testing.T) {
	d := deploymentNotDone()
	cs := fake.NewClientset(d)
	const limit, poll = 500 * time.Millisecond, 200 * time.Millisecond
	// The cut read is chosen by its number, not by the clock: the reads are a poll
	// interval apart, so the third begins at least two polls (400 ms) after the wait
	// did, less than a poll before its limit. (Chosen by the time the reactor ran, a
	// loaded machine once cut a read that had begun more than a poll before the limit:
	// a read that hung, which the wait rightly counts as the API not answering.)
	var reads atomic.Int32
	var start time.Time
	cs.PrependReactor("get", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
		if reads.Add(1) >= 3 {
			// The read the limit cuts: it answers after the limit, as client-go does
			// when its context ends (with a margin for a wait that began late).
			time.Sleep(time.Until(start.Add(limit + 2*poll)))
			return true, nil, context.DeadlineExceeded
		}
		return false, nil, nil
	})
	c := &Client{CS: cs, Poll: poll}
	start = time.Now()
	err := c.Wait(context.Background(), testSpec(), writtenBy(d), WaitOptions{Limit: limit})
	var rerr *RolloutError
	if !errors.As(err, &rerr) || rerr.Reason != ReasonTimeout {
		t.Fatalf("err = %v, want a RolloutError with reason %s (a timeout, which rolls back)", err, ReasonTimeout)
	}
}

// The same when client-go's rate limiter refuses a read it could not start before the
// limit ("rate: Wait(n=1) would exceed context deadline", returned at once, while the
// context is still live): a timeout, not "readiness unknown". A loaded CI run on the real
// node met it. Fake clientset: the limiter's refusal cannot be timed on a real API.
func TestWaitLimiterRefusalAtTheLimitIsTheLimit(t *testing.T) {
	d := deploymentNotDone()
	cs := fake.NewClientset(d)
	start := time.Now()
	const limit, poll = 500 * time.Millisecond, 200 * time.Millisecond
	cs.PrependReactor("get", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
		if time.Since(start) > limit-poll/2 {
			return true, nil, errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
		}
		return false, nil, nil
	})
	c := &Client{CS: cs, Poll: poll}
	err := c.Wait(context.Background(), testSpec(), writtenBy(d), WaitOptions{Limit: limit})
	var rerr *RolloutError
	if !errors.As(err, &rerr) || rerr.Reason != ReasonTimeout {
		t.Fatalf("err = %v, want a RolloutError with reason %s (a timeout, which rolls back)", err, ReasonTimeout)
	}
}

func TestRollbackTarget(t *testing.T) {
	tpl := func(img string) *corev1.PodTemplateSpec {
		s := testSpec()
		s.Image = img
		return BuildDeployment(s).Spec.Template.DeepCopy()
	}
	good, bad, older := tpl("r/good@sha256:1"), tpl("r/bad@sha256:2"), tpl("r/older@sha256:3")
	cases := []struct {
		name string
		a    Applied
		want string
	}{
		{"the record wins over the template before the apply", Applied{Previous: older, Changed: true, LastGood: good, Current: bad}, "r/good@sha256:1"},
		{"unchanged template (after a crash): the record", Applied{Previous: bad, Changed: false, LastGood: good, Current: bad}, "r/good@sha256:1"},
		{"the failing template is the record: nothing", Applied{Previous: good, LastGood: good, Current: good}, ""},
		{"no record: the template before the apply", Applied{Previous: older, Changed: true, Current: bad}, "r/older@sha256:3"},
		{"no record, unchanged: nothing", Applied{Previous: bad, Current: bad}, ""},
		{"first deploy: nothing", Applied{Changed: true}, ""},
	}
	for _, c := range cases {
		got, _ := rollbackTarget(c.a)
		img := ""
		if got != nil {
			img = containerImage(got.Spec)
		}
		if img != c.want {
			t.Errorf("%s: target %q, want %q", c.name, img, c.want)
		}
	}
}
