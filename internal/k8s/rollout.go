package k8s

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// WaitOptions bound a rollout wait.
type WaitOptions struct {
	// Limit is the operator's time limit of the wait (default 5m).
	Limit time.Duration
	// PullGrace is how long ErrImagePull/ImagePullBackOff (and a ReplicaSet that cannot
	// create its pod) is tolerated before the wait stops early (default 20s): a registry
	// can be briefly unavailable, a missing image stays missing.
	PullGrace time.Duration
	// DegradedGrace is how long the pod's readiness probe may answer "degraded" before
	// the wait stops (default 10s). systemctl is-system-running says "starting" until
	// the boot's jobs are done and "degraded" only after, when a unit has failed: that
	// unit stays failed (one that restarts is not failed meanwhile). Two probe periods
	// rule out a reading in flight.
	DegradedGrace time.Duration
	// RollbackWait bounds the wait for the previous image after a rollback (default 2m,
	// and never more than Limit).
	RollbackWait time.Duration
}

// The defaults of WaitOptions: the timing table's (deploybody.TimingTable holds every
// engine's timings once).
const (
	DefaultRolloutWait   = deploybody.DefaultRolloutWait
	DefaultPullGrace     = deploybody.DefaultPullGrace
	DefaultDegradedGrace = deploybody.DefaultDegradedGrace
	DefaultRollbackWait  = deploybody.DefaultRollbackWait
)

func (o WaitOptions) withDefaults() WaitOptions {
	if o.Limit <= 0 {
		o.Limit = DefaultRolloutWait
	}
	if o.PullGrace <= 0 {
		o.PullGrace = DefaultPullGrace
	}
	if o.DegradedGrace <= 0 {
		o.DegradedGrace = DefaultDegradedGrace
	}
	if o.RollbackWait <= 0 {
		o.RollbackWait = DefaultRollbackWait
	}
	return o
}

// Reasons a wait stops without a ready pod.
const (
	ReasonImagePull        = "ImagePullBackOff"
	ReasonCrashLoop        = "CrashLoopBackOff"
	ReasonContainerConfig  = "ContainerCannotStart"
	ReasonUnschedulable    = "Unschedulable"
	ReasonClaimNotBound    = "ClaimNotBound"
	ReasonReplicaFailure   = "ReplicaFailure"
	ReasonPodFailed        = "PodFailed"
	ReasonSystemDegraded   = "SystemDegraded"
	ReasonProgressDeadline = "ProgressDeadlineExceeded"
	ReasonTimeout          = "Timeout"
)

// RolloutError says why a node's pod did not become ready, and what the engine did.
type RolloutError struct {
	Namespace, Node, Image string
	// Reason is one of the Reason* constants.
	Reason string
	// Details are pod-level facts: waiting reasons, false conditions, claim phase, events.
	Details []string
	// Early is true when the wait stopped before its limit on a state that does not recover.
	Early bool
	// Waited is how long the wait ran; Detected is when the unrecoverable state was first
	// seen (zero for a timeout).
	Waited   time.Duration
	Detected time.Time
	// Rollback: whether the previous template was put back, to which image, and whether
	// its pod is ready again.
	RolledBack    bool
	RolledBackTo  string
	RollbackReady bool
	RollbackErr   error
	// RollbackTarget is the image a rollback was tried to (set also when it failed).
	RollbackTarget string
	// NoRollback says why nothing was set back, when nothing was.
	NoRollback string
	// OtherWriter is set when another writer changed the Deployment after this run wrote
	// it: then nothing was set back over that change (or, after a rollback, that writer
	// changed it again during the rollback's wait).
	OtherWriter *OtherWriterError
}

// Unwrap gives the other writer's change, so errors.As finds it.
func (e *RolloutError) Unwrap() error {
	if e.OtherWriter == nil {
		return nil
	}
	return e.OtherWriter
}

// waitedFor is a wait's length for a message: whole seconds, tenths of a second under
// one (a wait that stopped at its first read must not read "0s"), "" when unknown.
func waitedFor(d time.Duration) string {
	switch {
	case d <= 0:
		return ""
	case d < time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func (e *RolloutError) Error() string {
	var b strings.Builder
	how := "did not become ready"
	if w := waitedFor(e.Waited); w != "" {
		how += " within " + w
	}
	if e.Early {
		how = "stopped on a state that does not recover"
		if w := waitedFor(e.Waited); w != "" {
			how = "stopped after " + w + " on a state that does not recover"
		}
	}
	fmt.Fprintf(&b, "node %s: the rollout of %s in namespace %s %s: %s.", e.Node, e.Image, e.Namespace, how, e.Reason)
	for _, d := range e.Details {
		b.WriteString("\n  - " + d)
	}
	switch {
	case e.OtherWriter != nil && e.RolledBack:
		fmt.Fprintf(&b, "\nThe Deployment was set back to the previous image %s, but then %s. It is left as that writer left it.", e.RolledBackTo, e.OtherWriter.what())
	case e.OtherWriter != nil:
		fmt.Fprintf(&b, "\nNothing was set back, for %s; a rollback would overwrite that change. It is left as that writer left it: find out who else changes it. "+
			"The next plan shows the difference to the configured image, and the next apply rolls out %s again, over that change.", e.OtherWriter.what(), e.Image)
	case e.RollbackErr != nil:
		fmt.Fprintf(&b, "\nThe rollback to the last good image %s FAILED: %v. The Deployment still names %s. "+
			"The last good template stays recorded on the Deployment (annotation %s): the next apply waits for the rollout again and, if it still fails, sets the Deployment back to it.",
			e.RollbackTarget, e.RollbackErr, e.Image, LastGoodAnnotation)
	case e.RolledBack && e.RollbackReady:
		fmt.Fprintf(&b, "\nThe Deployment was set back to the previous image %s, whose pod is ready again. Fix the configuration and apply again: the next apply retries the rollout.", e.RolledBackTo)
	case e.RolledBack:
		fmt.Fprintf(&b, "\nThe Deployment was set back to the previous image %s, but its pod is not ready yet either. Check the cluster, then apply again.", e.RolledBackTo)
	case e.NoRollback != "":
		fmt.Fprintf(&b, "\nNothing was set back: %s. Fix the cause and apply again.", e.NoRollback)
	default:
		b.WriteString("\nThere is no previous image to set back (first deploy). Fix the cause and apply again.")
	}
	return b.String()
}

// Wait waits until the Deployment of s, holding what this run wrote (ours), runs s.Image
// with a ready pod. It returns a *RolloutError when the rollout does not complete in time
// or stops early, and an *OtherWriterError as soon as another writer changed the
// Deployment's spec: that writer's rollout is not this run's to judge or to undo.
func (c *Client) Wait(ctx context.Context, s NodeSpec, ours Written, o WaitOptions) error {
	o = o.withDefaults()
	start := time.Now()
	parent := ctx
	ctx, cancel := context.WithTimeout(parent, o.Limit)
	defer cancel()
	w := &watcher{c: c, s: s, ours: ours, o: o, firstSeen: map[string]time.Time{}}
	for {
		readStart := time.Now()
		done, stop, err := w.check(ctx, readStart)
		switch {
		case err != nil && parent.Err() != nil:
			// The caller gave up (Ctrl-C, timeouts, a killed CLI): not an API failure.
		case err != nil && ctx.Err() != nil && w.lastAPIErr == nil && startedWithinAPollOfTheLimit(ctx, readStart, c.poll()):
			// The limit ran out in the middle of a read that began less than a poll
			// interval before it, after reads that answered: the limit cut it, the API did
			// not fail it. The wait ends as a timeout on the state the last reads saw (a
			// CI run on the real node took this for an outage, and left a never-ready pod
			// without its rollback). Judged by when the read began, not by how long it
			// took to come back: on a loaded machine the cut read returns late.
		case err != nil && w.lastAPIErr == nil && limiterRefusedPastDeadline(err):
			// client-go's rate limiter refused to wait for a read it could not start
			// before the limit ("rate: Wait(n=1) would exceed context deadline"): the
			// limit cut it, the API was not asked. As above, a timeout on the state the
			// last reads saw (a loaded CI run took this for an outage too).
		case err != nil:
			// A failed API read says nothing about the pod: it is retried, every poll
			// interval, within the limit (the apiserver can blink, or be restarted). A
			// read that hung until the limit counts too: the API did not answer.
			w.apiErrors++
			w.lastAPIErr, w.failingSince = err, cmpOr(w.failingSince, time.Now())
		default:
			w.lastAPIErr, w.failingSince = nil, time.Time{}
		}
		if done {
			return nil
		}
		if rerr, ok := stop.(*RolloutError); ok {
			rerr.Waited = time.Since(start)
		}
		if stop != nil {
			return stop
		}
		if err := sleep(ctx, c.poll()); err != nil {
			if w.lastAPIErr != nil && parent.Err() == nil {
				// The limit ran out while the readiness could not be read: that is not
				// a failed pod, and no rollback may follow from it.
				return &ReadinessUnknownError{Namespace: s.Namespace, Node: s.Node, Image: s.Image,
					Waited: time.Since(start), Failing: time.Since(w.failingSince), Failures: w.apiErrors, LastErr: w.lastAPIErr}
			}
			// The limit: describe the last state seen, with a fresh context.
			dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer dcancel()
			reason := ReasonTimeout
			if w.progressDeadline {
				reason = ReasonProgressDeadline
			}
			e := &RolloutError{Namespace: s.Namespace, Node: s.Node, Image: s.Image, Reason: reason, Waited: time.Since(start)}
			e.Details = append(w.notReadyReasons(dctx), w.describe(dctx)...)
			if w.apiErrors > 0 {
				e.Details = append(e.Details, fmt.Sprintf("%d API reads failed during the wait and were retried; the last reads succeeded", w.apiErrors))
			}
			return e
		}
	}
}

func cmpOr(t, def time.Time) time.Time {
	if t.IsZero() {
		return def
	}
	return t
}

// WriteAnswerLostError: the answer to the Deployment's write was lost, and reading the
// Deployment back showed (Running set) or could not show (Running empty) what it names.
// Nothing was waited for and nothing was rolled back.
type WriteAnswerLostError struct {
	Namespace, Node, Image string
	Running                string // what the Deployment names, read back; "" when unknown
	Missing                bool   // read back: there is no Deployment (a create that did not take effect)
	WriteErr, ReadErr      error
}

func (e *WriteAnswerLostError) Error() string {
	if e.Missing {
		return fmt.Sprintf("node %s: the answer to the creation of Deployment %s/%s was lost (%v), and the creation did not take effect: there is no Deployment. "+
			"Nothing was rolled back. Check that the cluster is reachable from this machine, then apply again.", e.Node, e.Namespace, e.Node, e.WriteErr)
	}
	if e.Running == "" {
		return fmt.Sprintf("node %s: the answer to the write of Deployment %s/%s was lost (%v), and it could not be read back (%v): "+
			"it may name %s or what it named before. Nothing was waited for and nothing was rolled back; the next plan reads it. "+
			"Check that the cluster is reachable from this machine, then apply again.", e.Node, e.Namespace, e.Node, e.WriteErr, e.ReadErr, e.Image)
	}
	if e.Running == e.Image {
		return fmt.Sprintf("node %s: the answer to the write of Deployment %s/%s was lost (%v), but the write took effect: the Deployment names %s. "+
			"So the readiness of %s could not be read, and nothing was rolled back. "+
			"Check that the cluster is reachable from this machine, then apply again: the next apply waits for the rollout again.", e.Node, e.Namespace, e.Node, e.WriteErr, e.Image, e.Image)
	}
	return fmt.Sprintf("node %s: the answer to the write of Deployment %s/%s was lost (%v), and the write did not take effect: the Deployment names %s. "+
		"Nothing was rolled back. Check that the cluster is reachable from this machine, then apply again.", e.Node, e.Namespace, e.Node, e.WriteErr, e.Running)
}

// writeAnswerLost reads the Deployment back after a write whose answer was lost, retrying
// until ctx ends (the API may be away for a while), and says what it names.
func (c *Client) writeAnswerLost(ctx context.Context, s NodeSpec, writeErr error) (Outcome, error) {
	e := &WriteAnswerLostError{Namespace: s.Namespace, Node: s.Node, Image: s.Image, WriteErr: writeErr}
	for {
		d, err := c.CS.AppsV1().Deployments(s.Namespace).Get(ctx, s.Node, metav1.GetOptions{})
		if err == nil {
			e.Running = containerImage(d.Spec.Template.Spec)
			return Outcome{Running: e.Running}, e
		}
		if apierrors.IsNotFound(err) {
			e.Missing = true
			return Outcome{}, e
		}
		e.ReadErr = err
		if sleep(ctx, time.Second) != nil {
			return Outcome{}, e
		}
	}
}

// startedWithinAPollOfTheLimit: the read that began at readStart began less than a poll
// interval before ctx's deadline, so a read that answered in the usual time could not
// have ended before it.
func startedWithinAPollOfTheLimit(ctx context.Context, readStart time.Time, poll time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return ok && deadline.Sub(readStart) < poll
}

// limiterRefusedPastDeadline: the error is golang.org/x/time/rate's refusal to wait
// past the context's deadline, which client-go's rate limiter returns before it sends
// anything. The rate package has no sentinel for it, only its text.
func limiterRefusedPastDeadline(err error) bool {
	return strings.Contains(err.Error(), "would exceed context deadline")
}

// isAPIStatus tells an answer of the apiserver (a refusal, a conflict) from an answer
// that never came.
func isAPIStatus(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}

// ReadinessUnknownError: the wait's limit ran out while the cluster's API did not
// answer, so whether the pod became ready is not known. Nothing was rolled back.
type ReadinessUnknownError struct {
	Namespace, Node, Image string
	Waited                 time.Duration
	Failing                time.Duration // how long the API had been failing at the end
	Failures               int           // API reads that failed during the wait
	LastErr                error
}

func (e *ReadinessUnknownError) Error() string {
	return fmt.Sprintf("node %s: the readiness of %s in namespace %s could not be read: the cluster's API had not answered for the last %s of the %s wait "+
		"(%d failed reads, retried; the last: %v). This says nothing about the pod, so nothing was rolled back: the Deployment names %s. "+
		"Check that the cluster is reachable from this machine, then apply again: the next apply waits for the rollout again.",
		e.Node, e.Image, e.Namespace, e.Failing.Round(time.Second), e.Waited.Round(time.Second), e.Failures, e.LastErr, e.Image)
}

type watcher struct {
	c                *Client
	s                NodeSpec
	ours             Written // what this run wrote to the Deployment
	o                WaitOptions
	firstSeen        map[string]time.Time // key: pod UID + reason, or "replicafailure"
	progressDeadline bool
	lastAPIErr       error     // the error of the last check, nil when it read the cluster
	failingSince     time.Time // first failed check of the current run of failures
	apiErrors        int
}

// check looks once. done: the rollout is complete. stop: it stopped on a state that
// does not recover (a *RolloutError), or another writer changed the Deployment (an
// *OtherWriterError). err: the API could not be read.
func (w *watcher) check(ctx context.Context, now time.Time) (done bool, stop error, err error) {
	d, err := w.c.CS.AppsV1().Deployments(w.s.Namespace).Get(ctx, w.s.Node, metav1.GetOptions{})
	if err != nil {
		return false, nil, err
	}
	if !w.ours.heldBy(d) {
		return false, changedByOther(d, w.ours), nil
	}
	if rolloutComplete(d) {
		return true, nil, nil
	}
	if d.Status.ObservedGeneration >= d.Generation {
		for _, cond := range d.Status.Conditions {
			if cond.Type == appsv1.DeploymentProgressing && cond.Status == corev1.ConditionFalse && cond.Reason == "ProgressDeadlineExceeded" {
				w.progressDeadline = true
				return false, w.fail(ctx, now, ReasonProgressDeadline, "Deployment: "+cond.Message), nil
			}
			if cond.Type == appsv1.DeploymentReplicaFailure && cond.Status == corev1.ConditionTrue {
				if w.since("replicafailure", now) >= w.o.PullGrace {
					return false, w.fail(ctx, w.firstSeen["replicafailure"], ReasonReplicaFailure, "Deployment: "+cond.Reason+": "+cond.Message), nil
				}
			}
		}
	}
	pods, err := w.pods(ctx)
	if err != nil {
		return false, nil, err
	}
	for i := range pods {
		kind, reason := ClassifyPod(&pods[i])
		switch kind {
		case Fatal:
			extra := ""
			if reason == ReasonCrashLoop {
				extra = w.crashLoopDetail(ctx, &pods[i])
			}
			return false, w.fail(ctx, now, reason, extra), nil
		case Pull, Unschedulable:
			key := string(pods[i].UID) + "/" + reason
			if w.since(key, now) >= w.o.PullGrace {
				return false, w.fail(ctx, w.firstSeen[key], reason, ""), nil
			}
		}
	}
	// systemd booted and a unit failed: the pod will not become ready.
	for i := range pods {
		if podReady(&pods[i]) || !containerRunning(&pods[i]) || !w.saysDegraded(ctx, pods[i].Name) {
			continue
		}
		key := string(pods[i].UID) + "/degraded"
		if w.since(key, now) >= w.o.DegradedGrace {
			return false, w.fail(ctx, w.firstSeen[key], ReasonSystemDegraded,
				fmt.Sprintf("pod %s: systemd booted with a failed unit (systemctl is-system-running says \"degraded\"; `systemctl --failed` in the pod names it)", pods[i].Name)), nil
		}
	}
	// A claim whose provisioning failed will not bind: the pod cannot start on a real
	// cluster, whatever its status says now. It is judged once the scheduler has judged
	// the pod (PodScheduled is set either way), so that the error names the scheduler's
	// verdict too ("pod has unbound immediate PersistentVolumeClaims"): the controller's
	// event comes first, often before the pod exists.
	if len(pods) > 0 && !podReady(&pods[0]) && schedulerJudged(&pods[0]) {
		if msg := w.claimFailure(ctx); msg != "" {
			return false, w.fail(ctx, now, ReasonClaimNotBound, msg), nil
		}
	}
	return false, nil, nil
}

func (w *watcher) since(key string, now time.Time) time.Duration {
	if _, ok := w.firstSeen[key]; !ok {
		w.firstSeen[key] = now
	}
	return now.Sub(w.firstSeen[key])
}

func (w *watcher) fail(ctx context.Context, detected time.Time, reason, extra string) *RolloutError {
	e := &RolloutError{Namespace: w.s.Namespace, Node: w.s.Node, Image: w.s.Image, Reason: reason, Early: reason != ReasonTimeout && reason != ReasonProgressDeadline, Detected: detected}
	if extra != "" {
		e.Details = append(e.Details, extra)
	}
	e.Details = append(e.Details, w.describe(ctx)...)
	return e
}

// pods are the node's pods that run the wanted image and are not going away.
func (w *watcher) pods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := w.c.CS.CoreV1().Pods(w.s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: NodeLabel + "=" + w.s.Node})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && containerImage(p.Spec) == w.s.Image {
			out = append(out, p)
		}
	}
	return out, nil
}

func containerRunning(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == ContainerName && cs.State.Running != nil {
			return true
		}
	}
	return false
}

// saysDegraded: the pod's latest readiness probe failure answered "degraded".
func (w *watcher) saysDegraded(ctx context.Context, pod string) bool {
	return w.lastProbeAnswer(ctx, pod) == "degraded"
}

// lastProbeAnswer is what the pod's latest failed readiness probe (systemctl
// is-system-running) printed, from the kubelet's events; "" when none is seen.
func (w *watcher) lastProbeAnswer(ctx context.Context, pod string) string {
	var last string
	for _, ev := range w.events(ctx, "Pod", pod) {
		// An aggregated event is prefixed "(combined from similar events): ".
		_, msg, ok := strings.Cut(ev.Message, "Readiness probe failed:")
		if ok && ev.Reason == "Unhealthy" {
			last = strings.TrimSpace(msg)
		}
	}
	return last
}

// notReadyReasons says, for each pod of the wanted image that runs but is not ready at
// the end of the wait, what systemd last answered to the readiness probe and where to
// look: that is the reason a time-out has, since no pod-level state names one.
func (w *watcher) notReadyReasons(ctx context.Context) []string {
	pods, err := w.pods(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for i := range pods {
		p := &pods[i]
		if podReady(p) || !containerRunning(p) {
			continue
		}
		switch said := w.lastProbeAnswer(ctx, p.Name); said {
		case "":
			out = append(out, fmt.Sprintf("pod %s runs but is not ready; no failed readiness probe (systemctl is-system-running) was reported for it", p.Name))
		case "starting", "initializing":
			out = append(out, fmt.Sprintf("pod %s runs but is not ready: systemd still says %q, so its boot has not finished (a start job is still running; `systemctl list-jobs` in the pod names it). "+
				"If the boot is only slow, raise timings.rollout_wait", p.Name, said))
		default:
			out = append(out, fmt.Sprintf("pod %s runs but is not ready: systemctl is-system-running last said %q", p.Name, said))
		}
	}
	return out
}

func (w *watcher) claimFailure(ctx context.Context) string {
	pvc, err := w.c.CS.CoreV1().PersistentVolumeClaims(w.s.Namespace).Get(ctx, ClaimName(w.s.Node), metav1.GetOptions{})
	if err != nil || pvc.Status.Phase == corev1.ClaimBound {
		return ""
	}
	for _, ev := range w.events(ctx, "PersistentVolumeClaim", pvc.Name) {
		if ev.Type == corev1.EventTypeWarning && ev.Reason == "ProvisioningFailed" {
			return fmt.Sprintf("claim %s is %s and will not bind: %s", pvc.Name, pvc.Status.Phase, ev.Message)
		}
	}
	return ""
}

// Kind is how a pod state bears on the wait.
type Kind int

// Pod state kinds.
const (
	Progressing Kind = iota // nothing wrong seen (yet)
	Pull                    // an image pull error: stop after the grace period
	Fatal                   // does not recover: stop now
	// Unschedulable: stop after the grace period too. The scheduler can call a pod
	// unschedulable for a moment, e.g. "persistentvolumeclaim ... not found" when its
	// cache has not seen the claim made just before; it tries again by itself.
	Unschedulable
)

// ClassifyPod says whether a pod's state will recover on its own. It only reads the pod.
func ClassifyPod(p *corev1.Pod) (Kind, string) {
	if p.Status.Phase == corev1.PodFailed {
		return Fatal, ReasonPodFailed
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			return Unschedulable, ReasonUnschedulable
		}
	}
	if crashLooping(p) {
		return Fatal, ReasonCrashLoop
	}
	pull := false
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if cs.State.Waiting == nil {
			continue
		}
		switch cs.State.Waiting.Reason {
		case "CrashLoopBackOff":
			return Fatal, ReasonCrashLoop
		case "CreateContainerConfigError", "CreateContainerError", "InvalidImageName", "RunContainerError", "ErrImageNeverPull":
			return Fatal, ReasonContainerConfig
		case "ErrImagePull", "ImagePullBackOff":
			pull = true
		}
	}
	if pull {
		return Pull, ReasonImagePull
	}
	return Progressing, ""
}

// crashLooping: the node's container has ended again after the kubelet restarted it, so
// the kubelet now backs off before each restart (CrashLoopBackOff), whatever the status
// says yet. The kubelet writes the waiting reason CrashLoopBackOff into the status only
// at the pod's next sync after the one that chose to back off; until then it shows the
// container as terminated, "since it will be restarted soon" (convertToAPIContainerStatuses
// in pkg/kubelet/kubelet_pods.go). That next sync can come after a short back-off has
// already ended: on the lab's real kubelet a node whose PID 1 exits at once showed only
// "terminated" and "running" through its 10 s and 20 s back-offs, and the wait saw
// CrashLoopBackOff first in the 40 s one, more than a minute and a half in. The first
// end alone is not judged: the kubelet restarts the container at once then, without a
// back-off, as it does for a system that halts to reboot.
func crashLooping(p *corev1.Pod) bool {
	if p.Spec.RestartPolicy != "" && p.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == ContainerName && cs.State.Terminated != nil && cs.RestartCount > 0 {
			return true
		}
	}
	return false
}

// crashLoopDetail says, from the kubelet's own state, how the node's container ends: its
// exit code, how often it was restarted, the kubelet's back-off, and where its last output is.
func (w *watcher) crashLoopDetail(ctx context.Context, p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != ContainerName {
			continue
		}
		exit := cs.State.Terminated
		if exit == nil {
			exit = cs.LastTerminationState.Terminated
		}
		if exit == nil {
			return ""
		}
		times := "times"
		if cs.RestartCount == 1 {
			times = "time"
		}
		msg := fmt.Sprintf("pod %s: the container's PID 1 (the image's init) exited with code %d (%s) and the kubelet restarted it %d %s; "+
			"it now waits longer before each restart (CrashLoopBackOff), so the system never starts. Its last output: `kubectl -n %s logs --previous %s`",
			p.Name, exit.ExitCode, exit.Reason, cs.RestartCount, times, p.Namespace, p.Name)
		// The kubelet's own word for it, which the five latest events shown below can miss:
		// each restart adds newer ones.
		var backOff *corev1.Event
		for _, ev := range w.allEvents(ctx, "Pod", p.Name) {
			if ev.Reason == "BackOff" && strings.Contains(ev.Message, "restarting failed container") {
				backOff = &ev
			}
		}
		if backOff != nil {
			msg += fmt.Sprintf("; the kubelet: %s (seen %d so far)", backOff.Message, max(backOff.Count, 1))
		}
		return msg
	}
	return ""
}

// schedulerJudged: the scheduler has placed the pod or said why it cannot.
func schedulerJudged(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return true
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// describe collects the pod-level reasons: per pod its phase, container waiting and
// terminated reasons, false conditions and recent events; then the claim.
func (w *watcher) describe(ctx context.Context) []string {
	var out []string
	list, err := w.c.CS.CoreV1().Pods(w.s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: NodeLabel + "=" + w.s.Node})
	if err != nil {
		out = append(out, "pods: "+err.Error())
	} else {
		if len(list.Items) == 0 {
			out = append(out, "no pod exists for the node")
			if d, err := w.c.CS.AppsV1().Deployments(w.s.Namespace).Get(ctx, w.s.Node, metav1.GetOptions{}); err == nil {
				for _, c := range d.Status.Conditions {
					if c.Status != corev1.ConditionTrue || c.Type == appsv1.DeploymentReplicaFailure {
						out = append(out, fmt.Sprintf("Deployment condition %s=%s (%s): %s", c.Type, c.Status, c.Reason, c.Message))
					}
				}
			}
		}
		for _, p := range list.Items {
			name := "pod " + p.Name
			if containerImage(p.Spec) != w.s.Image {
				continue
			}
			out = append(out, fmt.Sprintf("%s: phase %s", name, p.Status.Phase))
			for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				if wt := cs.State.Waiting; wt != nil {
					out = append(out, fmt.Sprintf("%s: container %s waiting: %s: %s", name, cs.Name, wt.Reason, wt.Message))
				}
				if tm := cs.State.Terminated; tm != nil {
					out = append(out, fmt.Sprintf("%s: container %s exited with code %d (%s) after %d restarts", name, cs.Name, tm.ExitCode, tm.Reason, cs.RestartCount))
				}
				if tm := cs.LastTerminationState.Terminated; tm != nil {
					out = append(out, fmt.Sprintf("%s: container %s last exited with code %d (%s) after %d restarts", name, cs.Name, tm.ExitCode, tm.Reason, cs.RestartCount))
				}
			}
			for _, c := range p.Status.Conditions {
				if c.Status != corev1.ConditionTrue && (c.Reason != "" || c.Message != "") {
					out = append(out, fmt.Sprintf("%s: condition %s=%s (%s): %s", name, c.Type, c.Status, c.Reason, c.Message))
				}
			}
			for _, ev := range w.events(ctx, "Pod", p.Name) {
				out = append(out, fmt.Sprintf("%s: event %s %s: %s", name, ev.Type, ev.Reason, ev.Message))
			}
		}
	}
	if pvc, err := w.c.CS.CoreV1().PersistentVolumeClaims(w.s.Namespace).Get(ctx, ClaimName(w.s.Node), metav1.GetOptions{}); err == nil && pvc.Status.Phase != corev1.ClaimBound {
		out = append(out, fmt.Sprintf("claim %s: %s", pvc.Name, pvc.Status.Phase))
		for _, ev := range w.events(ctx, "PersistentVolumeClaim", pvc.Name) {
			if ev.Type == corev1.EventTypeWarning {
				out = append(out, fmt.Sprintf("claim %s: event %s %s: %s", pvc.Name, ev.Type, ev.Reason, ev.Message))
			}
		}
	} else if err != nil && !apierrors.IsNotFound(err) {
		out = append(out, "claim: "+err.Error())
	}
	return out
}

// events returns the five most recent events of one object.
func (w *watcher) events(ctx context.Context, kind, name string) []corev1.Event {
	evs := w.allEvents(ctx, kind, name)
	if len(evs) > 5 {
		evs = evs[len(evs)-5:]
	}
	return evs
}

// allEvents returns the events of one object, oldest first.
func (w *watcher) allEvents(ctx context.Context, kind, name string) []corev1.Event {
	list, err := w.c.CS.CoreV1().Events(w.s.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return nil
	}
	var evs []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Name == name && e.InvolvedObject.Kind == kind {
			evs = append(evs, e)
		}
	}
	when := func(e corev1.Event) time.Time {
		switch {
		case !e.LastTimestamp.IsZero():
			return e.LastTimestamp.Time
		case !e.EventTime.IsZero():
			return e.EventTime.Time
		}
		return e.CreationTimestamp.Time
	}
	sort.SliceStable(evs, func(i, j int) bool { return when(evs[i]).Before(when(evs[j])) })
	return evs
}

// Outcome is the result of a whole rollout of one node.
type Outcome struct {
	// Running is the image the Deployment names when Rollout returns.
	Running string
	// Ready is whether the pod of Running is ready.
	Ready bool
	// RolledBack is true when the new image failed and the previous template was restored.
	RolledBack bool
	// LastGood is the image of the last good template recorded on the Deployment
	// (LastGoodAnnotation) after the rollout; empty when none is recorded.
	LastGood string
	// Warning is set when the rollout succeeded but its template could not be recorded
	// as the last good one.
	Warning string
}

// Rollout runs the steps of a rollout in order (docs/kubernetes.md#k8s): the claim and the service account, the Deployment
// (no wait), the wait with its limit, and on a failed pod the rollback to the last good
// pod template recorded on the Deployment (LastGoodAnnotation; without one, the template
// the Deployment held before this apply). A ready rollout records its template as the
// last good one. The returned error is a *RolloutError for a failed rollout, and a
// *ReadinessUnknownError when the API did not answer at the end of the wait (no rollback).
// Only what this run wrote is ever set back: when another writer changed the Deployment
// since, the error is (or, for a RolloutError, wraps) an *OtherWriterError, nothing is set
// back, and Outcome.Running names that writer's image.
func (c *Client) Rollout(ctx context.Context, s NodeSpec, o WaitOptions) (Outcome, error) {
	if err := s.Validate(); err != nil {
		return Outcome{}, err
	}
	if err := c.EnsureNodeObjects(ctx, s); err != nil {
		return Outcome{}, err
	}
	// What follows the write must happen even when the caller's context ran out.
	after := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	}
	applied, err := c.ApplyDeployment(ctx, s)
	if err != nil {
		if !isAPIStatus(err) {
			// The apiserver's answer was lost (a cut connection, a time-out): the write
			// may have taken effect. Read the Deployment back before saying what the
			// cluster runs.
			rctx, cancel := after()
			defer cancel()
			return c.writeAnswerLost(rctx, s, err)
		}
		return Outcome{}, err
	}
	lastGoodImage := ""
	if applied.LastGood != nil {
		lastGoodImage = containerImage(applied.LastGood.Spec)
	}
	werr := c.Wait(ctx, s, applied.Written, o)
	var other *OtherWriterError
	if werr == nil {
		rctx, cancel := after()
		defer cancel()
		out := Outcome{Running: s.Image, Ready: true, LastGood: s.Image}
		if err := c.recordGood(rctx, s.Namespace, s.Node, applied.Written); err != nil {
			out.LastGood, out.Warning = lastGoodImage, err.Error()
			if errors.As(err, &other) {
				// Changed right after its pod was seen ready: the cluster runs the other
				// writer's template now.
				out.Running, out.Ready = other.Theirs, false
			}
		}
		return out, nil
	}
	if errors.As(werr, &other) {
		// Not this run's rollout any more: nothing to judge, nothing to set back.
		return Outcome{Running: other.Theirs, LastGood: lastGoodImage}, werr
	}
	var rerr *RolloutError
	if !errors.As(werr, &rerr) {
		return Outcome{Running: s.Image, LastGood: lastGoodImage}, werr
	}
	target, why := rollbackTarget(applied)
	if target == nil {
		rerr.NoRollback = why
		return Outcome{Running: s.Image, LastGood: lastGoodImage}, rerr
	}
	rctx, cancel := after()
	defer cancel()
	rerr.RollbackTarget = containerImage(target.Spec)
	rolledBack, err := c.Rollback(rctx, s.Namespace, s.Node, applied.Written, target)
	switch {
	case errors.As(err, &other):
		// Changed by another writer between the failed wait and the rollback.
		rerr.OtherWriter = other
		return Outcome{Running: other.Theirs, LastGood: lastGoodImage}, rerr
	case err != nil:
		rerr.RollbackErr = err
		return Outcome{Running: s.Image, LastGood: lastGoodImage}, rerr
	}
	rerr.RolledBack, rerr.RolledBackTo = true, rerr.RollbackTarget
	prev := s
	prev.Image = rerr.RolledBackTo
	limit := min(o.withDefaults().Limit, o.withDefaults().RollbackWait)
	rbErr := c.Wait(rctx, prev, rolledBack, WaitOptions{Limit: limit, PullGrace: o.PullGrace, DegradedGrace: o.DegradedGrace})
	if errors.As(rbErr, &other) {
		rerr.OtherWriter = other
		return Outcome{Running: other.Theirs, RolledBack: true, LastGood: lastGoodImage}, rerr
	}
	rerr.RollbackReady = rbErr == nil
	if rerr.RollbackReady && applied.LastGood == nil {
		// The template from before this apply is now seen ready: it is the last good one.
		if err := c.recordGood(rctx, s.Namespace, s.Node, rolledBack); err == nil {
			lastGoodImage = prev.Image
		}
	}
	return Outcome{Running: rerr.RolledBackTo, Ready: rerr.RollbackReady, RolledBack: true, LastGood: lastGoodImage}, rerr
}

// rollbackTarget is the template to set back after a failed pod: the last good one when
// it differs from the one that just failed; without a record, the template from before
// this apply, when the apply changed it.
func rollbackTarget(a Applied) (*corev1.PodTemplateSpec, string) {
	switch {
	case a.LastGood != nil && a.Current != nil && templatesEqual(a.LastGood, a.Current):
		return nil, "the template that failed is the last one seen ready (" + containerImage(a.LastGood.Spec) + ")"
	case a.LastGood != nil:
		return a.LastGood, ""
	case a.Previous != nil && a.Changed:
		return a.Previous, ""
	case a.Previous != nil:
		return nil, "no template was ever seen ready, and the Deployment already had this one"
	}
	return nil, ""
}
