package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// A node that runs and boots a system the state does not name (an apply killed between
// its boot entry and its state write) is adopted with the verdict its own deploy
// recorded on the node; never with the verdict of the previous system.
func TestAdoptRunningSystemWithTheNodesVerdictRecord(t *testing.T) {
	const old, x, other = "/nix/store/aaaa-old", "/nix/store/xxxx-new", "/nix/store/oooo-other"
	oldVerdict, _ := verdictValue(&deploybody.Result{Verdict: &judge.Verdict{OK: true, Strict: true, SystemState: "running"}})
	record := func(top string, ok bool) *deploybody.VerdictRecord {
		v := &judge.Verdict{OK: ok, Strict: true, SystemState: "degraded"}
		if !ok {
			v.Failed = []judge.FailedUnit{{Unit: "web.service", Origin: judge.FailedNew}}
			v.Reasons = []string{"unit web.service failed"}
		}
		return &deploybody.VerdictRecord{Toplevel: top, Holder: "a deploy from host h (process 1)", Result: &deploybody.Result{Toplevel: top, Verdict: v}}
	}
	state := func(top string) nodeSwitchModel {
		m := nodeSwitchModel{Node: types.StringValue("n1"), Activation: types.StringValue(string(deploybody.ActivationSwitch)), Toplevel: types.StringNull(), Verdict: types.ObjectNull(verdictAttrTypes), Generation: types.Int64Value(3), Changes: types.ObjectNull(changesAttrTypes)}
		if top != "" {
			m.Toplevel, m.Verdict = types.StringValue(top), oldVerdict
		}
		return m
	}
	cases := []struct {
		name       string
		state      string
		rec        *deploybody.VerdictRecord
		recErr     error
		wantTop    string
		wantOK     string // verdict.ok as printed, "null" for no verdict
		wantMark   string // "unjudged", "failed" or ""
		wantWarned string
	}{
		{"record of X, ok: adopted with it", old, record(x, true), nil, x, "true", "", "deployed by an apply that did not write its state"},
		{"record of X, failed: state kept, deployed again", old, record(x, false), nil, old, "true", "failed", "judged failed (unit web.service failed)"},
		{"record of another system: adopted unjudged, deployed again", old, record(other, true), nil, x, "null", "unjudged", ""},
		{"no record: adopted unjudged, deployed again", old, nil, nil, x, "null", "unjudged", ""},
		{"unreadable record: as none, and said", old, nil, errors.New("sudo: a password is required"), x, "null", "unjudged", "could not be read"},
		{"import with a record of X: its verdict", "", record(x, false), nil, x, "false", "", ""},
		{"import without a record: no verdict, no mark", "", nil, nil, x, "null", "", ""},
	}
	for _, c := range cases {
		m := state(c.state)
		ns := nodeSystem{NodeSystem: deploybody.NodeSystem{Running: x, Profile: x, Generation: 7, Record: c.rec, RecordErr: c.recErr}}
		var interrupted *interruptedDeploy
		diags := judgeRunningSystem(context.Background(), &m, ns, driftQuestion(&m, ""), &interrupted)
		mark := ""
		switch {
		case interrupted != nil && interrupted.failed:
			mark = "failed"
			if interrupted.toplevel != x {
				t.Errorf("%s: mark %+v", c.name, interrupted)
			}
		case interrupted != nil:
			mark = "unjudged"
			if interrupted.toplevel != x || !strings.Contains(interrupted.why, "holds no verdict of it") {
				t.Errorf("%s: mark %+v", c.name, interrupted)
			}
		}
		ok := "null"
		if !m.Verdict.IsNull() {
			ok = m.Verdict.Attributes()["ok"].String()
		}
		warned := ""
		for _, d := range diags {
			warned += d.Summary() + " " + d.Detail()
		}
		if m.Toplevel.ValueString() != c.wantTop || ok != c.wantOK || mark != c.wantMark || !strings.Contains(warned, c.wantWarned) {
			t.Errorf("%s: toplevel %s verdict.ok %s mark %q warnings %q; want %s %s %q %q", c.name, m.Toplevel.ValueString(), ok, mark, warned, c.wantTop, c.wantOK, c.wantMark, c.wantWarned)
		}
		if m.Toplevel.ValueString() == x && m.Generation.ValueInt64() != 7 {
			t.Errorf("%s: adopted with generation %v, want the profile's 7", c.name, m.Generation)
		}
	}
}
