package test

// Acceptance test of modules/k8s building each node's image from the submission and
// rolling it out onto the lab's real kubelet node (lab/k8s/node-up.sh), in one apply:
// the pods really boot. The roster's `build` is the lab's bootable stand-in system
// (lab/closures/default.nix, attribute bootable: the host's systemd and busybox in the
// store, a stage-2 init), which copies the node plan it is handed into the toplevel.
// TestAccModuleK8sBuildsFromSubmission is the same on kwok, whose pods never boot.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	corev1 "k8s.io/api/core/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// bootedNode is what a test saw of one node's pod on the real node.
type bootedNode struct {
	podUID   string
	started  time.Time // the node container's start, as the kubelet reports it
	restarts int32
	toplevel string // what /run/current-system points at: the image's toplevel
}

// One apply builds, pushes and rolls out both nodes onto the real node; each pod boots
// the store's systemd as PID 1, is ready only once systemd says running, and runs the
// toplevel of its image, which carries that node's own plan. A change of one node's
// source (web02's build arguments) rebuilds and rolls out web02 only: web02's pod boots
// the new system, web01's pod is the same pod, never restarted.
func TestAccModuleK8sBuildsFromSubmissionRealNode(t *testing.T) {
	acctest.RequireRealNode(t)
	a := acctest.NewK8s(t)
	names := []string{"web01", "web02"}
	n1, n2 := names[0], names[1]
	g := newGroupSample(t, "k8s", names)
	for _, n := range names {
		a.RealNodeVolume(n)
	}

	src := operatorClosures(t)
	// A seed of this run: store paths no earlier run pushed or booted.
	seed := fmt.Sprintf("mk8s-real-%d", time.Now().UnixNano())
	// config is the root module with the seed each node's build is given.
	config := func(seeds map[string]string) string {
		roster := map[string]any{}
		for _, n := range names {
			roster[n] = map[string]any{"build": map[string]any{"file": src, "attribute": "bootable", "args": map[string]string{"seed": seeds[n]}}}
		}
		return acctest.Config(a.Provider(a.Reg.Host) + fmt.Sprintf(`
module "group" {
  source          = %q
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  runtime_class   = %q
  storage_class   = %q
  timings         = { rollout_wait = "3m" }
}

output "summary" {
  value = module.group.summary
}

output "node_plans" {
  value = module.group.node_plans
}
`, modulePath(t, "k8s"), g.file, hcl(g.baked()), hcl(roster), acctest.RealNodeRuntimeClass, acctest.RealNodeStorageClass))
	}
	first := config(map[string]string{n1: seed, n2: seed})
	changed := config(map[string]string{n1: seed, n2: seed + "-v2"})

	const (
		img     = "module.group.module.wave_1.fediversity_image.node" // unstaged: every node is in wave 1
		rollout = "module.group.module.wave_1.fediversity_k8s_rollout.node"
	)
	seen := map[string]bootedNode{} // each node's pod after the first apply
	var start time.Time
	timed := func(what string) labCheck {
		return func() error {
			t.Logf("figure: %s on the real node: %s", what, time.Since(start).Round(100*time.Millisecond))
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck: func() { acctest.PreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				PreConfig: func() { g.submit(names, nil); start = time.Now() },
				Config:    first,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(
					actions(img, names, map[string]plancheck.ResourceActionType{n1: plancheck.ResourceActionCreate, n2: plancheck.ResourceActionCreate}),
					actions(rollout, names, map[string]plancheck.ResourceActionType{n1: plancheck.ResourceActionCreate, n2: plancheck.ResourceActionCreate})...)},
				ConfigStateChecks: []statecheck.StateCheck{
					timed("plan and apply of 2 nodes built from the submission (evaluate, build, push, roll out until systemd says running)"),
					statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)),
					nodePlansCheck(func(plans map[string]string) error {
						for _, n := range names {
							b, err := bootedWithPlan(a, n, plans[n])
							if err != nil {
								return err
							}
							seen[n] = b
						}
						if seen[n1].toplevel == seen[n2].toplevel {
							return fmt.Errorf("%s and %s run one toplevel %s; want each its own (their node plans differ)", n1, n2, seen[n1].toplevel)
						}
						return nil
					}),
				},
			},
			resource.TestStep{
				Config:           first,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			resource.TestStep{
				// web02's source changes (its build arguments: another seed, so another
				// system): the plan evaluates web02's build to another derivation, and the
				// one apply builds, pushes and rolls out web02 only.
				PreConfig: func() { start = time.Now() },
				Config:    changed,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(
					actions(img, names, map[string]plancheck.ResourceActionType{n2: plancheck.ResourceActionReplace}),
					actions(rollout, names, map[string]plancheck.ResourceActionType{n2: plancheck.ResourceActionUpdate})...)},
				ConfigStateChecks: []statecheck.StateCheck{
					timed("plan and apply of one node's changed source"),
					statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)),
					nodePlansCheck(func(plans map[string]string) error {
						// web01: the very pod of the first apply, never restarted.
						pod, err := a.ReadyPodOf(n1)
						if err != nil {
							return err
						}
						now := observe(pod)
						if now.podUID != seen[n1].podUID || !now.started.Equal(seen[n1].started) || now.restarts != seen[n1].restarts {
							return fmt.Errorf("%s's pod changed while only %s's source did: pod %s started %s (%d restarts), first %s started %s (%d restarts)",
								n1, n2, now.podUID, now.started, now.restarts, seen[n1].podUID, seen[n1].started, seen[n1].restarts)
						}
						if cur, err := a.Exec(pod, "readlink", "/run/current-system"); err != nil || cur != seen[n1].toplevel {
							return fmt.Errorf("%s's /run/current-system is %q (err %v), want its first system %s", n1, cur, err, seen[n1].toplevel)
						}
						// web02: a new pod, booted into the new system, which carries its plan.
						b, err := bootedWithPlan(a, n2, plans[n2])
						if err != nil {
							return err
						}
						if b.podUID == seen[n2].podUID || b.toplevel == seen[n2].toplevel {
							return fmt.Errorf("%s runs pod %s with system %s after its source changed; want a new pod (first %s) booted into a new system (first %s)",
								n2, b.podUID, b.toplevel, seen[n2].podUID, seen[n2].toplevel)
						}
						return nil
					}),
				},
			},
			resource.TestStep{
				Config:           changed,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			resource.TestStep{Config: emptyRoot()},
		),
	})
}

// operatorClosures is the nodes' Nix source, lab/closures, copied into a directory of
// the operator's own (outside any repository, so that the evaluation key hashes this
// directory only).
func operatorClosures(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "closures")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"default.nix", "switch-to-configuration.sh"} {
		b, err := os.ReadFile(filepath.Join(labtest.RepoRoot(t), "lab", "closures", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// observe is what the kubelet reports of a node's pod: its UID, its node container's
// start and restarts.
func observe(pod *corev1.Pod) bootedNode {
	b := bootedNode{podUID: string(pod.UID)}
	for _, c := range pod.Status.ContainerStatuses {
		b.restarts = c.RestartCount
		if c.State.Running != nil {
			b.started = c.State.Running.StartedAt.Time
		}
	}
	return b
}

// bootedWithPlan checks node's one ready pod: booted on the real node (systemd PID 1,
// running, ready only after the boot), the stand-in's unit ran, /run/current-system is
// the toplevel of the image the node's Deployment names, and that toplevel carries the
// node plan plan (the module's node_plans[node]) byte for byte.
func bootedWithPlan(a *acctest.K8s, node, plan string) (bootedNode, error) {
	pod, err := a.ReadyPodOf(node)
	if err != nil {
		return bootedNode{}, err
	}
	b := observe(pod)
	if _, _, err := a.SystemdBooted(pod); err != nil {
		return b, fmt.Errorf("%s: %w", node, err)
	}
	if hello, err := a.Exec(pod, "cat", "/run/fedi-hello"); err != nil || hello != "hello from the closure" {
		return b, fmt.Errorf("%s: the stand-in's unit fedi-hello.service wrote %q (err %v), want \"hello from the closure\"", node, hello, err)
	}
	top, err := deployedToplevel(a, node)
	if err != nil {
		return b, err
	}
	if b.toplevel, err = a.Exec(pod, "readlink", "/run/current-system"); err != nil || b.toplevel != top {
		return b, fmt.Errorf("%s: /run/current-system is %q (err %v), want the toplevel of its image, %s", node, b.toplevel, err, top)
	}
	got, err := a.Exec(pod, "cat", "/run/current-system/etc/fediversity/node-plan.json")
	if err != nil {
		return b, fmt.Errorf("%s: the node plan of the running system: %w", node, err)
	}
	if plan == "" || got != strings.TrimSpace(plan) {
		return b, fmt.Errorf("%s runs a system whose node plan is %s; want its own, %s", node, got, plan)
	}
	a.T.Logf("%s: pod %s on %s, PID 1 systemd running, system %s with its node plan %s", node, pod.Name, pod.Spec.NodeName, b.toplevel, got)
	return b, nil
}

// nodePlansCheck is a check given the root output node_plans (the module's).
type nodePlansCheck func(plans map[string]string) error

func (f nodePlansCheck) CheckState(_ context.Context, req statecheck.CheckStateRequest, resp *statecheck.CheckStateResponse) {
	if req.State == nil || req.State.Values == nil || req.State.Values.Outputs["node_plans"] == nil {
		resp.Error = fmt.Errorf("the state has no output node_plans")
		return
	}
	raw, ok := req.State.Values.Outputs["node_plans"].Value.(map[string]any)
	if !ok {
		resp.Error = fmt.Errorf("output node_plans is %T, want a map", req.State.Values.Outputs["node_plans"].Value)
		return
	}
	plans := map[string]string{}
	for n, v := range raw {
		plans[n], _ = v.(string)
	}
	resp.Error = f(plans)
}
