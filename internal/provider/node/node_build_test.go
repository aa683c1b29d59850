package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// A bad flake build is refused by the provider and the roster in the same words,
// naming the field and the node (nodespec.Validate).
func TestFlakeBuildRefusedAlike(t *testing.T) {
	for name, c := range map[string]struct {
		block  kit.BuildModel
		roster string
		field  string
	}{
		"no attribute": {kit.BuildModel{Flake: types.StringValue("./fleet")}, `{"flake": "./fleet"}`, "build.flake"},
		"args": {kit.BuildModel{Flake: types.StringValue(".#a"), Args: types.MapValueMust(types.StringType, map[string]attr.Value{"k": types.StringValue("v")})},
			`{"flake": ".#a", "args": {"k": "v"}}`, "build.args"},
		"with file": {kit.BuildModel{Flake: types.StringValue(".#a"), File: types.StringValue("n.nix")}, `{"flake": ".#a", "file": "n.nix"}`, "build.flake"},
	} {
		t.Run(name, func(t *testing.T) {
			block := c.block
			_, _, diags := kit.BuildSpecFor("web01", &block, "")
			prefix := "Node web01: " + c.field + ": "
			var message string
			for _, d := range diags.Errors() {
				if strings.HasPrefix(d.Detail(), prefix) {
					message = strings.TrimSuffix(strings.TrimPrefix(d.Detail(), prefix), ".")
				}
			}
			if message == "" {
				t.Fatalf("no provider error on %s: %s", c.field, kit.SummarizeDiags(diags))
			}
			file := filepath.Join(t.TempDir(), "roster.json")
			roster := `{"nodes": {"web01": {"host": "h", "host_key": "` + specTestKey + `", "build": ` + c.roster + `}}}`
			if err := os.WriteFile(file, []byte(roster), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := fleet.LoadRoster(file)
			if want := `node "web01": ` + c.field + ": " + message; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("the roster's error lacks the provider's words\nwant: %s\ngot:  %v", want, err)
			}
		})
	}
}
