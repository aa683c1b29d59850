package node

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// The data source reaches the node through the verdict resource's own blocks and gives
// its verdict object: the same argument names, documentation and verdict attributes, so
// a configuration moves from one to the other without renaming.
func TestNodeHealthSchemaSharesTheVerdictResourceBlocks(t *testing.T) {
	ctx := context.Background()
	var ds datasource.SchemaResponse
	NewNodeHealthDataSource().Schema(ctx, datasource.SchemaRequest{}, &ds)
	if ds.Diagnostics.HasError() {
		t.Fatal(ds.Diagnostics)
	}
	if diags := ds.Schema.ValidateImplementation(ctx); diags.HasError() {
		t.Fatalf("the data source's schema is invalid: %v", diags)
	}
	var rs resource.SchemaResponse
	NewVerdictResource().Schema(ctx, resource.SchemaRequest{}, &rs)
	for _, block := range []string{"ssh", "incus", "timings"} {
		want := rs.Schema.Blocks[block].GetNestedObject().GetAttributes()
		got := ds.Schema.Blocks[block].GetNestedObject().GetAttributes()
		if len(got) != len(want) {
			t.Errorf("block %s: %d attributes, the verdict resource has %d", block, len(got), len(want))
		}
		for name, a := range want {
			if g, ok := got[name]; !ok || g.GetMarkdownDescription() != a.GetMarkdownDescription() {
				t.Errorf("block %s: attribute %s missing or documented otherwise", block, name)
			}
		}
	}
	verdict := ds.Schema.Attributes["verdict"].GetType().(types.ObjectType)
	for name := range verdictAttrTypes {
		if _, ok := verdict.AttrTypes[name]; !ok {
			t.Errorf("verdict.%s missing from the data source", name)
		}
	}
}

// A verdict with a failed unit is data: ok false, the unit in failed and in a message
// that names the node.
func TestNodeHealthFillNamesTheFailedUnit(t *testing.T) {
	res := &deploybody.Result{Node: "web01", RunningSystem: "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-nixos-system-web01",
		Verdict: &judge.Verdict{Strict: true, VerdictOnly: true, SystemState: "degraded", Samples: 3, Answered: 3,
			Failed:  []judge.FailedUnit{{Unit: "fedi-broken.service", Result: "exit-code", Origin: judge.FailedBeforeSwitch}},
			Reasons: []string{"unit fedi-broken.service failed (Result=exit-code)"}}}
	m := nodeHealthModel{Node: types.StringValue("web01")}
	if diags := m.fill(res); diags.HasError() {
		t.Fatal(diags)
	}
	if m.OK.ValueBool() || m.Unreachable.ValueBool() {
		t.Fatalf("ok = %v, unreachable = %v", m.OK, m.Unreachable)
	}
	if got := m.Failed.String(); !strings.Contains(got, "fedi-broken.service") {
		t.Fatalf("failed = %s", got)
	}
	msg := m.Message.ValueString()
	if !strings.Contains(msg, "Unit fedi-broken.service failed on web01") || !strings.Contains(msg, "Result=exit-code") {
		t.Fatalf("message = %q", msg)
	}
	if m.Judged.ValueString() != res.RunningSystem {
		t.Fatalf("judged_toplevel = %s", m.Judged)
	}

	res.Verdict = &judge.Verdict{Strict: true, VerdictOnly: true, OK: true, SystemState: "running", Samples: 3, Answered: 3, Failed: []judge.FailedUnit{}}
	m = nodeHealthModel{Node: types.StringValue("web01")}
	m.fill(res)
	if !m.OK.ValueBool() || m.Message.ValueString() != "" || len(m.Reasons.Elements()) != 0 {
		t.Fatalf("a healthy node: ok=%v message=%q reasons=%s", m.OK, m.Message, m.Reasons)
	}
}
