package k8s_test

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/image"
	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// toplevelConfig is realNodeAcc.config with the image built by fediversity_image from a
// toplevel instead of pushed from an archive.
func (a *realNodeAcc) toplevelConfig(toplevel string) string {
	return acctest.Config(a.Provider(a.Reg.Host) + fmt.Sprintf(`
resource "fediversity_k8s_namespace" "ns" {
  runtime_class = %q
}

resource "fediversity_image" "node" {
  namespace = fediversity_k8s_namespace.ns.name
  node      = "web01"
  toplevel  = %q
}

resource "fediversity_k8s_rollout" "web01" {
  namespace     = fediversity_k8s_namespace.ns.name
  node          = "web01"
  image_ref     = fediversity_image.node.image_ref
  runtime_class = fediversity_k8s_namespace.ns.runtime_class
  storage_class = %q
  timings {
    rollout_wait = "3m"
  }
}
`, acctest.RealNodeRuntimeClass, toplevel, acctest.RealNodeStorageClass))
}

// TestAccK8sRolloutRealNode_toplevelImageBoots: an image that fediversity_image builds
// from a toplevel (the lab's bootable stand-in: lab/closures/default.nix, attribute
// bootable) boots on the real kubelet node. The image holds the closure and /sbin/init
// and nothing else; the pod's PID 1 is the store's systemd, in the pod's own user
// namespace; the pod becomes ready only once systemd says "running"; the stand-in's one
// unit ran; the machine ID is the state's container_uuid. A second toplevel then
// replaces the pod, and the old one's systemd halts cleanly on the image's stop signal.
func TestAccK8sRolloutRealNode_toplevelImageBoots(t *testing.T) {
	a := newRealNodeAcc(t)
	top := labtest.BuildClosure(t, labtest.ClosureBootable)
	top2 := labtest.BuildClosureSeed(t, labtest.ClosureBootable, "v2")
	img, closure, err := image.ToplevelImage(context.Background(), top)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	// What the image holds, listed from the very layers that are pushed.
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var entries int
	var outside []string
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			entries++
			switch name := h.Name; {
			case name == "nix/" || name == "nix/store/" || name == "sbin/" || name == "sbin/init":
			case strings.HasPrefix(name, "nix/store/"):
			default:
				outside = append(outside, name)
			}
		}
		rc.Close()
	}
	if len(layers) != 1 || len(outside) != 0 {
		t.Fatalf("image of %s: %d layers, entries outside /nix/store and /sbin/init: %q; want one layer of the closure only", top, len(layers), outside)
	}
	t.Logf("image %s of %s: one layer, %d entries, closure %q", digest, top, entries, closure)

	var start time.Time
	var first bootFacts
	var oldConsole <-chan string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			PreConfig: func() { start = time.Now() },
			Config:    a.toplevelConfig(top),
			Check: func(s *terraform.State) error {
				t.Logf("figure: apply of a toplevel image (build, push, rollout until systemd says running) on the real node: %s", time.Since(start).Round(100*time.Millisecond))
				if ref := acctest.StateAttr(s, "fediversity_image.node", "image_ref"); !strings.HasSuffix(ref, "@"+digest.String()) {
					return fmt.Errorf("fediversity_image pushed %s, want the image built here (%s)", ref, digest)
				}
				// Ready, on the real node, PID 1 systemd saying "running", ready only after
				// the boot finished, root an unprivileged host uid, machine ID container_uuid.
				if first, err = a.checkBooted(s, ""); err != nil {
					return err
				}
				pod, err := a.ReadyPod()
				if err != nil {
					return err
				}
				if id := pod.Status.ContainerStatuses[0].ImageID; !strings.HasSuffix(id, "@"+digest.String()) {
					return fmt.Errorf("the pod runs image %s, want %s", id, digest)
				}
				// PID 1's command line (its exe link needs a ptrace right the exec lacks).
				cmdline, err := a.Exec(pod, "cat", "/proc/1/cmdline")
				exe, _, _ := strings.Cut(cmdline, "\x00")
				if err != nil || !strings.HasPrefix(exe, "/nix/store/") || !strings.HasSuffix(exe, "-fedi-systemd/lib/systemd/systemd") {
					return fmt.Errorf("PID 1 runs %q (err %v), want the closure's systemd", exe, err)
				}
				if hello, err := a.Exec(pod, "cat", "/run/fedi-hello"); err != nil || hello != "hello from the closure" {
					return fmt.Errorf("the stand-in's unit fedi-hello.service wrote %q (err %v), want \"hello from the closure\"", hello, err)
				}
				if cur, err := a.Exec(pod, "readlink", "/run/current-system"); err != nil || cur != top {
					return fmt.Errorf("/run/current-system is %q (err %v), want the toplevel %s", cur, err, top)
				}
				return nil
			},
		}, {
			// Another toplevel replaces the pod. The old one is stopped with the image's
			// stop signal, SIGRTMIN+3: its systemd halts cleanly, through systemd-shutdown
			// from the store, instead of being killed at the end of the grace period.
			PreConfig: func() {
				pod, err := a.ReadyPod()
				if err != nil {
					t.Fatal(err)
				}
				oldConsole = a.followConsole(pod)
			},
			Config: a.toplevelConfig(top2),
			Check: func(s *terraform.State) error {
				second, err := a.checkBooted(s, "")
				if err != nil {
					return err
				}
				if second.podUID == first.podUID || second.machineID != first.machineID {
					return fmt.Errorf("after the changed toplevel pod %s (first %s), machine ID %s (want %s): want a new pod with the same machine ID", second.podUID, first.podUID, second.machineID, first.machineID)
				}
				pod, err := a.ReadyPod()
				if err != nil {
					return err
				}
				if cur, err := a.Exec(pod, "readlink", "/run/current-system"); err != nil || cur != top2 {
					return fmt.Errorf("/run/current-system is %q (err %v), want the new toplevel %s", cur, err, top2)
				}
				var console string
				select {
				case console = <-oldConsole:
				case <-time.After(2 * time.Minute):
					return errors.New("the old pod's console did not end two minutes after its replacement")
				}
				console = regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(console, "")
				t.Logf("the old pod's console, boot to stop:\n%s", console)
				// "Halting system." is systemd-shutdown's last word (the store's, found at
				// the path init links): systemd execs it only at the end of a clean halt.
				for _, want := range []string{"Startup finished", "Received SIGRTMIN+3.", "Halting system."} {
					if !strings.Contains(console, want) {
						return fmt.Errorf("the old pod's console lacks %q: its systemd did not halt cleanly on the stop signal", want)
					}
				}
				return nil
			},
		}},
	})
}

// followConsole is the pod's console (the container's output: systemd's messages) from
// its start until the container ends.
func (a *realNodeAcc) followConsole(pod *corev1.Pod) <-chan string {
	out := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		logs, err := a.streamingClient()
		if err != nil {
			out <- "(console not readable: " + err.Error() + ")"
			return
		}
		stream, err := logs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: k8s.ContainerName, Follow: true}).Stream(ctx)
		if err != nil {
			out <- "(console not readable: " + err.Error() + ")"
			return
		}
		defer stream.Close()
		raw, err := io.ReadAll(stream)
		if err != nil {
			raw = append(raw, "\n(console read ended: "+err.Error()+")"...)
		}
		out <- string(raw)
	}()
	return out
}
