package kit

// Plan-time evaluation of a `build` block (every resource that builds a system): the
// plan evaluates the block to its derivation through the evaluation cache and records
// it; the apply evaluates again (a cache hit when the source is unchanged), refuses a
// derivation other than the plan's, and builds it once per provider process.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixeval"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// EvaluateTimeout bounds one plan-time evaluation (a deploy's default time-out: a
// plan has no timeouts block of its own).
const EvaluateTimeout = 30 * time.Minute

// fallbackEvaluator serves a resource used without Configure (unit tests).
var fallbackEvaluator = nixeval.New()

// EvaluatorFor is the configuration's evaluator (providerClients): its cache, and one
// evaluation per cache key and one build per derivation in this provider process.
func EvaluatorFor(cfg *Config) *nixeval.Evaluator {
	if cfg == nil || cfg.Clients == nil || cfg.Clients.Nix == nil {
		return fallbackEvaluator
	}
	return cfg.Clients.Nix
}

// LogEvaluation logs an evaluation's outcome: "node evaluated" with the derivation,
// cache hit or miss and the seconds it took.
func LogEvaluation(ctx context.Context, node string, ev nixeval.Evaluation, err error) {
	if ev.Ignored != "" {
		tflog.Info(ctx, "evaluation cache entry not used", map[string]any{"node": node, "why": ev.Ignored})
	}
	if err == nil || ev.Derivation != "" {
		tflog.Info(ctx, "node evaluated", map[string]any{"node": node, "derivation": ev.Derivation, "cache": ev.Cache, "shared": ev.Shared, "seconds": ev.Elapsed.Seconds()})
	}
}

// EvaluationError is the diagnostic of a failed evaluation: nix's message, the node,
// and the file (nix names the line).
func EvaluationError(node string, spec nixstore.BuildSpec, err error) diag.Diagnostic {
	source := "build.expression"
	switch {
	case spec.Flake != "":
		source = "flake " + spec.Flake + "#" + spec.Attr
	case spec.File != "":
		source, _ = filepath.Abs(spec.File)
	}
	return diag.NewAttributeErrorDiagnostic(path.Root("build"), fmt.Sprintf("Unable to evaluate the system of node %s", node),
		FailureDetail("Node "+node, "evaluate", fmt.Errorf("source %s: %w", source, err), "Fix the Nix source and plan again; nothing was deployed."))
}

// EvaluateBuild is the plan's evaluation of a build block (through the cache) to its
// derivation: what every resource with a `build` block records in `derivation`.
func EvaluateBuild(ctx context.Context, e *nixeval.Evaluator, node string, block *BuildModel, nodePlan string) (string, diag.Diagnostics) {
	spec, cleanup, diags := BuildSpecFor(node, block, nodePlan)
	defer cleanup()
	if diags.HasError() {
		return "", diags
	}
	ctx, cancel := context.WithTimeout(ctx, EvaluateTimeout)
	defer cancel()
	ev, err := e.Evaluate(ctx, node, spec, nodePlan)
	LogEvaluation(ctx, node, ev, err)
	for _, w := range ev.Warnings {
		diags.AddWarning(fmt.Sprintf("Evaluation cache of %s", node), w)
	}
	if err != nil {
		diags.Append(EvaluationError(node, spec, err))
		return "", diags
	}
	return ev.Derivation, diags
}

// BuildBlockUnknown tells whether a build block, or the node plan it is handed, is not
// known yet.
func BuildBlockUnknown(b *BuildModel, nodePlan types.String) bool {
	if nodePlan.IsUnknown() || b.Flake.IsUnknown() || b.Installable.IsUnknown() || b.File.IsUnknown() || b.Attribute.IsUnknown() ||
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

// PlannedBuild is the apply's build of a `build` block: it evaluates the block again
// (a cache hit when the source is unchanged) and refuses when the result is not the
// derivation the plan recorded, naming both. The build function it returns realises
// that derivation, once per provider process however many nodes share it.
func PlannedBuild(ctx context.Context, e *nixeval.Evaluator, node string, spec nixstore.BuildSpec, nodePlan, planned string) (func(context.Context) (string, error), diag.Diagnostics) {
	var diags diag.Diagnostics
	ev, err := e.Planned(ctx, node, spec, nodePlan, planned)
	LogEvaluation(ctx, node, ev, err)
	for _, w := range ev.Warnings {
		diags.AddWarning(fmt.Sprintf("Evaluation cache of %s", node), w)
	}
	var changed *nixeval.ChangedError
	if errors.As(err, &changed) {
		diags.AddAttributeError(path.Root("derivation"), fmt.Sprintf("Refusing to deploy %s: its Nix source changed since the plan", node),
			FailureDetail("Node "+node, "evaluate", fmt.Errorf("the plan evaluated the build to %s, the source now evaluates to %s", changed.Planned, changed.Now),
				"Nothing was deployed. Plan again to deploy the current source."))
		return nil, diags
	}
	if err != nil {
		diags.Append(EvaluationError(node, spec, err))
		return nil, diags
	}
	drv := ev.Derivation
	return func(ctx context.Context) (string, error) {
		top, shared, err := e.Build(ctx, drv, &TflogWriter{Ctx: ctx, Node: node})
		tflog.Debug(ctx, "derivation built", map[string]any{"node": node, "derivation": drv, "toplevel": top, "shared": shared})
		return top, err
	}, diags
}
