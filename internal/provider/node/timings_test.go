package node

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

func TestTimingsMergeAndDefaults(t *testing.T) {
	cfg := &kit.Config{Timings: kit.Timings{Settle: 3 * time.Second, Watch: 20 * time.Second}}
	own := &kit.TimingsModel{Settle: types.StringValue("1s")}
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
	msg := kit.SummarizeDiags(diags)
	if !strings.Contains(msg, "Invalid unit name") || !strings.Contains(msg, "Invalid loop budget") {
		t.Fatalf("bad chain and budget must be refused: %s", msg)
	}
}

// Each resource's timings block offers the timings its runs read; the others stay
// accepted (a configuration that set one keeps working) but are deprecated, so the
// operator is warned that they have no effect there.
func TestTimingsBlockPerResource(t *testing.T) {
	cases := []struct {
		resource   string
		used       []string
		deprecated []string
	}{
		{kit.TimingsNodeSwitch, []string{"node_wait", "switch_timeout", "chain_wait", "no_progress", "watch"}, []string{"rollout_wait", "pull_grace"}},
		{kit.TimingsVerdict, []string{"node_wait", "chain_wait", "no_progress", "stale_job"}, []string{"switch_timeout", "rollout_wait", "pull_grace"}},
		{kit.TimingsNodeHealth, []string{"node_wait", "settle", "watch", "chain_wait", "lock_wait"}, []string{"switch_timeout", "rollout_wait", "pull_grace"}},
		{kit.TimingsK8sRollout, []string{"rollout_wait", "pull_grace"}, []string{"chain_wait", "no_progress", "node_wait", "switch_timeout"}},
	}
	for _, c := range cases {
		block := kit.TimingsResourceBlock(c.resource)
		for _, name := range c.used {
			a, ok := block.Attributes[name]
			if !ok || a.GetDeprecationMessage() != "" {
				t.Errorf("%s: timings.%s must be offered and not deprecated", c.resource, name)
			}
		}
		for _, name := range c.deprecated {
			a, ok := block.Attributes[name]
			if !ok || !strings.Contains(a.GetDeprecationMessage(), "does not use timings."+name) {
				t.Errorf("%s: timings.%s must stay accepted with a deprecation warning", c.resource, name)
			}
		}
	}
	// The docs state the engines' defaults.
	want := map[string]string{"node_wait": "Default `2m`.", "settle": "Default `5s`.", "chain_wait": "Default `5m`.", "pull_grace": "Default `20s`.", "stale_job": "Default `1m`."}
	for _, tm := range kit.TimingTable {
		if w, ok := want[tm.Name]; ok && !strings.Contains(tm.Description(), w) {
			t.Errorf("timings.%s: description %q lacks %q", tm.Name, tm.Description(), w)
		}
	}
}
