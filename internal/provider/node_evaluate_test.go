package provider

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// countNixInstantiate points nixstore at a wrapper around the real nix-instantiate that
// appends a line to a file per run, and returns a function reading the count. The
// evaluations are real; only their number is observed.
func countNixInstantiate(t *testing.T) func() int {
	t.Helper()
	real, err := exec.LookPath("nix-instantiate")
	if err != nil {
		if os.Getenv("FEDIVERSITY_LAB") == "1" {
			t.Fatalf("nix-instantiate is not installed (lab/install-host.sh installs it): %v", err)
		}
		t.Skip("nix-instantiate is not installed on this machine")
	}
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	wrapper := filepath.Join(dir, "nix-instantiate")
	script := fmt.Sprintf("#!/bin/sh\necho run >>%q\nexec %q \"$@\"\n", count, real)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	prev := nixstore.NixInstantiateBin
	nixstore.NixInstantiateBin = wrapper
	t.Cleanup(func() { nixstore.NixInstantiateBin = prev })
	return func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "run\n")
	}
}

const evalTestSource = `{ planFile ? "", seed ? "" }: derivation {
  name = "eval-test"; system = builtins.currentSystem; builder = "/bin/sh"; inherit seed;
  plan = if planFile == "" then "" else builtins.readFile planFile;
  args = [ "-c" "echo %s > $out" ];
}
`

func writeEvalSource(t *testing.T, file, value string) {
	t.Helper()
	if err := os.WriteFile(file, []byte(strings.Replace(evalTestSource, "%s", value, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The evaluation cache: a hit runs no nix; an edit of the tree evaluates again; the
// per-run plan file location is not part of the key; an entry whose derivation was
// garbage-collected is ignored; a cache that cannot be written is a warning only.
func TestEvaluatorCache(t *testing.T) {
	runs := countNixInstantiate(t)
	src := filepath.Join(t.TempDir(), "node.nix")
	writeEvalSource(t, src, "one")
	e := &nixEvaluator{cache: &deploybody.EvalCache{Dir: filepath.Join(t.TempDir(), "eval")}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seed := time.Now().Format(time.RFC3339Nano) // a derivation no earlier run left in the store
	spec := func(plan string) nixstore.BuildSpec {
		f := filepath.Join(t.TempDir(), "node-plan.json") // a new location every time, as in a run
		if err := os.WriteFile(f, []byte(plan), 0o600); err != nil {
			t.Fatal(err)
		}
		return nixstore.BuildSpec{File: src, PlanFile: f, ArgStr: map[string]string{"seed": seed}}
	}
	eval := func(plan string) string {
		t.Helper()
		drv, warnings, err := e.evaluate(ctx, "web01", spec(plan), plan)
		if err != nil || len(warnings) > 0 {
			t.Fatalf("evaluate: %v %v", err, warnings)
		}
		return drv
	}

	drv := eval(`{"a":1}`)
	if runs() != 1 {
		t.Fatalf("a cold cache ran nix-instantiate %d times, want 1", runs())
	}
	if again := eval(`{"a":1}`); again != drv || runs() != 1 {
		t.Fatalf("a warm cache gave %s after %d runs, want %s after 1", again, runs(), drv)
	}
	if other := eval(`{"a":2}`); other == drv || runs() != 2 {
		t.Fatalf("another node plan gave %s after %d runs, want a new derivation after 2", other, runs())
	}
	writeEvalSource(t, src, "two")
	edited := eval(`{"a":1}`)
	if edited == drv || runs() != 3 {
		t.Fatalf("an edited source gave %s after %d runs, want a new derivation after 3", edited, runs())
	}

	// Garbage-collected: the entry names a .drv the store no longer holds.
	if out, err := exec.Command("nix-store", "--delete", edited).CombinedOutput(); err != nil {
		t.Fatalf("nix-store --delete %s: %v\n%s", edited, err, out)
	}
	if got := eval(`{"a":1}`); got != edited || runs() != 4 {
		t.Fatalf("after the .drv was collected: %s after %d runs, want %s evaluated again (4 runs)", got, runs(), edited)
	}
	if _, err := os.Stat(edited); err != nil {
		t.Fatalf("the evaluation did not put the .drv back: %v", err)
	}

	// A cache directory under a regular file cannot be made.
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.cache.Dir = filepath.Join(blocker, "eval")
	got, warnings, err := e.evaluate(ctx, "web01", spec(`{"a":1}`), `{"a":1}`)
	if err != nil || got != edited || len(warnings) != 1 || !strings.Contains(warnings[0], "web01") {
		t.Fatalf("unwritable cache: %s %v %q, want the derivation and one warning naming the node", got, err, warnings)
	}
}

// An evaluation error carries nix's message and names the node and the file.
func TestEvaluationErrorNamesNodeAndFile(t *testing.T) {
	countNixInstantiate(t)
	src := filepath.Join(t.TempDir(), "node.nix")
	if err := os.WriteFile(src, []byte("{ }: derivation { name = "), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &nixEvaluator{}
	spec := nixstore.BuildSpec{File: src}
	_, _, err := e.evaluate(context.Background(), "web01", spec, "")
	if err == nil {
		t.Fatal("a syntax error evaluated")
	}
	d := evaluationError("web01", spec, err)
	text := d.Summary() + " " + d.Detail()
	for _, want := range []string{"web01", src, "syntax error"} {
		if !strings.Contains(text, want) {
			t.Errorf("diagnostic %q does not say %q", text, want)
		}
	}
}

// A plan that finds another derivation than the last plan of the node (not applied
// since) warns that a plan saved then is stale; an applied plan leaves no record.
func TestEvaluatorWarnsOfStaleSavedPlan(t *testing.T) {
	dir := t.TempDir()
	drv := func(name string) string {
		p := "/nix/store/" + strings.Repeat("a", 31) + name + "-x.drv"
		return p
	}
	held := map[string]bool{drv("b"): true, drv("c"): true}
	e := &nixEvaluator{lastPlans: &deploybody.EvalCache{Dir: dir, StoreHas: func(p string) bool { return held[p] }}}
	ctx := context.Background()
	if w := e.notePlanned(ctx, "web01", drv("a"), drv("b")); w != "" {
		t.Fatalf("a first plan warned: %s", w)
	}
	if w := e.notePlanned(ctx, "web01", drv("a"), drv("b")); w != "" {
		t.Fatalf("the same plan again warned: %s", w)
	}
	w := e.notePlanned(ctx, "web01", drv("a"), drv("c"))
	for _, want := range []string{"web01", drv("b"), drv("c"), "inconsistent final plan"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q does not say %q", w, want)
		}
	}
	e.forgetPlanned("web01") // the apply
	if w := e.notePlanned(ctx, "web01", drv("c"), drv("b")); w != "" {
		t.Fatalf("a plan after an apply warned: %s", w)
	}
	if w := e.notePlanned(ctx, "web02", drv("a"), drv("c")); w != "" {
		t.Fatalf("another node's record was used: %s", w)
	}
}

// The node plan reaches the build at a path named by its content, so a source that
// uses the path itself (not only the file's content) evaluates to the same derivation
// every run instead of planning a redeploy every time.
func TestNodePlanFileIsTheSameEveryRun(t *testing.T) {
	countNixInstantiate(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	src := filepath.Join(t.TempDir(), "node.nix")
	if err := os.WriteFile(src, []byte(`{ planFile }: derivation { name = "plan-path"; system = builtins.currentSystem;
  builder = "/bin/sh"; args = [ "-c" "cat ${planFile} > $out" ]; }`), 0o644); err != nil {
		t.Fatal(err)
	}
	m := nodeSwitchModel{
		Node: types.StringValue("web01"), NodePlan: types.StringValue(`{"domain":"a.example"}`),
		Build: &buildModel{File: types.StringValue(src), Args: types.MapNull(types.StringType)},
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
