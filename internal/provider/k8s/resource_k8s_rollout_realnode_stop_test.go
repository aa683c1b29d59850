package k8s_test

// How the old pod of a replacement stops on the real kubelet (lab/k8s/node-up.sh). A
// Recreate rollout deletes the old pod; containerd stops its container with the image's
// stop signal and, when the pod's termination grace runs out, SIGKILL. systemd as PID 1
// shuts down only on SIGRTMIN+3 (SIGTERM makes it re-execute itself), which is why the
// image builder (internal/image) sets that stop signal. These tests show both sides on a
// real kubelet, containerd and runc: the old pod's console and its container's
// terminated state, with and without the stop signal.

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// oldPodStop is what the old pod of a replacement showed while it stopped.
type oldPodStop struct {
	pod        string
	console    string // its console (the container's log) from the apply's start to its exit, escape codes removed
	consoleErr error  // why following the console ended, when not at the container's exit
	terminated corev1.ContainerStateTerminated
	grace      int64     // the termination grace the pod was deleted with, in seconds
	stopAsked  time.Time // when the watch first saw the pod deleted (deletionTimestamp set)
	exitSeen   time.Time // when the watch first saw its container terminated
}

// ansiEscape matches the colour and cursor escape codes systemd writes to a TTY console.
var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// streamingClient is a client for following a pod's console: the provider's client ends
// every request after 30 s, which would cut the stream before a pod killed at the end of
// a 30 s grace exits.
func (a *realNodeAcc) streamingClient() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", a.Kc)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 0
	return kubernetes.NewForConfig(cfg)
}

// followOldPodStop follows the console of web01's ready pod from since on (client-go,
// Follow: the stream ends when the container exits) and watches the pod until the kubelet
// reports its container terminated. It reports once both have ended, within 5 minutes.
func (a *realNodeAcc) followOldPodStop(since time.Time) (<-chan oldPodStop, *corev1.Pod, error) {
	pod, err := a.ReadyPod()
	if err != nil {
		return nil, nil, err
	}
	logs, err := a.streamingClient()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	type consoleEnd struct {
		text string
		err  error
	}
	consoleDone := make(chan consoleEnd, 1)
	go func() {
		from := metav1.NewTime(since) // second precision: the boot ended long before
		stream, err := logs.CoreV1().Pods(a.Ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: k8s.ContainerName, Follow: true, SinceTime: &from}).Stream(ctx)
		if err != nil {
			consoleDone <- consoleEnd{err: err}
			return
		}
		defer stream.Close()
		b, err := io.ReadAll(stream)
		consoleDone <- consoleEnd{string(b), err}
	}()
	res := make(chan oldPodStop, 1)
	go func() {
		defer cancel()
		out := a.watchUntilTerminated(ctx, pod)
		c := <-consoleDone
		out.console = strings.ReplaceAll(ansiEscape.ReplaceAllString(c.text, ""), "\r", "")
		out.consoleErr = c.err
		res <- out
	}()
	return res, pod, nil
}

// watchUntilTerminated watches the pod until its container's state is terminated: the
// kubelet writes that status before it removes the pod, so the last MODIFIED (or the
// DELETED) event holds it. A stop that never came leaves terminated empty (ExitCode -1).
func (a *realNodeAcc) watchUntilTerminated(ctx context.Context, pod *corev1.Pod) oldPodStop {
	out := oldPodStop{pod: pod.Name, terminated: corev1.ContainerStateTerminated{ExitCode: -1}}
	rv := pod.ResourceVersion
	for ctx.Err() == nil {
		w, err := a.C.CS.CoreV1().Pods(a.Ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Name, ResourceVersion: rv})
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok { // a watch error such as "too old resource version": start again from now
				rv = ""
				continue
			}
			rv = p.ResourceVersion
			// Times are taken on this clock when the watch sees each change: the
			// apiserver's timestamps have second precision.
			if p.DeletionTimestamp != nil && p.DeletionGracePeriodSeconds != nil && out.stopAsked.IsZero() {
				out.grace = *p.DeletionGracePeriodSeconds
				out.stopAsked = time.Now()
			}
			if len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Terminated != nil {
				out.exitSeen = time.Now()
				out.terminated = *p.Status.ContainerStatuses[0].State.Terminated
				w.Stop()
				return out
			}
			if ev.Type == watch.Deleted {
				w.Stop()
				return out
			}
		}
	}
	return out
}

// cleanShutdown is what Debian's systemd (252) prints on the pod's console when it shuts
// down as PID 1: every unit stopped, /var/lib unmounted, the shutdown target reached, and
// systemd-shutdown (the program PID 1 becomes at the end) halting.
var cleanShutdown = regexp.MustCompile(`(?s)Unmounted var-lib\.mount.*Reached target shutdown\.target - System Shutdown.*Starting systemd-halt\.service - System Halt.*Halting system\.`)

// anyShutdown matches any of the lines above that only a shutting-down systemd prints.
var anyShutdown = regexp.MustCompile(`(?m)^.*(Unmounted var-lib\.mount|Reached target shutdown\.target|systemd-halt\.service|Sending SIGTERM to remaining processes|Halting system).*$`)

// reexecBanner is the line systemd prints when it starts, and again when it re-executes
// itself: what systemd as PID 1 does on SIGTERM.
var reexecBanner = regexp.MustCompile(`systemd \d+\S* running in system mode`)

// haltExitCode is how the kernel reports a halt inside a PID namespace: reboot(2) with
// LINUX_REBOOT_CMD_HALT (systemd-shutdown's "Halting system.") ends the namespace's init
// as if by SIGINT, so runc and the kubelet see exit code 128+2. A container killed at the
// end of its grace shows 128+9 = 137.
const haltExitCode = 130

// cleanStopCase rolls out image a, writes a token under /var/lib, then rolls out image b
// (a replacement) while following the old pod's console and status. Both images have the
// stop signal given ("" for none). check judges the old pod's stop.
func cleanStopCase(t *testing.T, stopSignal string, check func(stop oldPodStop) error) {
	a := newRealNodeAcc(t)
	dir := t.TempDir()
	base := nodeBaseLayer(t)
	aArchive := nodeImageStoppedBy(t, dir, base, "a", nil, stopSignal)
	bArchive := nodeImageStoppedBy(t, dir, base, "b", nil, stopSignal)
	signal := stopSignal
	if signal == "" {
		signal = "none (SIGTERM)"
	}
	token := fmt.Sprintf("written-%d", time.Now().UnixNano())
	var first bootFacts
	var applyStart time.Time
	var stopped <-chan oldPodStop
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: a.config(aArchive, "a", "3m"),
				Check:  a.checkBootedAndWrite("a", token, &first),
			},
			{
				PreConfig: func() {
					applyStart = time.Now()
					var old *corev1.Pod
					var err error
					if stopped, old, err = a.followOldPodStop(applyStart); err != nil {
						t.Fatalf("old pod: %v", err)
					}
					if old.Spec.TerminationGracePeriodSeconds == nil {
						t.Fatalf("pod %s has no termination grace in its spec", old.Name)
					}
					t.Logf("old pod %s: image stop signal %s, termination grace in the provider's pod spec %ds", old.Name, signal, *old.Spec.TerminationGracePeriodSeconds)
				},
				Config: a.config(bArchive, "b", "3m"),
				Check: func(s *terraform.State) error {
					var stop oldPodStop
					select {
					case stop = <-stopped:
					case <-time.After(5 * time.Minute):
						return fmt.Errorf("the old pod's stop was not reported within 5 minutes of the apply's end")
					}
					t.Logf("old pod %s's console from the apply's start to its exit (follow ended: %v):\n%s", stop.pod, stop.consoleErr, stop.console)
					t.Logf("old pod %s: container terminated with exit code %d, reason %q, signal %d, finished %s; deleted with grace %ds",
						stop.pod, stop.terminated.ExitCode, stop.terminated.Reason, stop.terminated.Signal, stop.terminated.FinishedAt.UTC().Format(time.TimeOnly), stop.grace)
					if !stop.exitSeen.IsZero() && !stop.stopAsked.IsZero() {
						t.Logf("figure: on the real node, stop signal %s, grace %ds: from the apply's start to the old pod's exit %s (the pod was deleted %s after the apply's start and exited %s after that; as seen by a watch)",
							signal, stop.grace, stop.exitSeen.Sub(applyStart).Round(100*time.Millisecond),
							stop.stopAsked.Sub(applyStart).Round(100*time.Millisecond), stop.exitSeen.Sub(stop.stopAsked).Round(100*time.Millisecond))
					}
					if stop.consoleErr != nil {
						return fmt.Errorf("following old pod %s's console ended before its container exited: %v", stop.pod, stop.consoleErr)
					}
					if err := check(stop); err != nil {
						return fmt.Errorf("old pod %s (stop signal %s): %w", stop.pod, signal, err)
					}
					second, err := a.checkBooted(s, "b")
					if err != nil {
						return err
					}
					if second.podUID == first.podUID {
						return fmt.Errorf("pod %s was not replaced by image b", first.podUID)
					}
					if second.probe != token || second.machineID != first.machineID {
						return fmt.Errorf("after the replacement /var/lib/fediversity-probe is %q (want %q) and the machine ID %s (want %s)", second.probe, token, second.machineID, first.machineID)
					}
					return nil
				},
			},
		},
	})
}

// TestAccK8sRolloutRealNode_cleanStopWithStopSignal: with the image builder's stop signal
// SIGRTMIN+3, the old pod of a replacement shuts systemd down (its console shows every
// unit stopped, /var/lib unmounted, the system halted) and its container ends by that
// halt (exit 130, see haltExitCode), not killed at the end of the grace (137); /var/lib
// and the machine ID carry over to the new pod.
func TestAccK8sRolloutRealNode_cleanStopWithStopSignal(t *testing.T) {
	cleanStopCase(t, "SIGRTMIN+3", func(stop oldPodStop) error {
		if stop.terminated.ExitCode != haltExitCode {
			return fmt.Errorf("container terminated with exit code %d, reason %q: want %d, systemd's halt of the PID namespace (a container SIGKILLed at the end of the grace exits 137)", stop.terminated.ExitCode, stop.terminated.Reason, haltExitCode)
		}
		if !cleanShutdown.MatchString(stop.console) {
			return fmt.Errorf("its console does not show systemd shutting down cleanly (want %s)", cleanShutdown)
		}
		return nil
	})
}

// TestAccK8sRolloutRealNode_cleanStopWithoutStopSignalIsKilled: without a stop signal
// the runtime sends SIGTERM, which systemd as PID 1 does not take as "shut down": the old
// pod's systemd re-executes itself (its console shows its start banner again), runs on
// until the termination grace is over and is SIGKILLed (exit 137), with no shutdown on
// its console. This is what the image builder's SIGRTMIN+3 avoids.
func TestAccK8sRolloutRealNode_cleanStopWithoutStopSignalIsKilled(t *testing.T) {
	cleanStopCase(t, "", func(stop oldPodStop) error {
		if stop.terminated.ExitCode != 137 {
			return fmt.Errorf("container terminated with exit code %d, reason %q: want 137 (SIGKILL at the end of the grace)", stop.terminated.ExitCode, stop.terminated.Reason)
		}
		if l := anyShutdown.FindString(stop.console); l != "" {
			return fmt.Errorf("its console shows systemd shutting down (%q), yet the container was killed", l)
		}
		if !reexecBanner.MatchString(stop.console) {
			return fmt.Errorf("its console does not show systemd re-executing itself on SIGTERM (want %s after the apply's start)", reexecBanner)
		}
		return nil
	})
}
