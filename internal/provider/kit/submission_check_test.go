package kit

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// A node resource's plan when the group's submission digest changes: left alone when
// nothing else of the node changed, taking the new digest otherwise.
func TestKeepSubmissionOfUnchangedNode(t *testing.T) {
	s := schema.Schema{Attributes: map[string]schema.Attribute{
		"node_plan":         schema.StringAttribute{Optional: true},
		"submission_digest": schema.StringAttribute{Optional: true},
		"submission_file":   schema.StringAttribute{Optional: true},
		"generation":        schema.Int64Attribute{Computed: true},
	}}
	typ := s.Type().TerraformType(t.Context())
	obj := func(plan, digest any, generation any) tftypes.Value {
		return tftypes.NewValue(typ, map[string]tftypes.Value{
			"node_plan":         tftypes.NewValue(tftypes.String, plan),
			"submission_digest": tftypes.NewValue(tftypes.String, digest),
			"submission_file":   tftypes.NewValue(tftypes.String, "s.json"),
			"generation":        tftypes.NewValue(tftypes.Number, generation),
		})
	}
	state := obj(`{"a":1}`, "old", 3)
	for _, tc := range []struct {
		name         string
		config, plan tftypes.Value
		keep         bool
	}{
		// The framework marks computed values unknown once anything differs.
		{"only the digest changed", obj(`{"a":1}`, "new", nil), obj(`{"a":1}`, "new", tftypes.UnknownValue), true},
		{"the node plan changed too", obj(`{"a":2}`, "new", nil), obj(`{"a":2}`, "new", tftypes.UnknownValue), false},
		{"the node plan is not known yet", obj(tftypes.UnknownValue, "new", nil), obj(tftypes.UnknownValue, "new", tftypes.UnknownValue), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := resource.ModifyPlanRequest{
				Config: tfsdk.Config{Schema: s, Raw: tc.config},
				State:  tfsdk.State{Schema: s, Raw: state},
				Plan:   tfsdk.Plan{Schema: s, Raw: tc.plan},
			}
			resp := &resource.ModifyPlanResponse{Plan: tfsdk.Plan{Schema: s, Raw: tc.plan}}
			KeepSubmissionOfUnchangedNode(req, resp)()
			if kept := resp.Plan.Raw.Equal(state); kept != tc.keep {
				t.Fatalf("plan equals the state: %v, want %v (plan %v)", kept, tc.keep, resp.Plan.Raw)
			}
		})
	}
	// The resource's own ModifyPlan plans a change on the kept plan (a drifted node, say):
	// the change goes ahead with the new digest, which the apply checks.
	t.Run("the resource plans a change of its own", func(t *testing.T) {
		plan := obj(`{"a":1}`, "new", tftypes.UnknownValue)
		req := resource.ModifyPlanRequest{
			Config: tfsdk.Config{Schema: s, Raw: obj(`{"a":1}`, "new", nil)},
			State:  tfsdk.State{Schema: s, Raw: state},
			Plan:   tfsdk.Plan{Schema: s, Raw: plan},
		}
		resp := &resource.ModifyPlanResponse{Plan: tfsdk.Plan{Schema: s, Raw: plan}}
		restore := KeepSubmissionOfUnchangedNode(req, resp)
		if !resp.Plan.Raw.Equal(state) {
			t.Fatalf("the resource's own ModifyPlan should start from the kept plan, got %v", resp.Plan.Raw)
		}
		resp.Plan.Raw = obj(`{"a":1}`, "old", tftypes.UnknownValue) // e.g. a redeploy of a drifted node
		restore()
		var got map[string]tftypes.Value
		if err := resp.Plan.Raw.As(&got); err != nil {
			t.Fatal(err)
		}
		if !got["submission_digest"].Equal(tftypes.NewValue(tftypes.String, "new")) {
			t.Fatalf("a planned change must carry the new digest, got %v", got["submission_digest"])
		}
	})
}
