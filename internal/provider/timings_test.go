package provider

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

func TestTimingsMergeAndDefaults(t *testing.T) {
	cfg := &Config{Timings: Timings{Settle: 3 * time.Second, Watch: 20 * time.Second}}
	own := &timingsModel{Settle: types.StringValue("1s")}
	o, diags := commonBodyOptions(t.Context(), cfg, "n1", types.BoolNull(), types.ListNull(types.StringType), types.MapNull(types.Int64Type), own)
	if diags.HasError() {
		t.Fatal(diags)
	}
	if o.Timings.Settle != time.Second || o.Timings.Watch != 20*time.Second || o.Timings.NodeWait != deploybody.DefaultNodeWait {
		t.Fatalf("resource > provider > default: %+v", o.Timings)
	}
	if !o.Strict {
		t.Fatal("strict must default to true")
	}
	_, diags = commonBodyOptions(t.Context(), cfg, "n1", types.BoolNull(),
		types.ListValueMust(types.StringType, []attr.Value{types.StringValue("ok.service"), types.StringValue("$(rm -rf /)")}),
		types.MapValueMust(types.Int64Type, map[string]attr.Value{"a.service": types.Int64Value(-1)}), nil)
	msg := summarizeDiags(diags)
	if !strings.Contains(msg, "Invalid unit name") || !strings.Contains(msg, "Invalid loop budget") {
		t.Fatalf("bad chain and budget must be refused: %s", msg)
	}
}
