package node

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// The state keeps the lists' full lengths beside the cut lists, and a list that is
// unknown has no count (null, never 0).
func TestChangesValueKeepsCounts(t *testing.T) {
	v := changesValue(&deploybody.Changes{
		PathsAdded: []string{"/nix/store/a"}, UnitsAdded: []string{},
		Counts: map[string]int{"paths_added": 3001, "units_added": 0},
	})
	counts, ok := v.Attributes()["counts"].(types.Map)
	if !ok || counts.IsNull() {
		t.Fatalf("counts = %v", v.Attributes()["counts"])
	}
	got := counts.Elements()
	if len(got) != 2 || got["paths_added"] != types.Int64Value(3001) || got["units_added"] != types.Int64Value(0) {
		t.Fatalf("counts = %v, want paths_added 3001 and units_added 0 only", got)
	}
	if c := changesValue(&deploybody.Changes{}).Attributes()["counts"]; !c.IsNull() {
		t.Fatalf("counts with no known list = %v, want null", c)
	}
}
