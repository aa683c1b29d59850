package acctest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

var cliProvider struct {
	once sync.Once
	dir  string
	err  error
}

// cliProviderDir builds the provider once per test process into a directory that
// dev_overrides points at. A run of many test processes (lab/test.sh) builds it once
// for all of them and names the directory in FEDIVERSITY_CLI_PROVIDER_DIR: each
// process building its own made the first CLI test of every binary pay a whole
// compile, about two minutes each on CI's cold, loaded machine. Built with the flags
// the test binaries are built with, so that it reuses the packages they compiled.
func cliProviderDir(t *testing.T) string {
	t.Helper()
	cliProvider.once.Do(func() {
		if dir := os.Getenv("FEDIVERSITY_CLI_PROVIDER_DIR"); dir != "" {
			if _, err := os.Stat(filepath.Join(dir, "terraform-provider-fediversity")); err != nil {
				cliProvider.err = fmt.Errorf("FEDIVERSITY_CLI_PROVIDER_DIR names %s, which holds no provider binary: %v", dir, err)
				return
			}
			cliProvider.dir = dir
			return
		}
		dir, err := os.MkdirTemp("", "fediversity-cli-provider-")
		if err != nil {
			cliProvider.err = err
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "terraform-provider-fediversity"), ".")
		cmd.Dir = labtest.RepoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			cliProvider.err = fmt.Errorf("go build: %v: %s", err, out)
			return
		}
		cliProvider.dir = dir
	})
	if cliProvider.err != nil {
		t.Fatalf("building the provider for the CLI tests: %v", cliProvider.err)
	}
	return cliProvider.dir
}

// CLIDir is one working (and state) directory of the CLI.
type CLIDir struct {
	t   *testing.T
	Dir string
	Env []string
}

func NewCLIDir(t *testing.T) *CLIDir {
	t.Helper()
	if Binary.err != nil {
		t.Fatalf("acceptance test binary: %v", Binary.err)
	}
	dir := t.TempDir()
	rc := filepath.Join(dir, "tfrc")
	pdir := cliProviderDir(t)
	if err := os.WriteFile(rc, []byte(fmt.Sprintf(`provider_installation {
  dev_overrides {
    "registry.terraform.io/fediversity/fediversity" = %q
    "registry.opentofu.org/fediversity/fediversity" = %q
  }
  direct {}
}
`, pdir, pdir)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1", "TF_INPUT=0")
	return &CLIDir{t: t, Dir: dir, Env: env}
}

func (c *CLIDir) Write(config string) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.Dir, "main.tf"), []byte(config), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// Command is the binary with args in this directory; its output goes to out.
func (c *CLIDir) Command(out *bytes.Buffer, args ...string) *exec.Cmd {
	cmd := exec.Command(Binary.Path, args...)
	cmd.Dir = c.Dir
	cmd.Env = c.Env
	cmd.Stdout, cmd.Stderr = out, out
	return cmd
}

// Run runs the binary to its end and returns its output and exit code.
func (c *CLIDir) Run(args ...string) (string, int) {
	c.t.Helper()
	var out bytes.Buffer
	err := c.Command(&out, args...).Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			c.t.Fatalf("%s %v: %v", Binary.Path, args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), code
}

func (c *CLIDir) Apply() (string, int) {
	return c.Run("apply", "-auto-approve", "-no-color")
}

// MustApply applies and fails the test unless it succeeded.
func (c *CLIDir) MustApply(what string) string {
	c.t.Helper()
	out, code := c.Apply()
	if code != 0 {
		c.t.Fatalf("%s: apply exited %d:\n%s", what, code, out)
	}
	return out
}

// PlanActions plans and returns the plan's output and the actions planned for addr.
func (c *CLIDir) PlanActions(addr string) (string, []string) {
	c.t.Helper()
	out, code := c.Run("plan", "-no-color", "-detailed-exitcode", "-out=tfplan")
	if code == 1 {
		c.t.Fatalf("plan failed:\n%s", out)
	}
	js, code := c.Run("show", "-json", "tfplan")
	if code != 0 {
		c.t.Fatalf("show -json: %s", js)
	}
	var plan struct {
		ResourceChanges []struct {
			Address string `json:"address"`
			Change  struct {
				Actions []string `json:"actions"`
			} `json:"change"`
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal([]byte(js[strings.IndexByte(js, '{'):]), &plan); err != nil {
		c.t.Fatalf("plan JSON: %v\n%s", err, js)
	}
	for _, rc := range plan.ResourceChanges {
		if rc.Address == addr {
			return out, rc.Change.Actions
		}
	}
	return out, nil
}

// stateAttr is one attribute of addr in the state, as JSON.
func (c *CLIDir) StateAttrs(addr string) map[string]any {
	c.t.Helper()
	js, code := c.Run("show", "-json")
	if code != 0 {
		c.t.Fatalf("show -json: %s", js)
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
	if err := json.Unmarshal([]byte(js[strings.IndexByte(js, '{'):]), &st); err != nil {
		c.t.Fatalf("state JSON: %v\n%s", err, js)
	}
	for _, r := range st.Values.RootModule.Resources {
		if r.Address == addr {
			return r.Values
		}
	}
	return nil
}
