// Package nixeval evaluates a node's build to its derivation through the evaluation
// cache, and builds derivations once per process: what the provider's plan and apply
// and the fediversity command share, so a node unchanged since its last evaluation runs
// no nix, in either front end.
//
// The cache key is the node plan, the build's form (file or expression), file,
// attribute and arguments, NIX_PATH, and a hash of the operator tree the build names
// (nixstore.HashTree): never a per-run value. The cache lives in
// $XDG_CACHE_HOME/fediversity/eval (~/.cache/fediversity/eval), outside any state.
//
// It must not import the plugin framework.
package nixeval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// Evaluator evaluates builds through the cache and shares evaluations and builds
// between the nodes of one process. Make one per process (or provider configuration).
type Evaluator struct {
	// Cache is nil when no cache directory can be named (no $XDG_CACHE_HOME nor $HOME).
	Cache *EvalCache
	// LastPlans holds, per node and working directory, the derivation the last plan not
	// yet applied evaluated (see NotePlanned). Nil with Cache.
	LastPlans *EvalCache

	evals  nixstore.Flight // one nix-instantiate per cache key at a time
	builds nixstore.Flight // one build per derivation at a time
}

// CacheDir is the base of what this package keeps: $XDG_CACHE_HOME/fediversity,
// ~/.cache/fediversity when XDG_CACHE_HOME is unset.
func CacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "fediversity"), nil
}

// New makes an Evaluator with the cache under CacheDir (eval/, last-plan/).
func New() *Evaluator {
	e := &Evaluator{}
	if dir, err := CacheDir(); err == nil {
		// The default store check (the .drv file exists) is what matters here: an
		// entry naming a .drv a garbage collection removed is ignored.
		e.Cache = &EvalCache{Dir: filepath.Join(dir, "eval")}
		e.LastPlans = &EvalCache{Dir: filepath.Join(dir, "last-plan")}
	}
	return e
}

// Key is the cache key of spec for a node plan. Never the plan file's location: a
// per-run value when the cache directory is unusable (see NodePlanFile). Empty when
// the tree cannot be hashed; why says why.
func Key(spec nixstore.BuildSpec, nodePlan string) (key, why string) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err.Error()
	}
	root, err := nixstore.SourceRoot(spec, wd)
	if err != nil {
		return "", err.Error() // nix-instantiate will say what is wrong with the file
	}
	tree, err := nixstore.HashTree(root)
	if err != nil {
		return "", err.Error()
	}
	inputs := map[string]string{
		"form":     "file",
		"file":     spec.File,
		"attr":     spec.Attr,
		"tree":     root + " " + tree,
		"nix_path": os.Getenv("NIX_PATH"), // <nixpkgs> and friends
	}
	if spec.File != "" {
		inputs["file"], _ = filepath.Abs(spec.File)
	} else {
		inputs["form"], inputs["expression"] = "expression", spec.Expr
	}
	for k, v := range spec.ArgStr {
		inputs["argstr "+k] = v
	}
	sum := sha256.Sum256([]byte(nodePlan))
	return MakeCacheKey("sha256:"+hex.EncodeToString(sum[:]), inputs), ""
}

// Evaluation is the result of Evaluate.
type Evaluation struct {
	Derivation string
	// Cache is "hit", "miss", or "off" (no key: the tree could not be hashed, or no
	// cache directory).
	Cache string
	// Ignored says why an existing cache entry was not used (e.g. its .drv was
	// garbage-collected); empty when none was ignored.
	Ignored string
	// Shared tells that another node's evaluation of the same key was taken.
	Shared  bool
	Elapsed time.Duration
	// Warnings are for the operator (an unwritable cache).
	Warnings []string
}

// Evaluate returns the derivation of spec for node: from the cache when it holds a
// usable entry, else from nix-instantiate (shared with other nodes of the same key
// evaluating at the same time), recorded in the cache. A cache that cannot be written
// is a warning, never an error.
func (e *Evaluator) Evaluate(ctx context.Context, node string, spec nixstore.BuildSpec, nodePlan string) (Evaluation, error) {
	start := time.Now()
	ev := Evaluation{Cache: "off"}
	key, why := Key(spec, nodePlan)
	if key == "" {
		ev.Ignored = why
	}
	if key != "" && e.Cache != nil {
		ev.Cache = "miss"
		drv, ok, why := e.Cache.Lookup(key)
		if ok {
			ev.Derivation, ev.Cache, ev.Elapsed = drv, "hit", time.Since(start)
			return ev, nil
		}
		ev.Ignored = why
	}
	flightKey := key
	if flightKey == "" {
		flightKey = "uncached " + node
	}
	drv, shared, err := e.evals.Do(ctx, flightKey, func() (string, error) { return nixstore.Instantiate(ctx, spec) })
	if err != nil {
		return ev, err
	}
	ev.Derivation, ev.Shared = drv, shared
	if ev.Cache == "miss" && !shared {
		if err := e.Cache.Store(key, drv, time.Now()); err != nil {
			ev.Warnings = append(ev.Warnings, fmt.Sprintf("The evaluation of node %s was not cached, so the next run evaluates it again: %v. "+
				"Make the directory writable, or set XDG_CACHE_HOME to one that is.", node, err))
		}
	}
	ev.Elapsed = time.Since(start)
	return ev, nil
}

// Build realises drv and returns its output (the toplevel), once per process however
// many nodes ask for it at the same time. shared tells a caller it got another's build.
func (e *Evaluator) Build(ctx context.Context, drv string, log io.Writer) (toplevel string, shared bool, err error) {
	return e.builds.Do(ctx, drv, func() (string, error) { return nixstore.Realise(ctx, drv, log) })
}

// ChangedError is a refusal to build: the source evaluates to another derivation than
// the one planned.
type ChangedError struct {
	Node, Planned, Now string
}

func (c *ChangedError) Error() string {
	return fmt.Sprintf("the plan evaluated the build of %s to %s, the source now evaluates to %s", c.Node, c.Planned, c.Now)
}

// Planned evaluates spec again (a cache hit when the source is unchanged) and returns
// the derivation to build: planned, or a *ChangedError when the source now evaluates to
// another one. An empty planned takes what the evaluation gives.
func (e *Evaluator) Planned(ctx context.Context, node string, spec nixstore.BuildSpec, nodePlan, planned string) (Evaluation, error) {
	ev, err := e.Evaluate(ctx, node, spec, nodePlan)
	if err != nil {
		return ev, err
	}
	if planned != "" && ev.Derivation != planned {
		return ev, &ChangedError{Node: node, Planned: planned, Now: ev.Derivation}
	}
	e.ForgetPlanned(node)
	return ev, nil
}

// lastPlanKey names the last-plan record of node in the working directory: the same
// node in another project is another record.
func lastPlanKey(node string) string {
	wd, _ := os.Getwd()
	return MakeCacheKey("last-plan", map[string]string{"node": node, "dir": wd})
}

// NotePlanned records that a plan evaluated node to drv, planned from the state's
// derivation prior. When the record held another derivation, the source changed since
// that plan: a plan saved then is stale, and Terraform and OpenTofu refuse its apply
// with an "inconsistent final plan" error. The returned warning says so in the
// provider's words, shown beside that error; empty when there is nothing to say.
func (e *Evaluator) NotePlanned(node, prior, drv string) string {
	if e.LastPlans == nil {
		return ""
	}
	if prior == drv {
		e.ForgetPlanned(node) // nothing to apply
		return ""
	}
	key := lastPlanKey(node)
	last, ok, _ := e.LastPlans.Lookup(key)
	// Not recorded: the next plan may miss a stale saved plan, the apply still refuses it.
	_ = e.LastPlans.Store(key, drv, time.Now())
	if !ok || last == drv {
		return ""
	}
	return fmt.Sprintf("Node %s: the last plan evaluated its build to %s, this one to %s. "+
		"A plan saved before the change cannot be applied (it would deploy a source that no longer exists): "+
		"Terraform and OpenTofu refuse it as an \"inconsistent final plan\" naming both derivations. Plan again and apply the new plan.",
		node, last, drv)
}

// ForgetPlanned drops the last-plan record once the plan is applied (or planned no
// change), so the next edit of the source warns of nothing.
func (e *Evaluator) ForgetPlanned(node string) {
	if e.LastPlans != nil {
		_ = e.LastPlans.Forget(lastPlanKey(node)) // a record left behind only risks a needless warning
	}
}

// WriteNodePlan writes the node plan the build is handed (--argstr planFile): to the
// file named by its content (NodePlanFile), or, when the cache directory is unusable, to
// a private temporary file that cleanup removes. The one node-plan writer of both
// front ends. cleanup is never nil.
func WriteNodePlan(content string) (file string, cleanup func(), err error) {
	cleanup = func() {}
	if file, err := NodePlanFile(content); err == nil {
		return file, cleanup, nil // the same path every run: see NodePlanFile
	}
	dir, err := os.MkdirTemp("", "fediversity-plan-")
	if err != nil {
		return "", cleanup, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	file = filepath.Join(dir, "node-plan.json")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		return "", cleanup, err
	}
	return file, cleanup, nil
}

// NodePlanFile writes a node plan to a file named by its content, under CacheDir
// (plans/), and returns its path: the path the build is handed (--argstr planFile). A
// per-run temporary name would make a source that uses the path itself (not only the
// file's content) evaluate to a new derivation every run, i.e. a redeploy on every
// plan. The file is kept: a later build of the derivation may read it. An error means
// the caller falls back to a temporary file.
func NodePlanFile(content string) (string, error) {
	base, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, "plans")
	sum := sha256.Sum256([]byte(content))
	file := filepath.Join(dir, hex.EncodeToString(sum[:])+".json")
	if b, err := os.ReadFile(file); err == nil && string(b) == content {
		return file, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".plan-*")
	if err != nil {
		return "", err
	}
	_, err = tmp.WriteString(content)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err != nil {
		_ = os.Remove(tmp.Name()) // ours; the caller falls back to a temporary file
		return "", err
	}
	return file, nil
}
