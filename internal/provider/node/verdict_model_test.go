package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	fwresource "github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

func TestVerdictValueNamesEveryClass(t *testing.T) {
	res := &deploybody.Result{
		Toplevel: "/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nixos-system", SwitchExitCode: 4, Confirmed: true,
		Phases: []deploybody.PhaseTiming{{Name: deploybody.PhaseSwitch, Duration: 1500 * time.Millisecond}, {Name: deploybody.PhaseWatch, Duration: 4 * time.Second}},
		Report: "fedi-broken.service failed",
		Verdict: &judge.Verdict{
			Strict: true, SystemState: "degraded", Samples: 4, Answered: 4,
			Failed: []judge.FailedUnit{
				{Unit: "fedi-broken.service", Result: "exit-code", Origin: judge.FailedNew},
				{Unit: "fedi-old.service", Result: "exit-code", Origin: judge.FailedBeforeSwitch},
			},
			SetAside:            []string{"outsider.service"},
			RestartLoops:        []judge.LoopingUnit{{Unit: "fedi-loop.service", NRestarts: 5, Budget: 2, PastBudget: true}},
			Cycling:             []string{},
			StaleJobs:           []judge.StaleJob{{Unit: "slow.service", JobID: 7, Age: 90 * time.Second}},
			NeverSpawnedClosure: []judge.SpawnFault{{Unit: "fedi-missing.service", Status: 203, Reason: "EXEC"}},
			NeverSpawnedHost:    []judge.SpawnFault{{Unit: "fedi-rt.service", Status: 214, Reason: "SETSCHEDULER"}},
			SkippedOnCondition:  []string{"fedi-skipped.service"},
			Reasons:             []string{"unit fedi-broken.service failed"},
		},
	}
	obj, diags := verdictValue(res)
	if diags.HasError() {
		t.Fatal(diags)
	}
	got := map[string]string{}
	for k, v := range obj.Attributes() {
		got[k] = v.String()
	}
	want := map[string]string{
		"failed":                `["fedi-broken.service","fedi-old.service"]`,
		"failed_new":            `["fedi-broken.service"]`,
		"failed_before_switch":  `["fedi-old.service"]`,
		"set_aside":             `["outsider.service"]`,
		"restart_loop":          `["fedi-loop.service (5 restarts, budget 2)"]`,
		"restart_loop_past":     `["fedi-loop.service"]`,
		"cycling":               `[]`,
		"stale_jobs":            `["slow.service (job 7, 1m30s)"]`,
		"never_spawned_closure": `["fedi-missing.service (203/EXEC)"]`,
		"never_spawned_host":    `["fedi-rt.service (214/SETSCHEDULER)"]`,
		"skipped":               `["fedi-skipped.service"]`,
		"unread":                `false`,
		"switch_exit_code":      `4`,
		"switch_result":         `"units-failed"`,
		"system_state":          `"degraded"`,
		"phase_timings":         `{"switch":"1.5s","watch":"4s"}`,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("verdict.%s = %s, want %s", k, got[k], w)
		}
	}
	if len(obj.Attributes()) != len(verdictAttrTypes) {
		t.Fatalf("object has %d attributes, type has %d", len(obj.Attributes()), len(verdictAttrTypes))
	}
}

// An unread bus gives null lists (unknown), never empty ones (none).
func TestVerdictValueUnreadIsNotEmpty(t *testing.T) {
	res := &deploybody.Result{
		Phases: []deploybody.PhaseTiming{{Name: deploybody.PhaseSwitch, Note: deploybody.PhaseSwitch}},
		Verdict: &judge.Verdict{
			VerdictOnly: true, SystemState: "unread",
			Unread: []string{"unit states: Failed to connect to bus: No such file or directory"},
		},
	}
	obj, diags := verdictValue(res)
	if diags.HasError() {
		t.Fatal(diags)
	}
	attrs := obj.Attributes()
	for _, k := range []string{"failed", "set_aside", "restart_loop", "cycling", "skipped", "never_spawned_host"} {
		if !attrs[k].IsNull() {
			t.Errorf("verdict.%s = %s on an unread node, want null", k, attrs[k])
		}
	}
	if attrs["unread"].String() != "true" || !strings.Contains(attrs["unread_sources"].String(), "Failed to connect to bus") {
		t.Errorf("unread = %s, unread_sources = %s", attrs["unread"], attrs["unread_sources"])
	}
	if got := attrs["switch_result"].String(); got != `"ok"` {
		t.Errorf("switch_result = %s", got)
	}
}

func TestVerdictValueVerdictOnlyAndNil(t *testing.T) {
	obj, _ := verdictValue(nil)
	if !obj.IsNull() {
		t.Fatal("no result must give a null verdict")
	}
	res := &deploybody.Result{
		Phases:  []deploybody.PhaseTiming{{Name: deploybody.PhaseSwitch, Note: "skipped: verdict-only pass builds, copies and switches nothing"}},
		Verdict: &judge.Verdict{VerdictOnly: true, OK: true, SystemState: "running"},
	}
	obj, _ = verdictValue(res)
	if got := obj.Attributes()["switch_result"].String(); got != `"not-run"` {
		t.Fatalf("switch_result = %s, want not-run", got)
	}
	if got := obj.Attributes()["switch_exit_code"].String(); got != "-1" {
		t.Fatalf("switch_exit_code = %s, want -1", got)
	}
}

func TestVerdictDiagnostic(t *testing.T) {
	failed := &deploybody.Result{Verdict: &judge.Verdict{
		Strict:  true,
		Failed:  []judge.FailedUnit{{Unit: "fedi-broken.service", Origin: judge.FailedNew}},
		Reasons: []string{"unit fedi-broken.service failed"},
	}}
	err := &deploybody.DeployError{Node: "fedi-n1", Phase: deploybody.PhaseVerdict, Err: errors.New("1 unit failed")}
	d := verdictDiagnostic("fedi-n1", failed, err, "set strict = false")
	if !d.HasError() || d[0].Summary() != "Unit fedi-broken.service failed on fedi-n1" ||
		!strings.Contains(d[0].Detail(), "fedi-broken.service (failed, new)") || !strings.Contains(d[0].Detail(), "strict = false") {
		t.Fatalf("strict failure: %v", d)
	}
	// Lenient: the same names, as a warning.
	failed.Verdict.Strict, failed.Verdict.OK = false, true
	d = verdictDiagnostic("fedi-n1", failed, nil, "")
	if d.HasError() || d.WarningsCount() != 1 || !strings.Contains(d[0].Detail(), "fedi-broken.service") {
		t.Fatalf("lenient: %v", d)
	}
	// A clean verdict says nothing.
	if d := verdictDiagnostic("fedi-n1", &deploybody.Result{Verdict: &judge.Verdict{OK: true}}, nil, ""); len(d) != 0 {
		t.Fatalf("clean: %v", d)
	}
}

// The schemas are valid framework schemas, and the verdict attribute matches the
// object type the model builds.
func TestSchemasAreValid(t *testing.T) {
	ctx := context.Background()
	for _, r := range []fwresource.Resource{NewNodeSwitchResource(), NewVerdictResource()} {
		var resp fwresource.SchemaResponse
		r.Schema(ctx, fwresource.SchemaRequest{}, &resp)
		if resp.Diagnostics.HasError() {
			t.Fatal(resp.Diagnostics)
		}
		if diags := resp.Schema.ValidateImplementation(ctx); diags.HasError() {
			t.Fatal(diags)
		}
		v, ok := resp.Schema.Attributes["verdict"]
		if !ok {
			t.Fatal("no verdict attribute")
		}
		if !v.GetType().Equal(verdictObjectType) {
			t.Fatalf("verdict schema type %s != model type %s", v.GetType(), verdictObjectType)
		}
		for name := range verdictAttrTypes {
			if verdictAttributeDocs[name] == "" {
				t.Errorf("verdict.%s has no description", name)
			}
		}
		for name, a := range resp.Schema.Attributes {
			if a.GetMarkdownDescription() == "" {
				t.Errorf("attribute %s has no description", name)
			}
		}
	}
}

func TestNeedsDeploy(t *testing.T) {
	top := "/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nixos-system-a"
	verdict, _ := verdictValue(&deploybody.Result{Verdict: &judge.Verdict{OK: true}})
	state := nodeSwitchModel{Toplevel: types.StringValue(top), Strict: types.BoolValue(true), Verdict: verdict,
		TransportBlocks: kit.TransportBlocks{SSH: &kit.SSHBlockModel{Host: types.StringValue("h")}}, SecretChain: types.ListNull(types.StringType), LoopBudgets: types.MapNull(types.Int64Type)}
	same := state
	same.Timings = &kit.TimingsModel{Settle: types.StringValue("1s")}
	if needsDeploy(same, state, top) {
		t.Error("a timings change alone must not redeploy")
	}
	other := state
	other.Toplevel = types.StringValue(top + "2")
	if !needsDeploy(other, state, top) {
		t.Error("a new toplevel must redeploy")
	}
	if !needsDeploy(same, state, top+"x") {
		t.Error("drift (state toplevel differs from the deployed one) must redeploy")
	}
	lenient := state
	lenient.Strict = types.BoolValue(false)
	if !needsDeploy(lenient, state, top) {
		t.Error("strict changes the verdict: redeploy")
	}
	moved := state
	moved.SSH = &kit.SSHBlockModel{Host: types.StringValue("h2")}
	if !needsDeploy(moved, state, top) {
		t.Error("another transport target must redeploy")
	}
	imported := state
	imported.Verdict = types.ObjectNull(verdictAttrTypes)
	if !needsDeploy(same, imported, top) {
		t.Error("an imported node (no verdict yet) must be deployed and judged")
	}
	// deploy = "last-good" on a node that already runs it: the configured system's
	// parts (its derivation, now null) do not redeploy it; another toplevel does.
	built := state
	built.Derivation = types.StringValue("/nix/store/dddddddddddddddddddddddddddddddd-nixos-system-a.drv")
	built.Build = &kit.BuildModel{Flake: types.StringValue("./fleet")}
	back := built
	back.Deploy = types.StringValue(deployLastGood)
	back.Derivation = types.StringNull()
	if needsDeploy(back, built, top) {
		t.Error("deploy = last-good on a node that runs its last good system must not redeploy it")
	}
	back.Toplevel = types.StringValue(top + "2")
	if !needsDeploy(back, built, top) {
		t.Error("deploy = last-good with another last good system must redeploy")
	}
	forward := built
	forward.Derivation = types.StringNull()
	if !needsDeploy(forward, built, top) {
		t.Error("with deploy = configured a changed derivation still redeploys")
	}
}
