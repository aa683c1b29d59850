package k8s_test

// fail_when_not_ready = false, run by the CLI under test (TF_ACC_TERRAFORM_PATH) so that
// its warning is seen as a user sees it: a rollout whose pod does not become ready is
// rolled back and the apply succeeds with a warning naming the node and the reason; the
// state says what the cluster runs, and the next plan rolls the node out again. And the
// plan's warning about a create whose Deployment already exists.

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

func TestAccK8sRollout_lenientRollbackKeepsTheTruth(t *testing.T) {
	acctest.PreCheck(t)
	a := newK8sAcc(t)
	r := newCLIRun(t)
	apply := func(config string) (int, string) {
		r.write(config)
		return r.run("apply", "-auto-approve", "-no-color", "-input=false")
	}
	// rollout is the state's fediversity_k8s_rollout.web01.
	rollout := func() map[string]any {
		code, out := r.run("show", "-json", "-no-color")
		if code != 0 {
			t.Fatalf("show: exit %d\n%s", code, out)
		}
		var st struct {
			Values struct {
				RootModule struct {
					Resources []struct {
						Address string         `json:"address"`
						Values  map[string]any `json:"values"`
					} `json:"resources"`
				} `json:"root_module"`
			} `json:"values"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("show -json: %v\n%s", err, out)
		}
		for _, res := range st.Values.RootModule.Resources {
			if res.Address == "fediversity_k8s_rollout.web01" {
				return res.Values
			}
		}
		t.Fatalf("no fediversity_k8s_rollout.web01 in the state:\n%s", out)
		return nil
	}
	t.Cleanup(func() { r.run("destroy", "-auto-approve", "-no-color", "-input=false") })

	if code, out := apply(a.Good("v1", "v1")); code != 0 {
		t.Fatalf("first apply: exit %d\n%s", code, out)
	}
	good := rollout()["image_ref"].(string)

	// The pod of the new image stays in ImagePullBackOff: rolled back, and the apply
	// succeeds with a warning that names the node and the reason.
	lenient := strings.Replace(a.Faulty("broken"), `node          = "web01"`, `node          = "web01"
  fail_when_not_ready = false`, 1)
	code, out := apply(lenient)
	if code != 0 {
		t.Fatalf("lenient apply of a broken image: exit %d, want 0 (a warning)\n%s", code, out)
	}
	if !regexp.MustCompile(`(?s)Warning: Node web01 did not become ready; rolled back.*ImagePullBackOff.*fail_when_not_ready is false`).MatchString(out) {
		t.Fatalf("the apply's output has no warning naming web01, the rollback and the reason:\n%s", out)
	}

	// The state tells the truth: the previous image runs.
	st := rollout()
	if st["status"] != "rolled_back" || st["running_image_ref"] != good {
		t.Fatalf("after the lenient rollback the state has status %v, running_image_ref %v; want rolled_back, %s", st["status"], st["running_image_ref"], good)
	}
	if img, _, err := a.DeploymentImage(); err != nil || img != good {
		t.Fatalf("after the rollback the Deployment names %s (%v), want %s", img, err, good)
	}

	// The next plan rolls the node out again, with a refresh (which reads the previous
	// image into image_ref) and without (the status alone plans a new wait).
	for _, args := range [][]string{{"plan"}, {"plan", "-refresh=false"}} {
		code, out := r.run(append(args, "-detailed-exitcode", "-no-color", "-input=false")...)
		if code != 2 || !strings.Contains(out, "fediversity_k8s_rollout.web01 will be updated in-place") {
			t.Fatalf("%v after the lenient rollback: exit %d, want 2 with web01's rollout updated (it must not look converged)\n%s", args, code, out)
		}
	}

	// A rollout at an address with no state whose Deployment exists (as after a changed
	// rollout layout in modules/k8s, which moves a node to another wave's module): the
	// plan warns, naming the node and what to do.
	if code, out := r.run("state", "rm", "-no-color", "fediversity_k8s_rollout.web01"); code != 0 {
		t.Fatalf("state rm: exit %d\n%s", code, out)
	}
	code, out = r.run("plan", "-no-color", "-input=false")
	if code != 0 || !regexp.MustCompile(`(?s)Warning: Node web01 already has a Deployment, which this plan\s+creates.*terraform state mv`).MatchString(out) {
		t.Fatalf("plan of a rollout whose Deployment exists: exit %d, want 0 with a warning naming web01 and terraform state mv\n%s", code, out)
	}
}
