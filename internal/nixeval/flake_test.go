package nixeval

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// testFlake is a flake with two node systems reached as nixosConfigurations do: web01
// from its module web01.nix, web02 from the `path:` input lib; both read the node plan
// from the fediversity-node-plan input. The seed makes derivations no earlier run left.
const testFlake = `{
  inputs.fediversity-node-plan = { url = "path:./no-node-plan"; flake = false; };
  inputs.lib = { url = "path:LIB"; flake = false; };
  outputs = { self, fediversity-node-plan, lib }:
    let
      plan = builtins.readFile "${fediversity-node-plan}/node-plan.json";
      system = name: text: { config.system.build.toplevel = derivation {
        inherit name plan; seed = "SEED"; system = "x86_64-linux"; builder = "/bin/sh";
        args = [ "-c" "echo ${text} > $out" ];
      }; };
    in {
      nixosConfigurations.web01 = system "web01" (import ./web01.nix);
      nixosConfigurations.web02 = system "web02" (import "${lib}/lib.nix");
    };
}
`

type flakeFixture struct {
	t        *testing.T
	dir, lib string
}

func newTestFlake(t *testing.T) *flakeFixture {
	t.Helper()
	f := &flakeFixture{t: t, dir: t.TempDir(), lib: t.TempDir()}
	src := strings.NewReplacer("LIB", f.lib, "SEED", time.Now().Format(time.RFC3339Nano)).Replace(testFlake)
	f.write(f.dir, "flake.nix", src)
	f.write(f.dir, "no-node-plan/node-plan.json", "null")
	f.write(f.dir, "web01.nix", `"one"`)
	f.write(f.lib, "lib.nix", `"lib-one"`)
	return f
}

func (f *flakeFixture) write(dir, name, content string) {
	f.t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *flakeFixture) spec(node, plan string) nixstore.BuildSpec {
	f.t.Helper()
	spec := nixstore.BuildSpec{Flake: "path:" + f.dir, Attr: "nixosConfigurations." + node + ".config.system.build.toplevel"}
	if plan != "" {
		dir := filepath.Join(f.t.TempDir(), "plan") // a new location every time, as in a run
		f.write(dir, nixstore.NodePlanInputFile, plan)
		spec.PlanInput = dir
	}
	return spec
}

// The flake form through the cache: an unchanged flake runs no nix eval; an edit of one
// node's module changes that node's derivation only; a comment changes none; an edit
// of a path: input changes the node that uses it; a node plan change changes the
// derivation; a syntax error names the flake and says nix's message.
func TestEvaluatorFlake(t *testing.T) {
	evals := labtest.CountNixEvals(t)
	f := newTestFlake(t)
	e := &Evaluator{Cache: &EvalCache{Dir: filepath.Join(t.TempDir(), "eval")}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eval := func(node, plan string) string {
		t.Helper()
		ev, err := e.Evaluate(ctx, node, f.spec(node, plan), plan)
		if err != nil || len(ev.Warnings) > 0 {
			t.Fatalf("evaluate %s: %v %v", node, err, ev.Warnings)
		}
		if _, err := os.Stat(ev.Derivation); err != nil || !strings.HasSuffix(ev.Derivation, ".drv") {
			t.Fatalf("evaluate %s: %s is not a derivation in the store: %v", node, ev.Derivation, err)
		}
		return ev.Derivation
	}
	both := func() (string, string) { return eval("web01", `{"n":1}`), eval("web02", `{"n":2}`) }
	web01, web02 := both()
	if evals() != 2 || web01 == web02 {
		t.Fatalf("a cold cache: %d nix evals (want 2), derivations %s %s", evals(), web01, web02)
	}
	if a, b := both(); a != web01 || b != web02 || evals() != 2 {
		t.Fatalf("an unchanged flake: %s %s after %d evals, want the same after 2", a, b, evals())
	}
	if ev, err := e.Evaluate(ctx, "web01", f.spec("web01", ""), ""); err != nil || ev.Derivation == web01 {
		t.Fatalf("without its node plan web01 gave %s (%v), want another derivation than with it", ev.Derivation, err)
	}
	if other := eval("web01", `{"n":3}`); other == web01 {
		t.Fatalf("another node plan gave the same derivation %s", other)
	}

	f.write(f.dir, "web01.nix", `"two"`)
	a, b := both()
	if a == web01 || b != web02 {
		t.Fatalf("an edit of web01's module: web01 %s (was %s), web02 %s (was %s); want only web01 changed", a, web01, b, web02)
	}
	web01 = a

	f.write(f.dir, "web01.nix", "# a comment nix does not see\n\"two\"")
	if a, b := both(); a != web01 || b != web02 {
		t.Fatalf("a comment-only edit changed a derivation: %s %s, want %s %s", a, b, web01, web02)
	}

	f.write(f.lib, "lib.nix", `"lib-two"`)
	if a, b := both(); a != web01 || b == web02 {
		t.Fatalf("an edit of the path: input lib: web01 %s (was %s), web02 %s (was %s); want only web02 changed", a, web01, b, web02)
	}

	f.write(f.dir, "web01.nix", `"two`)
	_, err := e.Evaluate(ctx, "web01", f.spec("web01", `{"n":1}`), `{"n":1}`)
	if err == nil || !strings.Contains(err.Error(), "path:"+f.dir) || !strings.Contains(err.Error(), "syntax error") {
		t.Fatalf("a syntax error gave %v, want an error naming the flake and nix's syntax error", err)
	}
}

// A node plan for a flake that does not declare the input it would go in is refused,
// naming the flake and the input to add.
func TestEvaluatorFlakeWithoutPlanInput(t *testing.T) {
	labtest.CountNixEvals(t)
	f := newTestFlake(t)
	src, _ := os.ReadFile(filepath.Join(f.dir, "flake.nix"))
	noPlan := strings.NewReplacer(`inputs.fediversity-node-plan = { url = "path:./no-node-plan"; flake = false; };`, "",
		"fediversity-node-plan, ", "", `builtins.readFile "${fediversity-node-plan}/node-plan.json"`, `""`).Replace(string(src))
	f.write(f.dir, "flake.nix", noPlan)
	e := &Evaluator{}
	if _, err := e.Evaluate(context.Background(), "web01", f.spec("web01", ""), ""); err != nil {
		t.Fatalf("without a node plan: %v", err)
	}
	_, err := e.Evaluate(context.Background(), "web01", f.spec("web01", `{"n":1}`), `{"n":1}`)
	if err == nil || !strings.Contains(err.Error(), "does not declare the input fediversity-node-plan") || !strings.Contains(err.Error(), f.dir) {
		t.Fatalf("a node plan the flake cannot take gave %v, want a refusal naming the flake and the input", err)
	}
}

// HandNodePlan gives a flake a directory holding only the plan, named by its content.
func TestHandNodePlanFlake(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	spec := nixstore.BuildSpec{Flake: "path:/x", Attr: "a"}
	cleanup, err := HandNodePlan(&spec, `{"n":1}`)
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(spec.PlanInput)
	if err != nil || len(entries) != 1 || entries[0].Name() != nixstore.NodePlanInputFile || spec.PlanFile != "" {
		t.Fatalf("plan input %s: %v %v, want only %s", spec.PlanInput, entries, err, nixstore.NodePlanInputFile)
	}
	again := nixstore.BuildSpec{Flake: "path:/x", Attr: "a"}
	if _, err := HandNodePlan(&again, `{"n":1}`); err != nil || again.PlanInput != spec.PlanInput {
		t.Fatalf("the same plan went to %s (%v), want %s", again.PlanInput, err, spec.PlanInput)
	}
}

// Issue 39, item 9: the flake is edited between the read its cache key is made of (nix
// flake metadata) and the evaluation. The evaluation reads the flake at its locked
// reference, the content the key covers, and an entry is stored only when the flake is
// unchanged after it: the cache never maps the key of one content to the derivation of
// another. On the current main the two reads were separate, and a later plan of the
// first content got the edited one's derivation from the cache.
func TestEvaluatorFlakeEditedDuringItsEvaluation(t *testing.T) {
	f := newTestFlake(t)
	real, err := exec.LookPath("nix")
	if err != nil {
		t.Fatal("nix is not installed (lab/install-host.sh installs it)")
	}
	wrapperDir := t.TempDir()
	once := filepath.Join(wrapperDir, "edited")
	wrapper := filepath.Join(wrapperDir, "nix")
	// The operator's edit lands right before the first evaluation starts.
	script := fmt.Sprintf("#!/bin/sh\nfor a in \"$@\"; do if [ \"$a\" = eval ] && [ ! -e %q ]; then touch %q; printf '%%s' '\"edited\"' >%q; fi; done\nexec %q \"$@\"\n",
		once, once, filepath.Join(f.dir, "web01.nix"), real)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	prev := nixstore.NixBin
	nixstore.NixBin = wrapper
	t.Cleanup(func() { nixstore.NixBin = prev })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := &Evaluator{Cache: &EvalCache{Dir: filepath.Join(t.TempDir(), "eval")}}
	if _, err := e.Evaluate(ctx, "web01", f.spec("web01", ""), ""); err != nil {
		t.Fatal(err)
	}
	// The operator puts the first content back: a plan of it must give its own
	// derivation, whatever the cache holds.
	f.write(f.dir, "web01.nix", `"one"`)
	got, err := e.Evaluate(ctx, "web01", f.spec("web01", ""), "")
	if err != nil {
		t.Fatal(err)
	}
	want, err := (&Evaluator{}).Evaluate(ctx, "web01", f.spec("web01", ""), "")
	if err != nil {
		t.Fatal(err)
	}
	if got.Derivation != want.Derivation {
		t.Fatalf("after the edit was undone the cache gave %s (%s), the flake evaluates to %s", got.Derivation, got.Cache, want.Derivation)
	}
}
