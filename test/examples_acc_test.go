package test

// The examples under examples/ are what the registry pages print and what a new user
// copies. TestAccExamplesValidate runs `validate` of the binary under test
// (TF_ACC_TERRAFORM_PATH: CI runs it once with Terraform and once with OpenTofu) on
// every example directory, as printed, with the provider built from this tree through
// dev_overrides: each example alone, and together with the provider example. It needs
// no lab: validate configures no provider and reaches no node.
//
// A per-resource example references objects that another example declares (the
// submission, the namespace, …): testdata/examples-stub holds one small stand-in per
// such address. The module guides fetch the modules by their printed source
// (github.com/…//modules/<m>?ref=<tag>): git is pointed, through url.insteadOf, at a
// local repository holding this tree's modules/ under that tag, so init fetches
// them as a consumer's would, with no network.
//
// TestDocsPrintOnlyExamples checks that every HCL block of docs/ is one of these
// example files, so the pages print nothing that TestAccExamplesValidate did not
// validate.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

var (
	// exampleDeclRE finds a declared object: resource "fediversity_x" "name".
	exampleDeclRE = regexp.MustCompile(`(?m)^\s*(resource|data)\s+"(fediversity_[a-z0-9_]+)"\s+"([A-Za-z0-9_-]+)"`)
	// exampleRefRE finds a reference to an object: [data.]fediversity_x.name (not
	// var.fediversity_x or an attribute named fediversity_x).
	exampleRefRE = regexp.MustCompile(`(?:^|[^.\w])(data\.)?(fediversity_[a-z0-9_]+)\.([A-Za-z_][A-Za-z0-9_-]*)`)
	// exampleModuleRefRE finds the tag of a module source: ?ref=<tag>.
	exampleModuleRefRE = regexp.MustCompile(`\?ref=([A-Za-z0-9._-]+)`)
)

// exampleProjectRepo is the repository the module guides name as their source.
const exampleProjectRepo = "https://github.com/fediversity/terraform-provider-fediversity"

// exampleDirs are the directories under examples/ that hold a configuration (*.tf),
// relative to the repository root.
func exampleDirs(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(root, "examples"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".tf") {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			seen[rel] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs
}

// readTF is the text of every *.tf file of dir.
func readTF(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteString("\n")
	}
	return b.String()
}

// exampleAddress is an object's address: [data.]type.name.
func exampleAddress(data, typ, name string) string {
	if data != "" {
		return "data." + typ + "." + name
	}
	return typ + "." + name
}

// missingAddresses are the objects the configuration text references but does not declare.
func missingAddresses(text string) []string {
	declared := map[string]bool{}
	for _, m := range exampleDeclRE.FindAllStringSubmatch(text, -1) {
		data := ""
		if m[1] == "data" {
			data = "data"
		}
		declared[exampleAddress(data, m[2], m[3])] = true
	}
	missing := map[string]bool{}
	for _, m := range exampleRefRE.FindAllStringSubmatch(text, -1) {
		if a := exampleAddress(m[1], m[2], m[3]); !declared[a] {
			missing[a] = true
		}
	}
	out := make([]string, 0, len(missing))
	for a := range missing {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// stageExample copies the example's files to a fresh directory, with the provider
// example when withProvider, the stand-ins of what it references from other examples,
// and the provider's source when nothing in it names one.
func stageExample(t *testing.T, root, example string, withProvider bool) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(filepath.Join(root, example))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			labtest.CopyFile(t, filepath.Join(root, example, e.Name()), filepath.Join(dir, e.Name()))
		}
	}
	if withProvider {
		labtest.CopyFile(t, filepath.Join(root, "examples", "provider", "provider.tf"), filepath.Join(dir, "example_provider.tf"))
	}
	stubs := filepath.Join(root, "test", "testdata", "examples-stub")
	if !strings.Contains(readTF(t, dir), "required_providers") {
		labtest.CopyFile(t, filepath.Join(stubs, "versions.tf"), filepath.Join(dir, "stub_versions.tf"))
	}
	// A stand-in may reference another (the image its namespace): add until none is missing.
	for {
		missing := missingAddresses(readTF(t, dir))
		if len(missing) == 0 {
			return dir
		}
		for _, a := range missing {
			src := filepath.Join(stubs, a+".tf")
			if _, err := os.Stat(src); err != nil {
				t.Fatalf("%s references %s, which it does not declare and testdata/examples-stub has no stand-in for (add %s.tf there)", example, a, a)
			}
			labtest.CopyFile(t, src, filepath.Join(dir, "stub_"+a+".tf"))
		}
	}
}

// exampleModulesGitConfig makes a bare git repository of this tree's modules/ (as they
// are in the working tree) tagged with every ref the examples name, and a git
// configuration that points the project's GitHub address at it.
func exampleModulesGitConfig(t *testing.T, root string, dirs []string) string {
	t.Helper()
	base := t.TempDir()
	work, bare := filepath.Join(base, "work"), filepath.Join(base, "repo.git")
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.org", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the examples' module repository: git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	git(base, "init", "-q", work)
	if out, err := exec.Command("cp", "-r", filepath.Join(root, "modules"), work).CombinedOutput(); err != nil {
		t.Fatalf("the examples' module repository: cp modules: %v: %s", err, out)
	}
	git(work, "add", "modules")
	git(work, "commit", "-q", "-m", "modules of this tree")
	tags := map[string]bool{}
	for _, ex := range dirs {
		for _, m := range exampleModuleRefRE.FindAllStringSubmatch(readTF(t, filepath.Join(root, ex)), -1) {
			// A branch (main, the repository's default) is there already; a tag is made.
			if !tags[m[1]] && m[1] != "main" {
				git(work, "tag", m[1])
			}
			tags[m[1]] = true
		}
	}
	git(base, "clone", "-q", "--bare", work, bare)
	cfg := filepath.Join(base, "gitconfig")
	text := "[url \"file://" + bare + "\"]\n\tinsteadOf = " + exampleProjectRepo + ".git\n\tinsteadOf = " + exampleProjectRepo + "\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestAccExamplesValidate(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1")
	}
	acctest.PreCheck(t)
	root := labtest.RepoRoot(t)
	dirs := exampleDirs(t, root)
	if len(dirs) < 10 {
		t.Fatalf("found only %d example directories under %s/examples: %v", len(dirs), root, dirs)
	}
	gitConfig := exampleModulesGitConfig(t, root, dirs)
	for _, example := range dirs {
		own := readTF(t, filepath.Join(root, example))
		variants := []bool{false}
		// An example that configures the provider itself cannot take a second
		// provider block: it is complete alone.
		if !strings.Contains(own, `provider "fediversity"`) {
			variants = append(variants, true)
		}
		for _, withProvider := range variants {
			name := example + "/alone"
			if withProvider {
				name = example + "/with_provider_example"
			}
			t.Run(name, func(t *testing.T) {
				c := acctest.NewCLIDir(t)
				c.Dir = stageExample(t, root, example, withProvider)
				// Only PATH and the CLI settings of acctest.NewCLIDir: no credential or setting of
				// the caller's environment reaches validate.
				env := []string{"HOME=" + c.Dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + gitConfig}
				for _, kv := range c.Env {
					if k, _, _ := strings.Cut(kv, "="); k == "PATH" || k == "TF_CLI_CONFIG_FILE" || k == "CHECKPOINT_DISABLE" || k == "TF_IN_AUTOMATION" || k == "TF_INPUT" {
						env = append(env, kv)
					}
				}
				c.Env = env
				if strings.Contains(readTF(t, c.Dir), "module \"") {
					if out, code := c.Run("get", "-no-color"); code != 0 {
						t.Fatalf("get (the modules) of %s (exit %d):\n%s", example, code, out)
					}
				}
				out, code := c.Run("validate", "-no-color")
				if code != 0 || !strings.Contains(out, "The configuration is valid") {
					t.Fatalf("validate of %s as printed (exit %d):\n%s", example, code, out)
				}
			})
		}
	}
}

// docsHCLBlockRE finds a fenced HCL block of a page.
var docsHCLBlockRE = regexp.MustCompile("(?s)```(?:terraform|hcl|tf)\n(.*?)```")

func TestDocsPrintOnlyExamples(t *testing.T) {
	root := labtest.RepoRoot(t)
	examples := map[string]bool{}
	for _, dir := range exampleDirs(t, root) {
		files, _ := filepath.Glob(filepath.Join(root, dir, "*.tf"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			examples[strings.TrimSpace(string(data))] = true
		}
	}
	blocks := 0
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, m := range docsHCLBlockRE.FindAllStringSubmatch(string(data), -1) {
			blocks++
			if !examples[strings.TrimSpace(m[1])] {
				rel, _ := filepath.Rel(root, p)
				t.Errorf("%s: HCL block %d is no file under examples/, so no test validates it; print it from an example (tffile) instead:\n%s", rel, i+1, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if blocks < 10 {
		t.Fatalf("found only %d HCL blocks under docs/: the pattern no longer matches the pages", blocks)
	}
}
