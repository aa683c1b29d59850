package test

// Acceptance test of modules/k8s building each node's image from the submission, in the
// same apply that rolls it out: the roster gives a `build` (the lab's stand-in system,
// which copies the node plan it is handed into the toplevel), not a ready-made toplevel.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// One apply per change of the submission: the module evaluates every node's build with
// its node plan at plan, builds and pushes the images, and rolls the Deployments to
// them. Each node runs an image whose toplevel holds its own node plan; a setting of
// one node's application changes that node's image and rollout only.
func TestAccModuleK8sBuildsFromSubmission(t *testing.T) {
	a := acctest.NewK8s(t)
	names := []string{"web01", "web02"}
	n1, n2 := names[0], names[1]
	g := newGroupSample(t, "k8s", names)

	// The node's Nix source, in a directory of the operator's own (outside any
	// repository, so that the evaluation key hashes this directory only).
	src, err := os.ReadFile(filepath.Join(labtest.RepoRoot(t), "internal", "provider", "node", "testdata", "node.nix"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "node.nix")
	if err := os.WriteFile(file, src, 0o644); err != nil {
		t.Fatal(err)
	}
	seed := fmt.Sprintf("mk8s-build-%d", time.Now().UnixNano())
	roster := map[string]any{}
	for _, n := range names {
		roster[n] = map[string]any{"build": map[string]any{"file": file, "args": map[string]string{"seed": seed}}}
	}
	config := acctest.Config(a.Provider(a.Reg.Host) + fmt.Sprintf(`
module "group" {
  source          = %q
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  storage_class   = "fediversity-lab"
  timings         = { rollout_wait = "90s", pull_grace = "3s" }
}

output "summary" {
  value = module.group.summary
}
`, modulePath(t, "k8s"), g.file, hcl(g.baked()), hcl(roster)))

	const (
		img     = "module.group.module.wave_1.fediversity_image.node" // unstaged: every node is in wave 1
		rollout = "module.group.module.wave_1.fediversity_k8s_rollout.node"
	)
	// runsPlan: the image each node's Deployment names was built from a toplevel that
	// holds that node's plan, with the words given.
	runsPlan := func(want map[string][]string) labCheck {
		return func() error {
			for n, words := range want {
				plan, err := deployedNodePlan(a, n)
				if err != nil {
					return err
				}
				for _, w := range words {
					if !strings.Contains(plan, w) {
						return fmt.Errorf("%s runs an image built from the node plan %s, which lacks %q", n, plan, w)
					}
				}
			}
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck: func() { acctest.PreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				PreConfig: func() { g.submit(names, nil) },
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(
					actions(img, names, map[string]plancheck.ResourceActionType{n1: plancheck.ResourceActionCreate, n2: plancheck.ResourceActionCreate}),
					actions(rollout, names, map[string]plancheck.ResourceActionType{n1: plancheck.ResourceActionCreate, n2: plancheck.ResourceActionCreate})...)},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)),
					runsPlan(map[string][]string{n1: {g.apps[n1]}, n2: {g.apps[n2]}}),
				},
			},
			resource.TestStep{
				Config:           config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			resource.TestStep{
				// web02's application setting changes in the submission: the plan
				// evaluates web02's build to another derivation, and the one apply builds,
				// pushes and rolls out web02 only.
				PreConfig: func() { g.submit(names, map[string]map[string]any{g.apps[n2]: {"theme": "dark"}}) },
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(
					actions(img, names, map[string]plancheck.ResourceActionType{n2: plancheck.ResourceActionReplace}),
					actions(rollout, names, map[string]plancheck.ResourceActionType{n2: plancheck.ResourceActionUpdate})...)},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)),
					runsPlan(map[string][]string{n1: {g.apps[n1]}, n2: {g.apps[n2], "dark"}}),
				},
			},
			resource.TestStep{
				Config:           config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			resource.TestStep{Config: emptyRoot()},
		),
	})
}

// deployedNodePlan is the node plan inside the toplevel of the image node's Deployment
// names (deployedToplevel), as the build copied it into that toplevel, read from the
// local store.
func deployedNodePlan(a *acctest.K8s, node string) (string, error) {
	top, err := deployedToplevel(a, node)
	if err != nil {
		return "", err
	}
	plan, err := os.ReadFile(filepath.Join(top, "etc", "fediversity", "node-plan.json"))
	if err != nil {
		return "", fmt.Errorf("%s's image (toplevel %q): %w", node, top, err)
	}
	return string(plan), nil
}

// deployedToplevel is the toplevel of the image node's Deployment names: the image's
// toplevel label, read from the registry.
func deployedToplevel(a *acctest.K8s, node string) (string, error) {
	d, err := a.C.CS.AppsV1().Deployments(a.Ns).Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	ref, err := name.ParseReference(d.Spec.Template.Spec.Containers[0].Image, name.Insecure)
	if err != nil {
		return "", err
	}
	img, err := remote.Image(ref)
	if err != nil {
		return "", fmt.Errorf("%s's image %s: %w", node, ref, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	top := cfg.Config.Labels["org.fediversity.toplevel"]
	if top == "" {
		return "", fmt.Errorf("%s's image %s has no label org.fediversity.toplevel", node, ref)
	}
	return top, nil
}
