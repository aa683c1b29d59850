// Package nixeval evaluates a node's build to its derivation through the evaluation
// cache, and builds derivations once per process: what the provider's plan and apply
// and the fediversity command share, so a node unchanged since its last evaluation runs
// no nix, in either front end.
//
// The cache key of a file or expression build is the node plan, the build's form,
// file, attribute and arguments, NIX_PATH and what each entry resolves to, and a hash
// of the operator's repository through symbolic links (Key); of a flake, the node
// plan, the attribute and the locked narHash of the flake and each input (flakeKey):
// never a per-run value. The cache lives in
// $XDG_CACHE_HOME/fediversity/eval (~/.cache/fediversity/eval), outside any state.
//
// It must not import the plugin framework.
package nixeval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// Evaluator evaluates builds through the cache and shares evaluations and builds
// between the nodes of one process. Make one per process (or provider configuration).
type Evaluator struct {
	// Cache is nil when no cache directory can be named (no $XDG_CACHE_HOME nor $HOME),
	// or when the directory is not trusted (see New).
	Cache *EvalCache
	// LastPlans holds, per node and working directory, the derivation the last plan not
	// yet applied evaluated (see NotePlanned). Nil with Cache.
	LastPlans *EvalCache
	// Distrust says why the cache directory is not used; given once as a warning.
	Distrust string

	evals  nixstore.Flight // one nix-instantiate per cache key at a time
	builds nixstore.Flight // one build per derivation at a time
	flakes nixstore.Flight // one nix flake metadata per flake at a time
	trees  nixstore.Flight // one hash of a source tree at a time
	warned sync.Once

	mu    sync.Mutex
	built map[string]string // derivation → output, built by this process
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

// New makes an Evaluator with the cache under CacheDir (eval/, last-plan/). The cache
// is used only when it is ours (TrustedDir): an entry names the derivation the plan
// deploys, so whoever can write it chooses what a node runs.
func New() *Evaluator {
	e := &Evaluator{}
	dir, err := CacheDir()
	if err != nil {
		return e
	}
	for _, d := range []string{dir, filepath.Join(dir, "eval"), filepath.Join(dir, "last-plan")} {
		if why := TrustedDir(d); why != "" {
			e.Distrust = fmt.Sprintf("The evaluation cache is not used, so every node is evaluated: %s. "+
				"Make it yours and not writable by group or others (chmod go-w), or set XDG_CACHE_HOME to a directory that is.", why)
			return e
		}
	}
	// An entry is used only when it names a derivation the store still holds: one a
	// garbage collection removed is ignored, and so is anything not a .drv store path.
	e.Cache = &EvalCache{Dir: filepath.Join(dir, "eval"), StoreHas: storeHasDerivation}
	e.LastPlans = &EvalCache{Dir: filepath.Join(dir, "last-plan"), StoreHas: storeHasDerivation}
	return e
}

// storeHasDerivation accepts only an existing /nix/store/<hash>-<name>.drv.
func storeHasDerivation(p string) bool {
	if !nixstore.ValidStorePath(p) || !strings.HasSuffix(p, ".drv") || strings.Count(p, "/") != 3 {
		return false
	}
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().IsRegular()
}

// TrustedDir says why the directory d must not be trusted: not owned by the running
// user, or writable by group or others. Empty when it is trusted, or does not exist
// yet (the cache creates it, as ours).
func TrustedDir(d string) string {
	fi, err := os.Lstat(d)
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		return err.Error()
	}
	if !fi.IsDir() {
		return d + " is not a directory"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Sprintf("%s is owned by uid %d, not by the running user (uid %d)", d, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Sprintf("%s is writable by group or others (mode %v)", d, fi.Mode().Perm())
	}
	return ""
}

// Key is the cache key of a file or expression build for a node plan. Never the plan
// file's location: a per-run value when the cache directory is unusable (see
// NodePlanFile). Empty when the tree cannot be hashed; why says why.
//
// What the evaluation reads is covered by hashing: the operator's repository (or the
// file's directory outside one) through symbolic links (nixstore.SourceRoot,
// HashTree), and each NIX_PATH entry by what it resolves to (HashNixPath).
func Key(spec nixstore.BuildSpec, nodePlan string) (key, why string) {
	return fileKey(spec, nodePlan, nixstore.HashTree)
}

// fileKey is Key with the tree hashed by hashTree.
func fileKey(spec nixstore.BuildSpec, nodePlan string, hashTree func(root string) (string, error)) (key, why string) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err.Error()
	}
	root, err := nixstore.SourceRoot(spec, wd)
	if err != nil {
		return "", err.Error() // nix-instantiate will say what is wrong with the file
	}
	tree, err := hashTree(root)
	if err != nil {
		return "", err.Error()
	}
	nixPath, err := nixstore.HashNixPath(os.Getenv("NIX_PATH"))
	if err != nil {
		return "", err.Error()
	}
	inputs := map[string]string{
		"form":        "file",
		"file":        spec.File,
		"attr":        spec.Attr,
		"tree":        root + " " + tree,
		"nix_path":    os.Getenv("NIX_PATH"),
		"nix_path_to": nixPath, // <nixpkgs> and friends, by what they reach
	}
	if spec.File != "" {
		inputs["file"], _ = filepath.Abs(spec.File)
	} else {
		inputs["form"], inputs["expression"] = "expression", spec.Expr
	}
	for k, v := range spec.ArgStr {
		inputs["argstr "+k] = v
	}
	return MakeCacheKey(planDigest(nodePlan), inputs), ""
}

func planDigest(nodePlan string) string {
	sum := sha256.Sum256([]byte(nodePlan))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// FlakeError is a flake build that cannot be evaluated as asked; its message names the
// flake and says what to do.
type FlakeError struct{ Msg string }

func (f *FlakeError) Error() string { return f.Msg }

// flakeKey is the cache key of a flake build: the flake's locked identity (the narHash
// of the flake and of each input, from nix flake metadata: they cover every file of
// each, so no file the evaluation may read is left out: a pure evaluation reads
// nothing else), the attribute and the node plan. nix flake metadata runs once per
// flake at a time, shared by the nodes asking together.
//
// It also returns the identity: the evaluation reads the flake at its locked reference
// (id.Locked), the content the key was made of; and, since a flake whose reference nix
// cannot lock to content (a git tree with changes not committed) is read as it is when
// evaluated, the identity is read again after a miss's evaluation, and the entry
// stored only when it is unchanged (Evaluate).
func (e *Evaluator) flakeKey(ctx context.Context, spec nixstore.BuildSpec, nodePlan string) (string, nixstore.FlakeIdentity, error) {
	out, _, err := e.flakes.Do(ctx, spec.Flake, func() (string, error) {
		id, err := nixstore.FlakeMetadata(ctx, spec.Flake)
		if err != nil {
			return "", err
		}
		b, err := json.Marshal(id)
		return string(b), err
	})
	if err != nil {
		return "", nixstore.FlakeIdentity{}, err
	}
	var id nixstore.FlakeIdentity
	if err := json.Unmarshal([]byte(out), &id); err != nil {
		return "", id, err
	}
	if nodePlan != "" && !id.TakesNodePlan {
		return "", id, &FlakeError{Msg: fmt.Sprintf("the flake %s does not declare the input %s, so the node plan cannot reach it; "+
			"add inputs.%s = { url = \"path:./no-node-plan\"; flake = false; } (a directory holding node-plan.json) and read "+
			"\"${%s}/%s\", or leave node_plan out", spec.Flake, nixstore.NodePlanInput, nixstore.NodePlanInput, nixstore.NodePlanInput, nixstore.NodePlanInputFile)}
	}
	return MakeCacheKey(planDigest(nodePlan), map[string]string{
		"form":  "flake",
		"flake": spec.Flake,
		"attr":  spec.Attr,
		"locks": id.String(),
	}), id, nil
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
	e.warned.Do(func() {
		if e.Distrust != "" {
			ev.Warnings = append(ev.Warnings, e.Distrust)
		}
	})
	var key, why string
	var flake nixstore.FlakeIdentity
	if spec.Flake != "" {
		var err error
		if key, flake, err = e.flakeKey(ctx, spec, nodePlan); err != nil {
			return ev, err
		}
		spec.FlakeLocked = flake.Locked
	} else if key, why = fileKey(spec, nodePlan, func(root string) (string, error) {
		// The nodes of one repository planning together hash it once.
		tree, _, err := e.trees.Do(ctx, root, func() (string, error) { return nixstore.HashTree(root) })
		return tree, err
	}); key == "" {
		ev.Ignored = why
	}
	if key != "" && e.Cache != nil {
		ev.Cache = "miss"
		drv, ok, why := e.Cache.Lookup(key)
		if ok {
			ev.Derivation, ev.Cache, ev.Elapsed = drv, "hit", time.Since(start) // warnings kept
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
	if ev.Cache == "miss" && !shared && spec.Flake != "" {
		// The flake may have been edited between its metadata and the evaluation, if
		// nix could not lock it to content: key(A) must never name drv(B).
		if now, err := nixstore.FlakeMetadata(ctx, spec.Flake); err != nil || now.String() != flake.String() {
			ev.Cache, ev.Ignored = "off", fmt.Sprintf("the flake %s changed while it was evaluated: not cached", spec.Flake)
		}
	}
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
// many nodes or images ask for it, at the same time or later (while the output is in
// the store). shared tells a caller it got another's build.
func (e *Evaluator) Build(ctx context.Context, drv string, log io.Writer) (toplevel string, shared bool, err error) {
	e.mu.Lock()
	out, ok := e.built[drv]
	e.mu.Unlock()
	if _, err := os.Stat(out); ok && err == nil {
		return out, true, nil // built earlier in this process, and still there
	}
	out, shared, err = e.builds.Do(ctx, drv, func() (string, error) { return nixstore.Realise(ctx, drv, log) })
	if err == nil {
		e.mu.Lock()
		if e.built == nil {
			e.built = map[string]string{}
		}
		e.built[drv] = out
		e.mu.Unlock()
	}
	return out, shared, err
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

// HandNodePlan writes the node plan where spec's build reads it: for a file or
// expression, the file --argstr planFile names (WriteNodePlan); for a flake, the
// directory its node plan input is overridden with (WriteNodePlanInput). The one way
// both front ends hand a build its plan. cleanup is never nil.
func HandNodePlan(spec *nixstore.BuildSpec, content string) (cleanup func(), err error) {
	if spec.Flake != "" {
		dir, cleanup, err := WriteNodePlanInput(content)
		spec.PlanInput = dir
		return cleanup, err
	}
	file, cleanup, err := WriteNodePlan(content)
	spec.PlanFile = file
	return cleanup, err
}

// WriteNodePlanInput writes the node plan as a flake input: a directory holding only
// node-plan.json, named by its content under CacheDir (plan-inputs/<sha256>), or,
// when the cache directory is unusable, a private temporary one that cleanup removes.
// Its store copy (and so the derivation) depends on the content alone, not on where
// the directory is.
func WriteNodePlanInput(content string) (dir string, cleanup func(), err error) {
	cleanup = func() {}
	if base, err := CacheDir(); err == nil {
		sum := sha256.Sum256([]byte(content))
		dir = filepath.Join(base, "plan-inputs", hex.EncodeToString(sum[:]))
		if b, err := os.ReadFile(filepath.Join(dir, nixstore.NodePlanInputFile)); err == nil && string(b) == content {
			return dir, cleanup, nil
		}
		if err := writePlanInput(filepath.Dir(dir), dir, content); err == nil {
			return dir, cleanup, nil
		}
	}
	tmp, err := os.MkdirTemp("", "fediversity-plan-")
	if err != nil {
		return "", cleanup, err
	}
	cleanup = func() { _ = os.RemoveAll(tmp) }
	dir = filepath.Join(tmp, "node-plan")
	return dir, cleanup, writePlanInput(tmp, dir, content)
}

// writePlanInput makes dir (under parent) hold only the plan, renamed into place
// whole so no evaluation sees half of it.
func writePlanInput(parent, dir, content string) error {
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, ".plan-")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, nixstore.NodePlanInputFile), []byte(content), 0o600); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	_ = os.RemoveAll(dir) // a stale or partial one; renamed over below
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	return nil
}
