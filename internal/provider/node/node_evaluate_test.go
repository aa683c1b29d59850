package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixeval"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// An evaluation error carries nix's message and names the node and the file.
func TestEvaluationErrorNamesNodeAndFile(t *testing.T) {
	labtest.CountNixInstantiate(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	src := filepath.Join(t.TempDir(), "node.nix")
	if err := os.WriteFile(src, []byte("{ }: derivation { name = "), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := nixstore.BuildSpec{File: src}
	_, err := nixeval.New().Evaluate(context.Background(), "web01", spec, "")
	if err == nil {
		t.Fatal("a syntax error evaluated")
	}
	d := kit.EvaluationError("web01", spec, err)
	text := d.Summary() + " " + d.Detail()
	for _, want := range []string{"web01", src, "syntax error"} {
		if !strings.Contains(text, want) {
			t.Errorf("diagnostic %q does not say %q", text, want)
		}
	}
}

// The node plan reaches the build at a path named by its content, so a source that
// uses the path itself (not only the file's content) evaluates to the same derivation
// every run instead of planning a redeploy every time.
func TestNodePlanFileIsTheSameEveryRun(t *testing.T) {
	labtest.CountNixInstantiate(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	src := filepath.Join(t.TempDir(), "node.nix")
	if err := os.WriteFile(src, []byte(`{ planFile }: derivation { name = "plan-path"; system = builtins.currentSystem;
  builder = "/bin/sh"; args = [ "-c" "cat ${planFile} > $out" ]; }`), 0o644); err != nil {
		t.Fatal(err)
	}
	m := nodeSwitchModel{
		Node: types.StringValue("web01"), NodePlan: types.StringValue(`{"domain":"a.example"}`),
		Build: &kit.BuildModel{File: types.StringValue(src), Args: types.MapNull(types.StringType)},
	}
	var drvs []string
	for run := 0; run < 2; run++ {
		spec, cleanup, diags := buildSpec(m)
		if diags.HasError() {
			t.Fatal(diags)
		}
		drv, err := nixstore.Instantiate(context.Background(), spec)
		cleanup()
		if err != nil {
			t.Fatal(err)
		}
		drvs = append(drvs, drv)
	}
	if drvs[0] != drvs[1] {
		t.Fatalf("two runs with the same node plan evaluated to %s and %s", drvs[0], drvs[1])
	}
}
