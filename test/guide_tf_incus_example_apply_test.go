package test

// The tf-incus guide's example, applied on the lab's incusd as the guide prints it
// (the approach of guide_examples_apply_test.go): main.tf byte for byte as the page
// prints it, and only what an operator supplies:
//
//   - terraform.tfvars naming the operator's files, the project the containers go in
//     and db01's instance;
//   - nodes.nix, whose `system` builds a node's system from its node plan: here the
//     lab's stand-in that boots as a container's /sbin/init and takes later systems
//     by a switch (lab/closures, `bootable-switchable`), as a NixOS container system does;
//   - what the example says must exist on the daemon: the project, with the
//     `fediversity` profile web02 names, and db01's container, made by another tool
//     (here from an image of an earlier system of the same kind).
//
// The project is one of this lab's own (<prefix>-t-gtfi), with its own images, profiles
// and volumes, so that the example's container names cannot meet another run's.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/image"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// guideIncusNodes are the nodes of the tf-incus guide's sample configuration.
var guideIncusNodes = []string{"db01", "web01", "web02"}

// inProject runs argv in instance of project, with only the system's tools on PATH.
func inProject(project, instance, script string) (string, error) {
	out, err := labtest.IncusErr("exec", instance, "--project", project, "--", "/bin/sh", "-c", "PATH=/run/current-system/sw/bin; "+script)
	return strings.TrimSpace(out), err
}

// operatorIncusProject makes the project the example's `project` names as an operator
// has it: its own images, profiles and volumes, a default profile with the root disk on
// the lab's pool, and the `fediversity` profile web02 names. It and all it holds are
// deleted before and after the test.
func operatorIncusProject(t *testing.T, project string) {
	t.Helper()
	remove := func() {
		for _, n := range guideIncusNodes {
			_, _ = labtest.IncusErr("delete", "--force", "--project", project, n)
			_, _ = labtest.IncusErr("storage", "volume", "delete", "--project", project, "lab", n+"-data")
		}
		out, _ := labtest.IncusErr("image", "list", "--project", project, "--format", "csv", "--columns", "F")
		for _, fp := range strings.Fields(out) {
			_, _ = labtest.IncusErr("image", "delete", "--project", project, fp)
		}
		_, _ = labtest.IncusErr("profile", "delete", "--project", project, "fediversity")
		_, _ = labtest.IncusErr("project", "delete", project)
	}
	remove()
	t.Cleanup(remove)
	labtest.Incus(t, "project", "create", project, "-c", "features.images=true", "-c", "features.profiles=true",
		"-c", "features.storage.volumes=true")
	labtest.Incus(t, "profile", "device", "add", "--project", project, "default", "root", "disk", "path=/", "pool=lab")
	labtest.Incus(t, "profile", "create", "--project", project, "fediversity")
	labtest.Incus(t, "profile", "set", "--project", project, "fediversity", "user.fediversity.guide=tf-incus")
}

// operatorExistingInstance launches db01's container in project as another tool would:
// from an image of an earlier system (before, booted as PID 1), the image deleted once
// the container is made. It waits until the container's systemd runs.
func operatorExistingInstance(t *testing.T, project, name, before string) {
	t.Helper()
	tarball := filepath.Join(t.TempDir(), "before.tar")
	f, err := os.Create(tarball)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := image.WriteIncusImage(ctx, f, before); err != nil {
		t.Fatalf("the image of %s's earlier system: %v", name, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	alias := name + "-before"
	labtest.Incus(t, "image", "import", "--project", project, tarball, "--alias", alias)
	labtest.Incus(t, "launch", "--project", project, alias, name)
	labtest.Incus(t, "image", "delete", "--project", project, alias)
	var state string
	for range 90 {
		state, _ = inProject(project, name, "systemctl is-system-running")
		if state == "running" {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("%s (project %s): systemd says %q after 90 s", name, project, state)
}

// stateNodePlans are the node plans of the example's submission data source, from
// `show -json`.
func stateNodePlans(t *testing.T, c *acctest.CLIDir) map[string]string {
	t.Helper()
	js, code := c.Run("show", "-json", "-no-color")
	if code != 0 {
		t.Fatalf("show -json exited %d:\n%s", code, js)
	}
	type res struct {
		Address string          `json:"address"`
		Values  json.RawMessage `json:"values"`
	}
	type mod struct {
		Resources    []res `json:"resources"`
		ChildModules []mod `json:"child_modules"`
	}
	var shown struct {
		Values struct {
			RootModule mod `json:"root_module"`
		} `json:"values"`
	}
	if err := json.Unmarshal([]byte(js), &shown); err != nil {
		t.Fatalf("show -json: %v", err)
	}
	var find func(m mod) json.RawMessage
	find = func(m mod) json.RawMessage {
		for _, r := range m.Resources {
			if r.Address == "module.group.data.fediversity_submission.this" {
				return r.Values
			}
		}
		for _, cm := range m.ChildModules {
			if v := find(cm); v != nil {
				return v
			}
		}
		return nil
	}
	var sub struct {
		NodePlans map[string]string `json:"node_plans"`
	}
	if v := find(shown.Values.RootModule); v == nil || json.Unmarshal(v, &sub) != nil {
		t.Fatalf("the state holds no module.group.data.fediversity_submission.this with node_plans")
	}
	return sub.NodePlans
}

func TestAccGuideTFIncusExampleApplies(t *testing.T) {
	acctest.Lab(t)
	root := labtest.RepoRoot(t)
	const example = "examples/guides/tf-incus"
	mainTF := printedFile(t, root, "tf-incus", "terraform", example+"/main.tf")
	if others, _ := filepath.Glob(filepath.Join(root, example, "*.tf")); len(others) != 1 {
		t.Fatalf("%s holds %d .tf files; the guide prints main.tf alone", example, len(others))
	}
	project := labtest.Prefix() + "-t-gtfi"
	operatorIncusProject(t, project)
	operatorExistingInstance(t, project, "db01", labtest.BuildClosure(t, labtest.ClosureBootableSwitchable))

	ops := t.TempDir()
	for _, f := range []string{"baked.json", "submission.json"} {
		labtest.CopyFile(t, filepath.Join(root, example, f), filepath.Join(ops, f))
	}
	nodesNix := operatorNodesNixOf(t, root, ops, labtest.ClosureBootableSwitchable)

	c := acctest.NewCLIDir(t)
	if err := os.WriteFile(filepath.Join(c.Dir, "main.tf"), mainTF, 0o600); err != nil {
		t.Fatal(err)
	}
	tfvars := fmt.Sprintf("submission_file = %q\nbaked_file      = %q\nnodes_nix       = %q\nproject         = %q\ndb01_instance   = { name = \"db01\", project = %q }\n",
		filepath.Join(ops, "submission.json"), filepath.Join(ops, "baked.json"), nodesNix, project, project)
	if err := os.WriteFile(filepath.Join(c.Dir, "terraform.tfvars"), []byte(tfvars), 0o600); err != nil {
		t.Fatal(err)
	}
	gitConfig := exampleModulesGitConfig(t, root, []string{example})
	c.Env = append(c.Env, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+gitConfig)

	if out, code := c.Run("get", "-no-color"); code != 0 {
		t.Fatalf("get (the module by its printed source) exited %d:\n%s", code, out)
	}
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			if out, code := c.Run("destroy", "-auto-approve", "-no-color"); code != 0 {
				t.Logf("destroy after a failed test exited %d:\n%s", code, out)
			}
		}
	})

	start := time.Now()
	out := c.MustApply("the tf-incus guide's example as printed")
	t.Logf("figure: the example's first apply (3 nodes: 2 systems built, imported as images and booted, 3 deployed and judged): %s", time.Since(start).Round(100*time.Millisecond))
	var outputs struct {
		Summary struct {
			Value struct {
				OK       []string            `json:"ok"`
				Failing  map[string][]string `json:"failing"`
				Disabled []string            `json:"disabled"`
			} `json:"value"`
		} `json:"summary"`
		Verdicts struct {
			Value map[string]bool `json:"value"`
		} `json:"verdicts"`
	}
	js, code := c.Run("output", "-json", "-no-color")
	if code != 0 {
		t.Fatalf("output -json exited %d:\n%s", code, js)
	}
	if err := json.Unmarshal([]byte(js), &outputs); err != nil {
		t.Fatalf("output -json: %v\n%s", err, js)
	}
	sum := outputs.Summary.Value
	sort.Strings(sum.OK)
	if strings.Join(sum.OK, ",") != strings.Join(guideIncusNodes, ",") || len(sum.Failing) != 0 || len(sum.Disabled) != 0 {
		t.Errorf("summary %+v, want every node ok and none failing or disabled; apply printed:\n%s", sum, out)
	}
	for _, n := range guideIncusNodes {
		if !outputs.Verdicts.Value[n] {
			t.Errorf("verdicts[%q] is %v, want true (verdicts %v)", n, outputs.Verdicts.Value[n], outputs.Verdicts.Value)
		}
	}

	// Each node runs the system nodes.nix builds from its node plan, built here again;
	// web01 and web02 booted it from their own images, db01 was switched to it.
	plans := stateNodePlans(t, c)
	want := map[string]string{}
	for _, n := range guideIncusNodes {
		planFile := filepath.Join(t.TempDir(), "plan.json")
		if err := os.WriteFile(planFile, []byte(plans[n]), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		top, err := nixstore.Build(ctx, nixstore.BuildSpec{File: nodesNix, Attr: "system", PlanFile: planFile})
		cancel()
		if err != nil {
			t.Fatalf("nodes.nix for %s: %v", n, err)
		}
		want[n] = top
	}
	runs := func(nodes ...string) {
		t.Helper()
		for _, n := range nodes {
			if cur, err := inProject(project, n, "readlink /run/current-system"); err != nil || cur != want[n] {
				t.Errorf("%s (project %s) runs %q (%v), want %s", n, project, cur, err, want[n])
			}
		}
	}
	runs(guideIncusNodes...)
	for _, n := range []string{"web01", "web02"} {
		if booted, err := inProject(project, n, "readlink /run/booted-system"); err != nil || booted != want[n] {
			t.Errorf("%s booted %q (%v), want its own system %s from its image", n, booted, err, want[n])
		}
	}
	if got, _ := labtest.IncusErr("config", "get", "--project", project, "--expanded", "web02", "user.fediversity.guide"); strings.TrimSpace(got) != "tf-incus" {
		t.Errorf("web02 does not take the operator's fediversity profile (user.fediversity.guide %q)", strings.TrimSpace(got))
	}

	// The same files again: nothing to do.
	if out, code := c.Run("plan", "-no-color", "-detailed-exitcode"); code != 0 {
		t.Errorf("a second plan of the unchanged example exited %d (0: no changes):\n%s", code, out)
	}

	if out, code := c.Run("destroy", "-auto-approve", "-no-color"); code != 0 {
		t.Fatalf("destroy exited %d:\n%s", code, out)
	}
	destroyed = true
	if st, _ := c.Run("state", "list", "-no-color"); strings.TrimSpace(st) != "" {
		t.Errorf("the state after destroy still lists:\n%s", st)
	}
	// The containers and images the module made are gone; their data volumes are kept
	// (data_volume's default, as the guide says); db01, made elsewhere, runs on.
	for _, n := range []string{"web01", "web02"} {
		if out, err := labtest.IncusErr("info", "--project", project, n); err == nil {
			t.Errorf("container %s is left after destroy:\n%s", n, out)
		}
		if out, err := labtest.IncusErr("storage", "volume", "show", "--project", project, "lab", n+"-data"); err != nil {
			t.Errorf("%s's data volume should be kept by destroy (%v):\n%s", n, err, out)
		}
	}
	if imgs, err := labtest.IncusErr("image", "list", "--project", project, "--format", "csv"); err != nil || strings.TrimSpace(imgs) != "" {
		t.Errorf("images left in project %s after destroy (%v):\n%s", project, err, imgs)
	}
	runs("db01")
}
