package node

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// The structured verdict shared by fediversity_node_switch and fediversity_verdict.
//
// Every verdict class (docs/design.md#verdict-classes) is a list of unit names, so HCL can test it
// (`length(x.verdict.failed) == 0`). A list that could not be read (the system bus did
// not answer) is null, never empty: `unread` is then true and `unread_sources` says what
// was missing.

var stringList = types.ListType{ElemType: types.StringType}

// verdictAttrTypes are the attribute types of the verdict object.
var verdictAttrTypes = map[string]attr.Type{
	"ok":                    types.BoolType,
	"strict":                types.BoolType,
	"verdict_only":          types.BoolType,
	"system_state":          types.StringType,
	"unreachable":           types.BoolType,
	"unread":                types.BoolType,
	"unread_sources":        stringList,
	"samples":               types.Int64Type,
	"answered":              types.Int64Type,
	"failed":                stringList,
	"failed_new":            stringList,
	"failed_before_switch":  stringList,
	"set_aside":             stringList,
	"restart_loop":          stringList,
	"restart_loop_past":     stringList,
	"cycling":               stringList,
	"stale_jobs":            stringList,
	"never_spawned_closure": stringList,
	"never_spawned_host":    stringList,
	"skipped":               stringList,
	"restarted":             stringList,
	"not_restarted":         stringList,
	"reasons":               stringList,
	"switch_exit_code":      types.Int64Type,
	"switch_result":         types.StringType,
	"switch_reconnected":    types.BoolType,
	"confirmed":             types.BoolType,
	"boot_reverted":         types.BoolType,
	"activation":            types.StringType,
	"rebooted":              types.BoolType,
	"phase_timings":         types.MapType{ElemType: types.StringType},
	"report":                types.StringType,
	"checks":                checkResultListType,
}

var verdictObjectType = types.ObjectType{AttrTypes: verdictAttrTypes}

// verdictAttributeDocs documents each verdict attribute (also used by the schema test to
// prove that the schema and verdictAttrTypes agree).
var verdictAttributeDocs = map[string]string{
	"activation":            "How the node came to run the judged system: `switched` (with `; systemd re-executed by the switch (a new systemd needs no reboot)` when the switch re-executed PID 1); `rebooted (<why>); boot took <duration>` (why: `kernel, initrd, kernel-modules changed`, `reboot-triggers changed: <name> : <old> -> <new>`, `switch inhibitors changed: <name> : <old> -> <new>`, `pre-switch check <name> failed`, `asked to`); or, for `activation = \"boot\"`, that only the boot entry was set and nothing needing the new system running was judged. Null in a verdict-only pass.",
	"rebooted":              "True when the deploy rebooted the node into the new system (`activation` says why).",
	"ok":                    "True when the verdict does not fail the run (in lenient mode: also when it only warns).",
	"strict":                "Whether the run was strict (a failed unit fails it) or lenient (it warns).",
	"verdict_only":          "True for a verdict-only pass (`fediversity_verdict`): nothing was built, copied or switched.",
	"system_state":          "`systemctl is-system-running` after the run (`running`, `degraded`, …), or `unread` / `unreachable`.",
	"unreachable":           "The node answered none of the samples.",
	"unread":                "Some unit state could not be read (e.g. the system bus did not answer). The lists that depend on it are null, never empty.",
	"unread_sources":        "What could not be read, each with its reason.",
	"samples":               "How many unit-state samples the watch took.",
	"answered":              "How many of those samples the node answered.",
	"failed":                "Units the deployed configuration defines that are in `ActiveState=failed`. Fails a strict run.",
	"failed_new":            "Failed units that were not failed before the switch (or before the verdict-only pass): this run caused or exposed them. A failed unit in neither list has an unknown origin (the snapshot of unit states was unread).",
	"failed_before_switch":  "Failed units that were already failed before the switch: the new closure is not necessarily to blame.",
	"set_aside":             "Failed units the deployed configuration does not define: named, they do not fail the run.",
	"restart_loop":          "Units seen in a restart loop (`auto-restart`, or `NRestarts` rising during the watch), as `unit (N restarts, budget B)`.",
	"restart_loop_past":     "Looping units past their loop budget. They fail a verdict-only pass; a deploy only names them.",
	"cycling":               "Units activated more than once during the watch without `NRestarts` rising.",
	"stale_jobs":            "Start jobs older than `stale_job`, as `unit (job N, age)`.",
	"never_spawned_closure": "Units systemd never spawned because of the closure (e.g. 203/EXEC, 217/USER), as `unit (status/REASON)`. Fails a strict run.",
	"never_spawned_host":    "Units systemd never spawned because of the host (e.g. 214/SETSCHEDULER, Result=resources), as `unit (status/REASON)`: a host fault, the closure is not blamed.",
	"skipped":               "Units skipped because a condition was false (`ConditionResult=no`): not restarted.",
	"restarted":             "Failed units the run restarted before the watch.",
	"not_restarted":         "Changed units the switch left running their old code, as `<unit>: changed, not restarted (restartIfChanged = false)` (or `RefuseManualStop = true`, `X-OnlyManualStart = true`): `switch-to-configuration` does not restart them. They do not fail the run. Empty after a reboot.",
	"reasons":               "Why the verdict fails the run (strict) or what it warns about (lenient). Empty when the node converged.",
	"switch_exit_code":      "Exit code of `switch-to-configuration` (0 ok, 4 some units failed, 100 reboot needed); -1 when no switch ran.",
	"switch_result":         "The switch exit code in words: `ok`, `activation-failed` (the activation script failed; the node runs the new system), `units-failed`, `reboot-needed`, `not-run`, `error` (the switch could not be run or read) or `exit-N`.",
	"switch_reconnected":    "The connection dropped during the switch and its result was read after reconnecting.",
	"confirmed":             "The node runs the new toplevel after the switch.",
	"boot_reverted":         "The switch never confirmed, so the boot entry was pointed back at the previous system.",
	"phase_timings":         "How long each phase took (Go durations), keyed by phase name.",
	"report":                "The verdict as text for an operator.",
	"checks":                "The `check` and `probe` blocks, in order, each with whether it passed, its attempts, the time to its first pass and the tail of its last output. Empty when none is configured.",
}

// verdictSchemaAttribute is the computed `verdict` attribute.
func verdictSchemaAttribute(what string) schema.SingleNestedAttribute {
	attrs := map[string]schema.Attribute{}
	for name, t := range verdictAttrTypes {
		doc := verdictAttributeDocs[name]
		if name == "checks" { // a list of objects: the type switch below cannot compare it
			attrs[name] = checksSchemaAttribute(doc)
			continue
		}
		switch t {
		case types.BoolType:
			attrs[name] = schema.BoolAttribute{Computed: true, MarkdownDescription: doc}
		case types.StringType:
			attrs[name] = schema.StringAttribute{Computed: true, MarkdownDescription: doc}
		case types.Int64Type:
			attrs[name] = schema.Int64Attribute{Computed: true, MarkdownDescription: doc}
		case stringList:
			attrs[name] = schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: doc}
		default:
			attrs[name] = schema.MapAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: doc}
		}
	}
	return schema.SingleNestedAttribute{
		Computed:            true,
		Attributes:          attrs,
		MarkdownDescription: "The verdict of " + what + ": unit names per class (see the design page's verdict classes), the switch result, the system state and the phase timings.",
	}
}

// switchResultWords names a switch-to-configuration exit code.
func switchResultWords(code int, ran bool) string {
	if !ran {
		return "not-run"
	}
	switch code {
	case 0:
		return "ok"
	case 2:
		return "activation-failed"
	case 4:
		return "units-failed"
	case 100:
		return "reboot-needed"
	default:
		return fmt.Sprintf("exit-%d", code)
	}
}

// switchOutcome reports whether the result shows a switch phase that ran, and whether
// that phase failed (a transport fault, a time limit).
func switchOutcome(r *deploybody.Result) (ran, failed bool) {
	for _, p := range r.Phases {
		if p.Name == deploybody.PhaseSwitch {
			if strings.HasPrefix(p.Note, "skipped") {
				return false, false
			}
			return true, strings.HasPrefix(p.Note, "failed")
		}
	}
	return false, false
}

func listOrNull(names []string, unread bool) types.List {
	if unread && len(names) == 0 {
		return types.ListNull(types.StringType)
	}
	vals := make([]attr.Value, 0, len(names))
	for _, n := range names {
		vals = append(vals, types.StringValue(n))
	}
	return types.ListValueMust(types.StringType, vals)
}

func spawnNames(fs []judge.SpawnFault) []string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		if f.Status == 0 {
			out = append(out, fmt.Sprintf("%s (%s)", f.Unit, f.Reason))
		} else {
			out = append(out, fmt.Sprintf("%s (%d/%s)", f.Unit, f.Status, f.Reason))
		}
	}
	return out
}

// verdictValue converts a deploy body result into the `verdict` object. A nil result
// or a result without a verdict (the run stopped before judging) gives a null object.
func verdictValue(r *deploybody.Result) (types.Object, diag.Diagnostics) {
	if r == nil || r.Verdict == nil {
		return types.ObjectNull(verdictAttrTypes), nil
	}
	v := r.Verdict
	unread := len(v.Unread) > 0
	var failed, failedNew, failedOld []string
	for _, f := range v.Failed {
		failed = append(failed, f.Unit)
		switch f.Origin {
		case judge.FailedBeforeSwitch:
			failedOld = append(failedOld, f.Unit)
		case judge.FailedNew:
			failedNew = append(failedNew, f.Unit)
		}
	}
	var loops, past []string
	for _, l := range v.RestartLoops {
		loops = append(loops, fmt.Sprintf("%s (%d restarts, budget %d)", l.Unit, l.NRestarts, l.Budget))
		if l.PastBudget {
			past = append(past, l.Unit)
		}
	}
	var stale []string
	for _, j := range v.StaleJobs {
		stale = append(stale, fmt.Sprintf("%s (job %d, %s)", j.Unit, j.JobID, j.Age.Round(time.Second)))
	}
	timings := map[string]attr.Value{}
	for _, p := range r.Phases {
		timings[p.Name] = types.StringValue(p.Duration.Round(time.Millisecond).String())
	}
	ran, switchFailed := switchOutcome(r)
	code := int64(r.SwitchExitCode)
	result := switchResultWords(r.SwitchExitCode, ran)
	if !ran {
		code = -1
	}
	if switchFailed {
		code, result = -1, "error"
	}
	vals := map[string]attr.Value{
		"ok":                    types.BoolValue(v.OK),
		"activation":            stringOrNull(v.Activation),
		"rebooted":              types.BoolValue(r.Reboot != nil),
		"strict":                types.BoolValue(v.Strict),
		"verdict_only":          types.BoolValue(v.VerdictOnly),
		"system_state":          types.StringValue(v.SystemState),
		"unreachable":           types.BoolValue(v.Unreachable),
		"unread":                types.BoolValue(unread),
		"unread_sources":        listOrNull(v.Unread, false),
		"samples":               types.Int64Value(int64(v.Samples)),
		"answered":              types.Int64Value(int64(v.Answered)),
		"failed":                listOrNull(failed, unread),
		"failed_new":            listOrNull(failedNew, unread),
		"failed_before_switch":  listOrNull(failedOld, unread),
		"set_aside":             listOrNull(v.SetAside, unread),
		"restart_loop":          listOrNull(loops, unread),
		"restart_loop_past":     listOrNull(past, unread),
		"cycling":               listOrNull(v.Cycling, unread),
		"stale_jobs":            listOrNull(stale, unread),
		"never_spawned_closure": listOrNull(spawnNames(v.NeverSpawnedClosure), unread),
		"never_spawned_host":    listOrNull(spawnNames(v.NeverSpawnedHost), unread),
		"skipped":               listOrNull(v.SkippedOnCondition, unread),
		"restarted":             listOrNull(v.Restarted, false),
		"not_restarted":         listOrNull(v.NotRestarted, false),
		"reasons":               listOrNull(v.Reasons, false),
		"switch_exit_code":      types.Int64Value(code),
		"switch_result":         types.StringValue(result),
		"switch_reconnected":    types.BoolValue(r.SwitchReconnects),
		"confirmed":             types.BoolValue(r.Confirmed),
		"boot_reverted":         types.BoolValue(r.BootReverted),
		"phase_timings":         types.MapValueMust(types.StringType, timings),
		"report":                types.StringValue(r.Report),
		"checks":                checksValue(v.Checks),
	}
	return types.ObjectValue(verdictAttrTypes, vals)
}

// verdictUnitNames lists every unit the verdict names in a class that fails or warns,
// for diagnostics ("fedi-broken.service (failed, new)").
func verdictUnitNames(v *judge.Verdict) []string {
	if v == nil {
		return nil
	}
	var out []string
	for _, f := range v.Failed {
		out = append(out, fmt.Sprintf("%s (failed, %s)", f.Unit, f.Origin))
	}
	for _, f := range v.NeverSpawnedClosure {
		out = append(out, fmt.Sprintf("%s (never spawned: %d/%s, closure fault)", f.Unit, f.Status, f.Reason))
	}
	for _, l := range v.RestartLoops {
		if l.PastBudget {
			out = append(out, fmt.Sprintf("%s (restart loop: %d restarts, past its budget %d)", l.Unit, l.NRestarts, l.Budget))
		}
	}
	sort.Strings(out)
	return out
}

// verdictDiagnostic turns a verdict that does not pass cleanly into diagnostics: an
// error when it fails the run, a warning when lenient mode (or a class that never fails)
// names units. Summary names the node; detail names the units, the reasons and what to do.
func verdictDiagnostic(node string, r *deploybody.Result, runErr error, lenientHint string) diag.Diagnostics {
	var diags diag.Diagnostics
	if r == nil || r.Verdict == nil {
		return diags
	}
	v := r.Verdict
	units := verdictUnitNames(v)
	var detail strings.Builder
	if len(v.Reasons) > 0 {
		detail.WriteString(verdictReasons(node, v))
	}
	if len(units) > 0 {
		fmt.Fprintf(&detail, "\nUnits: %s.", strings.Join(units, ", "))
	}
	if r.Report != "" {
		fmt.Fprintf(&detail, "\n\n%s", strings.TrimSpace(r.Report))
	}
	switch {
	case runErr != nil && !v.OK && v.ShuttingDown:
		detail.WriteString("\n\nThe node was powering off or rebooting during the watch: find what asked it to (a unit or the activation of the new system, " +
			"or someone else; `journalctl -b -1` on the node once it is back) before applying again; " + deploybody.BootEntryAfterFailedVerdict(r.Reboot) + ".")
		diags.AddError(verdictSummary(node, v), strings.TrimSpace(detail.String()))
	case runErr != nil && !v.OK && len(units) == 0 && len(judge.FailedChecks(v)) > 0:
		detail.WriteString("\n\nThe units are up but the checks named above failed: run them by hand to see why, fix the service and apply again; " +
			deploybody.BootEntryAfterFailedVerdict(r.Reboot) + ". " + lenientHint)
		diags.AddError(verdictSummary(node, v), strings.TrimSpace(detail.String()))
	case runErr != nil && !v.OK:
		detail.WriteString("\n\nFix the units named above (see `journalctl -u <unit>` on the node) and apply again; " +
			deploybody.BootEntryAfterFailedVerdict(r.Reboot) + ". " + lenientHint)
		diags.AddError(verdictSummary(node, v), strings.TrimSpace(detail.String()))
	case len(v.Reasons) > 0 || len(units) > 0:
		diags.AddWarning(verdictSummary(node, v), strings.TrimSpace(detail.String()))
	}
	return diags
}

// verdictReasons is the verdict's reasons as one sentence naming the node.
func verdictReasons(node string, v *judge.Verdict) string {
	return fmt.Sprintf("Node %s: %s.", node, strings.Join(v.Reasons, "; "))
}

// verdictMessage is a verdict that gives reasons in one line, summary first (""
// when it gives none): what an operator reads in a warning or a check's message.
func verdictMessage(node string, v *judge.Verdict) string {
	if len(v.Reasons) == 0 {
		return ""
	}
	return verdictSummary(node, v) + ". " + verdictReasons(node, v)
}

func verdictSummary(node string, v *judge.Verdict) string {
	switch {
	case v.Unreachable:
		return fmt.Sprintf("Node %s is unreachable", node)
	case v.ShuttingDown:
		return fmt.Sprintf("Node %s was shutting down", node)
	case len(v.Failed) > 0:
		names := make([]string, 0, len(v.Failed))
		for _, f := range v.Failed {
			names = append(names, f.Unit)
		}
		return fmt.Sprintf("Unit %s failed on %s", strings.Join(names, ", "), node)
	case len(v.NeverSpawnedClosure) > 0:
		return fmt.Sprintf("Unit %s never spawned on %s (closure fault)", v.NeverSpawnedClosure[0].Unit, node)
	case len(v.Unread) > 0:
		return fmt.Sprintf("Unit states of %s are unread", node)
	case len(judge.FailedChecks(v)) > 0:
		return fmt.Sprintf("Check %s failed on %s", strings.Join(judge.FailedChecks(v), ", "), node)
	default:
		for _, l := range v.RestartLoops {
			if l.PastBudget {
				return fmt.Sprintf("Unit %s is in a restart loop on %s", l.Unit, node)
			}
		}
		return fmt.Sprintf("Verdict of %s names units", node)
	}
}

// phaseTimingsLog returns the phases as "name=duration" for a log line.
func phaseTimingsLog(r *deploybody.Result) string {
	parts := make([]string, 0, len(r.Phases))
	for _, p := range r.Phases {
		parts = append(parts, p.Name+"="+p.Duration.Round(time.Millisecond).String())
	}
	return strings.Join(parts, " ")
}

// stringOrNull is s, or null when it is empty (nothing said).
func stringOrNull(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}
