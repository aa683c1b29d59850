package test

// The tf-incus and tf-incus-operator guides' examples, applied on the lab's incusd as
// the guides print them (the approach of guide_examples_apply_test.go): main.tf byte for
// byte as the page prints it, and only what an operator supplies:
//
//   - terraform.tfvars naming the operator's files and names: the project the
//     containers go in, db01's instance (tf-incus), the image, the SPIRE node and the
//     secret chain (tf-incus-operator);
//   - nodes.nix, whose `system` builds a node's system from its node plan: the lab's
//     stand-in of a NixOS container system (lab/closures);
//   - what the examples say must exist on the daemon: the project with its profiles,
//     and for tf-incus db01's container, made by another tool;
//   - for tf-incus-operator the SSH key to the spire node, in SSH_PRIVATE_KEY_FILE.
//
// Each project is one of this lab's own (<prefix>-t-gti…), with its own profiles and
// volumes, so that the examples' container names cannot meet another run's.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/image"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

// guideIncusNodes are the nodes of the Incus guides' sample configuration.
var guideIncusNodes = []string{"db01", "web01", "web02"}

// inProject runs script in instance of project, the system's tools first on PATH (the
// lab image's Debian tools after them: a container of the lab image runs a stand-in
// system whose path holds fewer tools than NixOS's).
func inProject(project, instance, script string) (string, error) {
	out, err := labtest.IncusErr("exec", instance, "--project", project, "--", "/bin/sh", "-c", "PATH=/run/current-system/sw/bin:/usr/bin:/bin; "+script)
	return strings.TrimSpace(out), err
}

// operatorIncusProject makes the project an example's `project` names, as an operator
// has it: its own profiles and volumes (and images, when ownImages), a default profile
// with the root disk on the lab's pool and devices, and the further (empty but for a
// marker key) profiles. It and all it holds are deleted before and after the test.
func operatorIncusProject(t *testing.T, project string, ownImages bool, devices map[string][]string, profiles ...string) {
	t.Helper()
	remove := func() {
		for _, n := range guideIncusNodes {
			_, _ = labtest.IncusErr("delete", "--force", "--project", project, n)
			_, _ = labtest.IncusErr("storage", "volume", "delete", "--project", project, "lab", n+"-data")
		}
		if ownImages {
			out, _ := labtest.IncusErr("image", "list", "--project", project, "--format", "csv", "--columns", "F")
			for _, fp := range strings.Fields(out) {
				_, _ = labtest.IncusErr("image", "delete", "--project", project, fp)
			}
		}
		for _, p := range profiles {
			_, _ = labtest.IncusErr("profile", "delete", "--project", project, p)
		}
		_, _ = labtest.IncusErr("project", "delete", project)
	}
	remove()
	t.Cleanup(remove)
	labtest.Incus(t, "project", "create", project, "-c", fmt.Sprintf("features.images=%v", ownImages),
		"-c", "features.profiles=true", "-c", "features.storage.volumes=true")
	labtest.Incus(t, "profile", "device", "add", "--project", project, "default", "root", "disk", "path=/", "pool=lab")
	for name, kv := range devices {
		labtest.Incus(t, append([]string{"profile", "device", "add", "--project", project, "default", name}, kv...)...)
	}
	for _, p := range profiles {
		labtest.Incus(t, "profile", "create", "--project", project, p)
		labtest.Incus(t, "profile", "set", "--project", project, p, "user.fediversity.profile="+p)
	}
}

// operatorExistingInstance launches name in project as another tool would: from an
// image of an earlier system (before, booted as PID 1), the image deleted once the
// container is made. It waits until the container's systemd runs.
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

// guideIncusExample is an Incus guide's example staged in a working directory of its
// own, as its page prints it, with the operator's files beside it.
type guideIncusExample struct {
	c        *acctest.CLIDir
	ops      string // the operator's directory: baked.json, submission.json, nodes.nix
	nodesNix string
}

// stageGuideIncusExample writes the printed main.tf of guide's example, the sample
// configuration and submission, nodes.nix (attr of lab/closures with args) and
// terraform.tfvars (the operator's files, then vars), and gets the module by its
// printed source.
func stageGuideIncusExample(t *testing.T, guide, attr string, args map[string]string, vars string) guideIncusExample {
	t.Helper()
	root := labtest.RepoRoot(t)
	example := "examples/guides/" + guide
	mainTF := printedFile(t, root, guide, "terraform", example+"/main.tf")
	if others, _ := filepath.Glob(filepath.Join(root, example, "*.tf")); len(others) != 1 {
		t.Fatalf("%s holds %d .tf files; the guide prints main.tf alone", example, len(others))
	}
	ops := t.TempDir()
	for _, f := range []string{"baked.json", "submission.json"} {
		labtest.CopyFile(t, filepath.Join(root, example, f), filepath.Join(ops, f))
	}
	e := guideIncusExample{c: acctest.NewCLIDir(t), ops: ops, nodesNix: operatorNodesNixOf(t, root, ops, attr, args)}
	if err := os.WriteFile(filepath.Join(e.c.Dir, "main.tf"), mainTF, 0o600); err != nil {
		t.Fatal(err)
	}
	tfvars := fmt.Sprintf("submission_file = %q\nbaked_file      = %q\nnodes_nix       = %q\n%s",
		filepath.Join(ops, "submission.json"), filepath.Join(ops, "baked.json"), e.nodesNix, vars)
	if err := os.WriteFile(filepath.Join(e.c.Dir, "terraform.tfvars"), []byte(tfvars), 0o600); err != nil {
		t.Fatal(err)
	}
	gitConfig := exampleModulesGitConfig(t, root, []string{example})
	e.c.Env = append(withoutSSHAgent(e.c.Env), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+gitConfig)
	if out, code := e.c.Run("get", "-no-color"); code != 0 {
		t.Fatalf("get (the module by its printed source) exited %d:\n%s", code, out)
	}
	return e
}

// applyOK applies the example (destroying it when the test ends early) and fails unless
// the summary and verdicts say every node is ok.
func (e guideIncusExample) applyOK(t *testing.T, what string) (destroy func()) {
	t.Helper()
	destroyLeftOnCleanup(t, e.c)
	start := time.Now()
	out := e.c.MustApply(what)
	t.Logf("figure: the first apply of %s: %s", what, time.Since(start).Round(100*time.Millisecond))
	var outputs struct {
		Summary struct {
			Value exampleSummary `json:"value"`
		} `json:"summary"`
		Verdicts struct {
			Value map[string]bool `json:"value"`
		} `json:"verdicts"`
	}
	readOutputs(t, e.c, &outputs)
	everyNodeOK(t, outputs.Summary.Value, guideIncusNodes, out)
	for _, n := range guideIncusNodes {
		if !outputs.Verdicts.Value[n] {
			t.Errorf("verdicts[%q] is %v, want true (verdicts %v)", n, outputs.Verdicts.Value[n], outputs.Verdicts.Value)
		}
	}
	return func() {
		t.Helper()
		if out, code := e.c.Run("plan", "-no-color", "-detailed-exitcode"); code != 0 {
			t.Errorf("a second plan of the unchanged example exited %d (0: no changes):\n%s", code, out)
		}
		destroyAll(t, e.c)
	}
}

// systems are the systems nodes.nix builds for each node from its node plan (read from
// the state's submission data source), built here again.
func (e guideIncusExample) systems(t *testing.T) map[string]string {
	t.Helper()
	js, code := e.c.Run("show", "-json", "-no-color")
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
	want := map[string]string{}
	for _, n := range guideIncusNodes {
		planFile := filepath.Join(t.TempDir(), "plan.json")
		if err := os.WriteFile(planFile, []byte(sub.NodePlans[n]), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		top, err := nixstore.Build(ctx, nixstore.BuildSpec{File: e.nodesNix, Attr: "system", PlanFile: planFile})
		cancel()
		if err != nil {
			t.Fatalf("nodes.nix for %s: %v", n, err)
		}
		want[n] = top
	}
	return want
}

// runSystems fails unless each of nodes (in project) runs its system of want.
func runSystems(t *testing.T, project string, want map[string]string, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		if cur, err := inProject(project, n, "readlink /run/current-system"); err != nil || cur != want[n] {
			t.Errorf("%s (project %s) runs %q (%v), want %s", n, project, cur, err, want[n])
		}
	}
}

// keptDataVolumes fails unless nodes' containers are gone from project and their data
// volumes kept (data_volume's default, as the tf-incus guide says).
func keptDataVolumes(t *testing.T, project string, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		if out, err := labtest.IncusErr("info", "--project", project, n); err == nil {
			t.Errorf("container %s is left after destroy:\n%s", n, out)
		}
		if out, err := labtest.IncusErr("storage", "volume", "show", "--project", project, "lab", n+"-data"); err != nil {
			t.Errorf("%s's data volume should be kept by destroy (%v):\n%s", n, err, out)
		}
	}
}

func TestAccGuideTFIncusExampleApplies(t *testing.T) {
	acctest.Lab(t)
	// web01's and web02's containers are made from images of their own systems, so
	// nodes.nix builds the stand-in that boots as a container's init and takes later
	// systems by a switch, as a NixOS container system does.
	project := labtest.Prefix() + "-t-gtfi"
	operatorIncusProject(t, project, true, nil, "fediversity")
	operatorExistingInstance(t, project, "db01", labtest.BuildClosure(t, labtest.ClosureBootableSwitchable))
	e := stageGuideIncusExample(t, "tf-incus", labtest.ClosureBootableSwitchable, nil,
		fmt.Sprintf("project         = %q\ndb01_instance   = { name = \"db01\", project = %q }\n", project, project))

	finish := e.applyOK(t, "the tf-incus guide's example as printed")
	// Each node runs the system nodes.nix builds from its node plan: web01 and web02
	// booted it from their own images, db01 was switched to it.
	want := e.systems(t)
	runSystems(t, project, want, guideIncusNodes...)
	for _, n := range []string{"web01", "web02"} {
		if booted, err := inProject(project, n, "readlink /run/booted-system"); err != nil || booted != want[n] {
			t.Errorf("%s booted %q (%v), want its own system %s from its image", n, booted, err, want[n])
		}
	}
	if got, _ := labtest.IncusErr("config", "get", "--project", project, "--expanded", "web02", "user.fediversity.profile"); strings.TrimSpace(got) != "fediversity" {
		t.Errorf("web02 does not take the operator's fediversity profile (user.fediversity.profile %q)", strings.TrimSpace(got))
	}

	// A second plan is empty; destroy deletes the containers and images the module made
	// and keeps their data volumes; db01, made elsewhere, runs on.
	finish()
	keptDataVolumes(t, project, "web01", "web02")
	if imgs, err := labtest.IncusErr("image", "list", "--project", project, "--format", "csv"); err != nil || strings.TrimSpace(imgs) != "" {
		t.Errorf("images left in project %s after destroy (%v):\n%s", project, err, imgs)
	}
	runSystems(t, project, want, "db01")
}

// TestAccSpireGuideTFIncusOperatorExampleApplies applies the tf-incus-operator guide's
// example on the lab's SPIRE server (named TestAccSpire… so that CI runs it where a spire
// node is up). The containers are made from the lab's image, as the example's `image`
// makes them from a NixOS image, and deployed with the SPIRE lane's system whose agent is
// in its own closure (lab/closures, `spire-chain-store`); its configuration names the
// server at the container's own 127.0.0.1:8081, which the project's default profile
// connects to the spire node, as an operator's network would.
func TestAccSpireGuideTFIncusOperatorExampleApplies(t *testing.T) {
	acctest.Lab(t)
	sn := labtest.Spire(t)
	agent := labtest.SpireAgentBinary(t)
	const group = "social" // the example's spire.group
	deleteEntriesAround(t, sn, group, guideIncusNodes)
	project := labtest.Prefix() + "-t-gtio"
	operatorIncusProject(t, project, false, map[string][]string{
		"spire": {"proxy", "listen=tcp:127.0.0.1:8081", fmt.Sprintf("connect=tcp:127.0.0.1:%d", sn.ServerPort), "bind=instance"},
	})
	e := stageGuideIncusExample(t, "tf-incus-operator", labtest.ClosureSpireChainStore, map[string]string{"spireAgent": agent},
		fmt.Sprintf("image           = %q\nproject         = %q\nspire_node      = { host = %q, port = %d, host_key = %q }\nsecret_chain    = [\"secret-chain-fetch.service\", \"secret-chain-install.service\"]\n",
			labtest.Image, project, sn.SSHHost, sn.SSHPort, sn.HostKey))
	e.c.Env = append(e.c.Env, "SSH_PRIVATE_KEY_FILE="+labtest.KeyFile())

	finish := e.applyOK(t, "the tf-incus-operator guide's example as printed")
	want := e.systems(t)
	runSystems(t, project, want, guideIncusNodes...)
	// Each node's agent, the system's own, holds the SVID of its host entry, which the
	// server has, and the secret chain's product is there.
	for _, n := range guideIncusNodes {
		out, err := inProject(project, n, "spire-agent api fetch x509 -socketPath /run/spire-agent/api.sock")
		if err != nil || !strings.Contains(out, spire.HostID(group, n)) {
			journal, _ := inProject(project, n, "journalctl -u fedi-spire-agent --no-pager -n 20")
			t.Errorf("the agent of %s holds no SVID of %s (%v):\n%s\n%s", n, spire.HostID(group, n), err, out, journal)
		}
		if !strings.Contains(hostEntry(sn, group, n), spire.HostID(group, n)) {
			t.Errorf("%s: no host entry on the server", n)
		}
		if _, err := inProject(project, n, "test -e /run/secret"); err != nil {
			t.Errorf("%s: the secret chain's product /run/secret is missing", n)
		}
	}

	// A second plan is empty; destroy deletes the containers and the SPIRE entries, and
	// keeps the containers' data volumes.
	finish()
	keptDataVolumes(t, project, guideIncusNodes...)
	for _, n := range guideIncusNodes {
		if strings.Contains(hostEntry(sn, group, n), spire.HostID(group, n)) {
			t.Errorf("the host entry of %s is left after destroy", n)
		}
	}
}
