package nixeval

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

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
	runs := labtest.CountNixInstantiate(t)
	src := filepath.Join(t.TempDir(), "node.nix")
	writeEvalSource(t, src, "one")
	e := &Evaluator{Cache: &EvalCache{Dir: filepath.Join(t.TempDir(), "eval")}}
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
		ev, err := e.Evaluate(ctx, "web01", spec(plan), plan)
		if err != nil || len(ev.Warnings) > 0 {
			t.Fatalf("evaluate: %v %v", err, ev.Warnings)
		}
		return ev.Derivation
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
	e.Cache.Dir = filepath.Join(blocker, "eval")
	ev, err := e.Evaluate(ctx, "web01", spec(`{"a":1}`), `{"a":1}`)
	if err != nil || ev.Derivation != edited || len(ev.Warnings) != 1 || !strings.Contains(ev.Warnings[0], "web01") {
		t.Fatalf("unwritable cache: %s %v %q, want the derivation and one warning naming the node", ev.Derivation, err, ev.Warnings)
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
	e := &Evaluator{LastPlans: &EvalCache{Dir: dir, StoreHas: func(p string) bool { return held[p] }}}
	if w := e.NotePlanned("web01", drv("a"), drv("b")); w != "" {
		t.Fatalf("a first plan warned: %s", w)
	}
	if w := e.NotePlanned("web01", drv("a"), drv("b")); w != "" {
		t.Fatalf("the same plan again warned: %s", w)
	}
	w := e.NotePlanned("web01", drv("a"), drv("c"))
	for _, want := range []string{"web01", drv("b"), drv("c"), "inconsistent final plan"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q does not say %q", w, want)
		}
	}
	e.ForgetPlanned("web01") // the apply
	if w := e.NotePlanned("web01", drv("c"), drv("b")); w != "" {
		t.Fatalf("a plan after an apply warned: %s", w)
	}
	if w := e.NotePlanned("web02", drv("a"), drv("c")); w != "" {
		t.Fatalf("another node's record was used: %s", w)
	}
}

// Planned refuses a derivation other than the planned one, naming both.
func TestPlannedRefusesAChangedSource(t *testing.T) {
	labtest.CountNixInstantiate(t)
	src := filepath.Join(t.TempDir(), "node.nix")
	writeEvalSource(t, src, "one")
	e := &Evaluator{Cache: &EvalCache{Dir: filepath.Join(t.TempDir(), "eval")}}
	spec := nixstore.BuildSpec{File: src, ArgStr: map[string]string{"seed": time.Now().Format(time.RFC3339Nano)}}
	ev, err := e.Planned(context.Background(), "web01", spec, "", "")
	if err != nil {
		t.Fatal(err)
	}
	writeEvalSource(t, src, "two")
	_, err = e.Planned(context.Background(), "web01", spec, "", ev.Derivation)
	var changed *ChangedError
	if !errors.As(err, &changed) || changed.Planned != ev.Derivation || changed.Now == ev.Derivation || !strings.Contains(err.Error(), changed.Now) {
		t.Fatalf("an edited source gave %v, want a ChangedError naming both derivations", err)
	}
}
