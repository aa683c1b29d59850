package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// Plan-time evaluation of a node's `build` block. The plan evaluates the block to its
// derivation (nix-instantiate) and records it in `derivation`; a derivation other than
// the state's plans a redeploy of that node, so an edit of the Nix source shows in the
// plan even though no attribute of the configuration changed. The apply builds exactly
// the derivation the plan recorded.
//
// Terraform and OpenTofu plan each resource again at apply, in a new provider process.
// The evaluation cache carries the plan's result across: that second plan, and the
// check at apply, are cache hits when the source is unchanged, so a node is evaluated
// once per run. When the source changed after a saved plan, that second plan evaluates
// to another derivation and the binary refuses the apply ("Provider produced
// inconsistent final plan", naming both derivations), after a warning of ours that
// says why (notePlanned); the check at apply refuses the same way should the source
// change later still, before anything reaches the node.

// nixEvaluator evaluates build blocks through the evaluation cache and builds
// derivations once per provider process. Made once in Configure (providerClients).
type nixEvaluator struct {
	// cache is nil when no cache directory can be named (no $XDG_CACHE_HOME nor $HOME).
	cache *deploybody.EvalCache
	// lastPlans holds, per node and working directory, the derivation the last plan not
	// yet applied evaluated: a plan that finds another one warns that a plan saved
	// earlier is stale. Nil with cache.
	lastPlans *deploybody.EvalCache
	// evals shares one nix-instantiate between nodes with the same cache key.
	evals nixstore.Flight
	// builds shares one build between nodes of the same derivation.
	builds nixstore.Flight
}

// evalCacheDir is where the evaluation cache lives: $XDG_CACHE_HOME/fediversity/eval,
// ~/.cache/fediversity/eval when XDG_CACHE_HOME is unset. Outside any state: deleting
// it only costs evaluations.
func evalCacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "fediversity", "eval"), nil
}

func newNixEvaluator() *nixEvaluator {
	e := &nixEvaluator{}
	if dir, err := evalCacheDir(); err == nil {
		// The default store check (the .drv file exists) is what matters here: an
		// entry naming a .drv a garbage collection removed is ignored.
		e.cache = &deploybody.EvalCache{Dir: dir}
		e.lastPlans = &deploybody.EvalCache{Dir: filepath.Join(filepath.Dir(dir), "last-plan")}
	}
	return e
}

// fallbackEvaluator serves a resource used without Configure (unit tests).
var fallbackEvaluator = newNixEvaluator()

func evaluatorFor(cfg *Config) *nixEvaluator {
	if cfg == nil || cfg.clients == nil || cfg.clients.nix == nil {
		return fallbackEvaluator
	}
	return cfg.clients.nix
}

// evaluationKey is the cache key of spec for a node plan: the node plan, the build's
// form and arguments, and a hash of the operator tree the build names (see
// nixstore.HashTree). Never the plan file's location: a per-run value when the
// cache directory is unusable (see nodePlanFile). Empty when the tree cannot be
// hashed; why says why.
func evaluationKey(spec nixstore.BuildSpec, nodePlan string) (key, why string) {
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
	return deploybody.MakeCacheKey("sha256:"+hex.EncodeToString(sum[:]), inputs), ""
}

// evaluate returns the derivation of spec for node: from the cache when it holds a
// usable entry, else from nix-instantiate (shared with other nodes of the same key
// evaluating at the same time). warnings are for the operator (an unwritable cache).
func (e *nixEvaluator) evaluate(ctx context.Context, node string, spec nixstore.BuildSpec, nodePlan string) (drv string, warnings []string, err error) {
	start := time.Now()
	key, why := evaluationKey(spec, nodePlan)
	if key == "" {
		tflog.Debug(ctx, "evaluation not cached", map[string]any{"node": node, "why": why})
	}
	if key != "" && e.cache != nil {
		if drv, ok, why := e.cache.Lookup(key); ok {
			tflog.Info(ctx, "node evaluated", map[string]any{"node": node, "derivation": drv, "cache": "hit", "seconds": time.Since(start).Seconds()})
			return drv, nil, nil
		} else if why != "" {
			tflog.Info(ctx, "evaluation cache entry ignored", map[string]any{"node": node, "why": why})
		}
	}
	flightKey := key
	if flightKey == "" {
		flightKey = "uncached " + node
	}
	drv, shared, err := e.evals.Do(ctx, flightKey, func() (string, error) { return nixstore.Instantiate(ctx, spec) })
	if err != nil {
		return "", nil, err
	}
	if key != "" && e.cache != nil && !shared {
		if err := e.cache.Store(key, drv, time.Now()); err != nil {
			warnings = append(warnings, fmt.Sprintf("The evaluation of node %s was not cached, so the next plan evaluates it again: %v. "+
				"Make the directory writable, or set XDG_CACHE_HOME to one that is.", node, err))
		}
	}
	tflog.Info(ctx, "node evaluated", map[string]any{"node": node, "derivation": drv, "cache": "miss", "shared": shared, "seconds": time.Since(start).Seconds()})
	return drv, warnings, nil
}

// evaluationError is the diagnostic of a failed evaluation: nix's message, the node,
// and the file (nix names the line).
func evaluationError(node string, spec nixstore.BuildSpec, err error) diag.Diagnostic {
	source := "build.expression"
	if spec.File != "" {
		source, _ = filepath.Abs(spec.File)
	}
	return diag.NewAttributeErrorDiagnostic(path.Root("build"), fmt.Sprintf("Unable to evaluate the system of node %s", node),
		failureDetail("Node "+node, "evaluate", fmt.Errorf("source %s: %w", source, err), "Fix the Nix source and plan again; nothing was deployed."))
}

// planDerivation is ModifyPlan's part for a `build` block: it evaluates the planned
// block and sets `derivation`. A derivation other than the state's plans a redeploy of
// this node (toplevel, generation and verdict become unknown).
func (r *nodeSwitchResource) planDerivation(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	var m nodeSwitchModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	at := path.Root("derivation")
	if m.Build == nil {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, at, types.StringNull())...)
		return
	}
	if buildUnknown(m) {
		// Known at apply (e.g. a node plan from a data source read then): the
		// evaluation happens in the apply's own plan.
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, at, types.StringUnknown())...)
		return
	}
	node := m.Node.ValueString()
	spec, cleanup, diags := buildSpec(m)
	defer cleanup()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, defaultDeployTimeout)
	defer cancel()
	drv, warnings, err := evaluatorFor(r.cfg).evaluate(ctx, node, spec, m.NodePlan.ValueString())
	for _, w := range warnings {
		resp.Diagnostics.AddWarning(fmt.Sprintf("Evaluation cache of %s", node), w)
	}
	if err != nil {
		resp.Diagnostics.Append(evaluationError(node, spec, err))
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, at, types.StringValue(drv))...)
	var prior types.String
	if !req.State.Raw.IsNull() {
		resp.Diagnostics.Append(req.State.GetAttribute(ctx, at, &prior)...)
	}
	if w := evaluatorFor(r.cfg).notePlanned(ctx, node, prior.ValueString(), drv); w != "" {
		resp.Diagnostics.AddAttributeWarning(at, fmt.Sprintf("The Nix source of %s changed since its last plan", node), w)
	}
	if req.State.Raw.IsNull() {
		return
	}
	if prior.ValueString() != drv {
		tflog.Info(ctx, "the node's derivation changed: redeploy planned", map[string]any{"node": node, "state": prior.ValueString(), "plan": drv})
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("toplevel"), types.StringUnknown())...)
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("generation"), types.Int64Unknown())...)
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("verdict"), types.ObjectUnknown(verdictAttrTypes))...)
	}
}

// buildUnknown tells whether what the evaluation reads from the configuration is not
// known yet.
func buildUnknown(m nodeSwitchModel) bool {
	b := m.Build
	if m.NodePlan.IsUnknown() || b.Installable.IsUnknown() || b.File.IsUnknown() || b.Attribute.IsUnknown() ||
		b.Expression.IsUnknown() || b.Args.IsUnknown() {
		return true
	}
	for _, v := range b.Args.Elements() {
		if v.IsUnknown() {
			return true
		}
	}
	return false
}

// plannedBuild is the apply's build of a `build` block: it evaluates the block again
// (a cache hit when the source is unchanged) and refuses when the result is not the
// derivation the plan recorded, naming both. The build function it returns realises
// that derivation, once per provider process however many nodes share it.
func (e *nixEvaluator) plannedBuild(ctx context.Context, node string, spec nixstore.BuildSpec, nodePlan, planned string) (func(context.Context) (string, error), diag.Diagnostics) {
	var diags diag.Diagnostics
	drv, warnings, err := e.evaluate(ctx, node, spec, nodePlan)
	for _, w := range warnings {
		diags.AddWarning(fmt.Sprintf("Evaluation cache of %s", node), w)
	}
	if err != nil {
		diags.Append(evaluationError(node, spec, err))
		return nil, diags
	}
	if planned != "" && drv != planned {
		diags.AddAttributeError(path.Root("derivation"), fmt.Sprintf("Refusing to deploy %s: its Nix source changed since the plan", node),
			failureDetail("Node "+node, "evaluate", fmt.Errorf("the plan evaluated the build to %s, the source now evaluates to %s", planned, drv),
				"Nothing was deployed. Plan again to deploy the current source."))
		return nil, diags
	}
	e.forgetPlanned(node)
	return func(ctx context.Context) (string, error) {
		top, shared, err := e.builds.Do(ctx, drv, func() (string, error) {
			return nixstore.Realise(ctx, drv, &tflogWriter{ctx: ctx, node: node})
		})
		tflog.Debug(ctx, "derivation built", map[string]any{"node": node, "derivation": drv, "toplevel": top, "shared": shared})
		return top, err
	}, diags
}

// nodePlanFile writes a node plan to a file named by its content, in the cache
// directory, and returns its path: the path the build is handed (--argstr planFile).
// A per-run temporary name would make a source that uses the path itself (not only
// the file's content) evaluate to a new derivation every run, i.e. a redeploy on every
// plan. The file is kept: a later build of the derivation may read it. An error means
// the caller falls back to a temporary file.
func nodePlanFile(content string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, "fediversity", "plans")
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

// lastPlanKey names the last-plan record of node in the working directory: the same
// node in another project is another record.
func lastPlanKey(node string) string {
	wd, _ := os.Getwd()
	return deploybody.MakeCacheKey("last-plan", map[string]string{"node": node, "dir": wd})
}

// notePlanned records that a plan evaluated node to drv. When the record held another
// derivation, the source changed since that plan: a plan saved then is stale, and
// Terraform and OpenTofu refuse its apply with an "inconsistent final plan" error.
// The returned warning says so in the provider's words, shown beside that error.
func (e *nixEvaluator) notePlanned(ctx context.Context, node, prior, drv string) string {
	if e.lastPlans == nil {
		return ""
	}
	if prior == drv {
		e.forgetPlanned(node) // nothing to apply
		return ""
	}
	key := lastPlanKey(node)
	last, ok, _ := e.lastPlans.Lookup(key)
	if err := e.lastPlans.Store(key, drv, time.Now()); err != nil {
		tflog.Debug(ctx, "last plan not recorded", map[string]any{"node": node, "error": err.Error()})
	}
	if !ok || last == drv {
		return ""
	}
	return fmt.Sprintf("Node %s: the last plan evaluated its build to %s, this one to %s. "+
		"A plan saved before the change cannot be applied (it would deploy a source that no longer exists): "+
		"Terraform and OpenTofu refuse it as an \"inconsistent final plan\" naming both derivations. Plan again and apply the new plan.",
		node, last, drv)
}

// forgetPlanned drops the last-plan record once the plan is applied (or planned no
// change), so the next edit of the source warns of nothing.
func (e *nixEvaluator) forgetPlanned(node string) {
	if e.lastPlans != nil {
		_ = e.lastPlans.Forget(lastPlanKey(node)) // a record left behind only risks a needless warning
	}
}
