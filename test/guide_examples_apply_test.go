package test

// The ssh and tf guides' examples, applied on lab nodes as the guides print them.
// TestAccExamplesValidate proves that every example is valid; these prove that the two
// that deploy over SSH work as printed: the example's files are taken byte for byte
// from the files the guide prints (and checked against the generated page), and the
// test supplies only what an operator supplies:
//
//   - the roster's connection fields: each node's host, port and pinned host key (or the
//     known_hosts file its entry names), as the lab's nodes answer them; every other
//     key of the printed roster stays as printed;
//   - nodes.nix, the operator's Nix file whose `system` attribute builds a node's system
//     from its node plan: here the lab's stand-in system (lab/closures, `good`);
//   - the SSH key, in SSH_PRIVATE_KEY_FILE;
//   - for the tf example, terraform.tfvars naming those files.
//
// The repository's sample baked.json and submission.json are the operator's
// configuration and submission as they are (their nodes are web01 and web02).

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// guideExampleNodes are the nodes of the guides' sample baked configuration.
var guideExampleNodes = []string{"web01", "web02"}

// exampleSummary is a group module's `summary` output.
type exampleSummary struct {
	OK       []string            `json:"ok"`
	Failing  map[string][]string `json:"failing"`
	Disabled []string            `json:"disabled"`
}

// readOutputs reads the root module's outputs (`output -json`) into outputs, a struct
// whose fields name the outputs and their `value`.
func readOutputs(t *testing.T, c *acctest.CLIDir, outputs any) {
	t.Helper()
	js, code := c.Run("output", "-json", "-no-color")
	if code != 0 {
		t.Fatalf("output -json exited %d:\n%s", code, js)
	}
	if err := json.Unmarshal([]byte(js), outputs); err != nil {
		t.Fatalf("output -json: %v\n%s", err, js)
	}
}

// everyNodeOK fails the test unless the summary has each of nodes ok and none failing or
// disabled; applied is what the apply printed, shown on failure.
func everyNodeOK(t *testing.T, sum exampleSummary, nodes []string, applied string) {
	t.Helper()
	ok := slices.Sorted(slices.Values(sum.OK))
	if strings.Join(ok, ",") != strings.Join(nodes, ",") || len(sum.Failing) != 0 || len(sum.Disabled) != 0 {
		t.Errorf("summary %+v, want every node ok and none failing or disabled; apply printed:\n%s", sum, applied)
	}
}

// destroyLeftOnCleanup destroys, when the test ends, what the example's state still
// holds: a test that failed before its own destroy leaves no lab part behind.
func destroyLeftOnCleanup(t *testing.T, c *acctest.CLIDir) {
	t.Cleanup(func() {
		if st, _ := c.Run("state", "list", "-no-color"); strings.TrimSpace(st) == "" {
			return
		}
		if out, code := c.Run("destroy", "-auto-approve", "-no-color"); code != 0 {
			t.Logf("destroy after a failed test exited %d:\n%s", code, out)
		}
	})
}

// destroyAll destroys the example and fails the test unless its state is empty after.
func destroyAll(t *testing.T, c *acctest.CLIDir) {
	t.Helper()
	if out, code := c.Run("destroy", "-auto-approve", "-no-color"); code != 0 {
		t.Fatalf("destroy exited %d:\n%s", code, out)
	}
	if st, _ := c.Run("state", "list", "-no-color"); strings.TrimSpace(st) != "" {
		t.Errorf("the state after destroy still lists:\n%s", st)
	}
}

// guidePage is the generated guide docs/guides/<name>.md.
func guidePage(t *testing.T, root, name string) string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join(root, "docs", "guides", name+".md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(page)
}

// printedFile is the example file rel (under the repository) whose bytes the guide
// prints in a fenced block of the given language; the test fails when the page
// prints anything else (run `make generate`).
func printedFile(t *testing.T, root, guide, lang, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	block := "```" + lang + "\n" + strings.TrimRight(string(data), "\n") + "\n```"
	if !strings.Contains(guidePage(t, root, guide), block) {
		t.Fatalf("docs/guides/%s.md does not print %s as it is (run make generate)", guide, rel)
	}
	return data
}

// operatorNodesNix is the operator's nodes.nix as the lab stands it in: every node's
// system is the lab's stand-in system, built with the node plan handed as planFile as
// a real nodes.nix is (the stand-in does not read it).
func operatorNodesNix(t *testing.T, root, dir string) string {
	t.Helper()
	return operatorNodesNixOf(t, root, dir, labtest.ClosureGood, nil)
}

// operatorNodesNixOf is operatorNodesNix with the lab's stand-in system attr, built with
// the further arguments args.
func operatorNodesNixOf(t *testing.T, root, dir, attr string, args map[string]string) string {
	t.Helper()
	file := filepath.Join(dir, "nodes.nix")
	var more strings.Builder
	for _, k := range slices.Sorted(maps.Keys(args)) {
		fmt.Fprintf(&more, " %s = %q;", k, args[k])
	}
	text := fmt.Sprintf("{ planFile ? \"\" }:\n{\n  system = (import %s { inherit planFile;%s }).%s;\n}\n",
		filepath.Join(root, "lab", "closures", "default.nix"), more.String(), attr)
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// operatorRoster is the printed roster with what an operator changes in it: each node's
// host and port are the lab node's, and its pinned key is the lab node's host key, in
// host_key or in the known_hosts file its entry names (written in dir). Every other key
// stays as printed.
func operatorRoster(t *testing.T, printed []byte, dir string, lab map[string]labtest.Node) string {
	t.Helper()
	var roster map[string]any
	if err := json.Unmarshal(printed, &roster); err != nil {
		t.Fatalf("the printed roster: %v", err)
	}
	nodes, _ := roster["nodes"].(map[string]any)
	if len(nodes) != len(lab) {
		t.Fatalf("the printed roster names %d nodes, the sample configuration %d", len(nodes), len(lab))
	}
	for name, v := range nodes {
		entry, _ := v.(map[string]any)
		n, ok := lab[name]
		if entry == nil || !ok {
			t.Fatalf("the printed roster's node %q is not one of the sample configuration's %v", name, guideExampleNodes)
		}
		entry["host"], entry["port"] = n.SSHHost, n.SSHPort
		switch {
		case entry["host_key"] != nil:
			entry["host_key"] = n.HostKey
		case entry["known_hosts_file"] != nil:
			kh := filepath.Join(dir, "known_hosts_"+name)
			line := fmt.Sprintf("[%s]:%d %s\n", n.SSHHost, n.SSHPort, n.HostKey)
			if err := os.WriteFile(kh, []byte(line), 0o600); err != nil {
				t.Fatal(err)
			}
			entry["known_hosts_file"] = kh
		default:
			t.Fatalf("the printed roster's node %q pins no host key", name)
		}
	}
	data, err := json.MarshalIndent(roster, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "roster.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// guideExampleLab launches a throwaway lab node for each node of the sample
// configuration.
func guideExampleLab(t *testing.T, tag string) map[string]labtest.Node {
	lab := map[string]labtest.Node{}
	for _, n := range guideExampleNodes {
		lab[n] = labtest.NewInstance(t, tag+"-"+n)
	}
	return lab
}

// runsSystem fails unless every lab node runs want.
func runsSystem(t *testing.T, lab map[string]labtest.Node, want string) {
	t.Helper()
	for name, n := range lab {
		if cur, err := currentSystem(n.Instance); err != nil || cur != want {
			t.Errorf("%s (%s) runs %q (%v), want %s", name, n.Instance, cur, err, want)
		}
	}
}

// withoutSSHAgent is env without SSH_AUTH_SOCK: the key the test supplies is the one used.
func withoutSSHAgent(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "SSH_AUTH_SOCK=") {
			out = append(out, kv)
		}
	}
	return out
}

func TestAccGuideTFExampleApplies(t *testing.T) {
	acctest.Lab(t)
	root := labtest.RepoRoot(t)
	const example = "examples/guides/tf"
	mainTF := printedFile(t, root, "tf", "terraform", example+"/main.tf")
	if others, _ := filepath.Glob(filepath.Join(root, example, "*.tf")); len(others) != 1 {
		t.Fatalf("%s holds %d .tf files; the guide prints main.tf alone", example, len(others))
	}
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	lab := guideExampleLab(t, "gtf")

	// The operator's files, in a directory of their own: the example reads them
	// through its variables.
	ops := t.TempDir()
	for _, f := range []string{"baked.json", "submission.json"} {
		labtest.CopyFile(t, filepath.Join(root, example, f), filepath.Join(ops, f))
	}
	sample, err := os.ReadFile(filepath.Join(root, example, "roster.json"))
	if err != nil {
		t.Fatal(err)
	}
	roster := operatorRoster(t, sample, ops, lab)
	nodesNix := operatorNodesNix(t, root, ops)

	c := acctest.NewCLIDir(t)
	if err := os.WriteFile(filepath.Join(c.Dir, "main.tf"), mainTF, 0o600); err != nil {
		t.Fatal(err)
	}
	tfvars := fmt.Sprintf("submission_file = %q\nbaked_file      = %q\nroster_file     = %q\nnodes_nix       = %q\n",
		filepath.Join(ops, "submission.json"), filepath.Join(ops, "baked.json"), roster, nodesNix)
	if err := os.WriteFile(filepath.Join(c.Dir, "terraform.tfvars"), []byte(tfvars), 0o600); err != nil {
		t.Fatal(err)
	}
	// The module comes by its printed source, from this tree's modules/ (see
	// exampleModulesGitConfig); the key from the environment, as the example says.
	gitConfig := exampleModulesGitConfig(t, root, []string{example})
	c.Env = append(withoutSSHAgent(c.Env), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+gitConfig,
		"SSH_PRIVATE_KEY_FILE="+labtest.KeyFile())

	if out, code := c.Run("get", "-no-color"); code != 0 {
		t.Fatalf("get (the module by its printed source) exited %d:\n%s", code, out)
	}
	destroyLeftOnCleanup(t, c)

	out := c.MustApply("the tf guide's example as printed")
	var outputs struct {
		Summary struct {
			Value exampleSummary `json:"value"`
		} `json:"summary"`
		Verdicts struct {
			Value map[string]bool `json:"value"`
		} `json:"verdicts"`
	}
	readOutputs(t, c, &outputs)
	everyNodeOK(t, outputs.Summary.Value, guideExampleNodes, out)
	for _, n := range guideExampleNodes {
		if !outputs.Verdicts.Value[n] {
			t.Errorf("verdicts[%q] is %v, want true (verdicts %v)", n, outputs.Verdicts.Value[n], outputs.Verdicts.Value)
		}
	}
	runsSystem(t, lab, good)

	// The same files again: nothing to do.
	if out, code := c.Run("plan", "-no-color", "-detailed-exitcode"); code != 0 {
		t.Errorf("a second plan of the unchanged example exited %d (0: no changes):\n%s", code, out)
	}
	if out := c.MustApply("the second apply"); !regexp.MustCompile(`(?m)^Apply complete! Resources: 0 added, 0 changed, 0 destroyed\.`).MatchString(out) &&
		!strings.Contains(out, "No changes.") {
		t.Errorf("the second apply changed something:\n%s", out)
	}

	destroyAll(t, c)
	// A destroy forgets the nodes' resources; the nodes keep the system they run.
	runsSystem(t, lab, good)
}

// guideShellBlockRE is the ssh guide's first shell block: the commands of its example.
var guideShellBlockRE = regexp.MustCompile("(?s)```shell\n(.*?)```")

// guideCommands are the commands of a shell block, continuation lines joined; the
// first is the export of the key.
func guideCommands(block string) []string {
	var cmds []string
	var cur strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\"))
			continue
		}
		cur.WriteString(line)
		cmds = append(cmds, cur.String())
		cur.Reset()
	}
	return cmds
}

func TestAccGuideSSHExampleApplies(t *testing.T) {
	acctest.Lab(t)
	root := labtest.RepoRoot(t)
	const example = "examples/guides/ssh"
	page := guidePage(t, root, "ssh")
	m := guideShellBlockRE.FindStringSubmatch(page[strings.Index(page, "## Example"):])
	if m == nil {
		t.Fatal("docs/guides/ssh.md prints no shell block under its Example")
	}
	cmds := guideCommands(m[1])
	if len(cmds) != 4 || !strings.HasPrefix(cmds[0], "export SSH_PRIVATE_KEY_FILE=~/.ssh/fediversity") {
		t.Fatalf("the ssh guide's example is no longer the export of the key and three commands:\n%s", m[1])
	}
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	lab := guideExampleLab(t, "gssh")

	// The operator's directory: the printed roster with the lab's hosts and keys, the
	// sample configuration and submission, and nodes.nix beside the roster (its build
	// file, relative to it).
	ops := t.TempDir()
	for _, f := range []string{"baked.json", "submission.json"} {
		labtest.CopyFile(t, filepath.Join(root, example, f), filepath.Join(ops, f))
	}
	operatorRoster(t, printedFile(t, root, "ssh", "json", example+"/roster.json"), ops, lab)
	operatorNodesNix(t, root, ops)

	// The command, built from this tree, on PATH; the operator's key where the export
	// names it (~/.ssh/fediversity).
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "fediversity"), "./cmd/fediversity")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/fediversity: %v\n%s", err, out)
	}
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	labtest.CopyFile(t, labtest.KeyFile(), filepath.Join(home, ".ssh", "fediversity"))
	if err := os.Chmod(filepath.Join(home, ".ssh", "fediversity"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := withoutSSHAgent(os.Environ())
	env = append(env, "HOME="+home, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	// Each printed command in the operator's directory, after the printed export.
	run := func(cmd string) (string, string) {
		t.Helper()
		var stdout, stderr strings.Builder
		sh := exec.Command("bash", "-c", cmds[0]+"\n"+cmd)
		sh.Dir, sh.Env, sh.Stdout, sh.Stderr = ops, env, &stdout, &stderr
		if err := sh.Run(); err != nil {
			t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", cmd, err, stdout.String(), stderr.String())
		}
		return stdout.String(), stderr.String()
	}
	okLines := func(what, table string) {
		t.Helper()
		for _, n := range guideExampleNodes {
			if !regexp.MustCompile(`(?m)^` + n + `\s+ok\b`).MatchString(table) {
				t.Errorf("%s: no ok line for %s:\n%s", what, n, table)
			}
		}
	}

	// The strict deploy: every node ok, running the system nodes.nix builds.
	out, _ := run(cmds[1])
	okLines("the deploy", out)
	runsSystem(t, lab, good)

	// The deploy again, as JSON: every node ok, and nothing copied (each node holds its
	// system already; an unstaged deploy switches it again, as the guide says).
	out, errOut := run(cmds[2])
	var res struct {
		OK     []string `json:"ok"`
		Failed []string `json:"failed"`
		Nodes  []struct {
			Node   string `json:"node"`
			OK     bool   `json:"ok"`
			Top    string `json:"toplevel"`
			Copied *struct {
				PathsCopied int `json:"paths_copied"`
			} `json:"copied"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("the JSON deploy's output: %v\n%s\nstderr:\n%s", err, out, errOut)
	}
	sort.Strings(res.OK)
	if strings.Join(res.OK, ",") != strings.Join(guideExampleNodes, ",") || len(res.Failed) != 0 || len(res.Nodes) != len(guideExampleNodes) {
		t.Errorf("the JSON deploy: ok %v, failed %v, %d nodes; want every node ok:\n%s", res.OK, res.Failed, len(res.Nodes), out)
	}
	for _, n := range res.Nodes {
		if !n.OK || n.Top != good || n.Copied == nil || n.Copied.PathsCopied != 0 {
			t.Errorf("the deploy again: %s ok %v, toplevel %s, copied %+v; want ok with %s, nothing copied",
				n.Node, n.OK, n.Top, n.Copied, good)
		}
	}
	runsSystem(t, lab, good)

	// The lenient verdict pass: every node ok.
	out, _ = run(cmds[3])
	okLines("the verdict", out)
}
