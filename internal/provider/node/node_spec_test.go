package node

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

const specTestKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3Cj0aK1mO4vVq7bWJm7pS9xXcG2d0dTq0m4Q1fG7kD"

// The provider and the command's roster refuse the same bad node with the same words:
// both decode into the node spec and report its one validation.
func TestProviderAndRosterRefuseAlike(t *testing.T) {
	str := types.StringValue
	okSSH := func() *kit.SSHBlockModel { return &kit.SSHBlockModel{Host: str("h"), HostKey: str(specTestKey)} }
	cases := []struct {
		name   string
		args   func(a *nodeArgs)
		roster string // the node's roster entry
		field  string
	}{
		{"unpinned host key", func(a *nodeArgs) { a.transport.SSH.HostKey = types.StringNull() },
			`{"host": "h"}`, "ssh.host_key"},
		{"host key cut short", func(a *nodeArgs) { a.transport.SSH.HostKey = str("ssh-ed25519 AAAA…") },
			`{"host": "h", "host_key": "ssh-ed25519 AAAA…"}`, "ssh.host_key"},
		{"keepalive", func(a *nodeArgs) { a.transport.SSH.Keepalive = str("soon") },
			`{"host": "h", "host_key": "` + specTestKey + `", "keepalive": "soon"}`, "ssh.keepalive"},
		{"jump unpinned", func(a *nodeArgs) { a.transport.SSH.Jump = &kit.JumpHostModel{Host: str("bastion")} },
			`{"host": "h", "host_key": "` + specTestKey + `", "jump": {"host": "bastion"}}`, "ssh.jump.host_key"},
		{"zero lock_wait", func(a *nodeArgs) { a.timings = &kit.TimingsModel{LockWait: str("0s")} },
			`{"host": "h", "host_key": "` + specTestKey + `", "timings": {"lock_wait": "0s"}}`, "timings.lock_wait"},
		{"secret chain", func(a *nodeArgs) {
			a.chain = types.ListValueMust(types.StringType, []attr.Value{str("$(rm -rf /)")})
		}, `{"host": "h", "host_key": "` + specTestKey + `", "secret_chain": ["$(rm -rf /)"]}`, "secret_chain[0]"},
		{"loop budget", func(a *nodeArgs) {
			a.budgets = types.MapValueMust(types.Int64Type, map[string]attr.Value{"a.service": types.Int64Value(-1)})
		}, `{"host": "h", "host_key": "` + specTestKey + `", "loop_budgets": {"a.service": -1}}`, `loop_budgets["a.service"]`},
		{"probe regexp", func(a *nodeArgs) {
			a.probes = []probeBlockModel{{Name: str("p"), TCP: str("h:80"), BodyRegexp: str("(")}}
		}, `{"host": "h", "host_key": "` + specTestKey + `", "probes": [{"name": "p", "tcp": "h:80", "body_regexp": "("}]}`, "checks"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := nodeArgs{node: "web01", transport: kit.TransportBlocks{SSH: okSSH()}, strict: types.BoolNull(), chain: types.ListNull(types.StringType), budgets: types.MapNull(types.Int64Type)}
			c.args(&a)
			_, _, _, diags := nodeOptions(t.Context(), &kit.Config{}, a)
			if !diags.HasError() {
				t.Fatal("the provider accepted it")
			}
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
			if err := os.WriteFile(file, []byte(`{"nodes": {"web01": `+c.roster+`}}`), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := fleet.LoadRoster(file)
			rosterField := strings.TrimPrefix(c.field, "ssh.")
			want := `node "web01": ` + rosterField + ": " + message
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("the roster's error lacks the provider's words\nwant: %s\ngot:  %v", want, err)
			}
		})
	}
}

// A roster says of a node what fediversity_node_switch does, and nothing else, both
// ways: the roster's keys are read from the node spec's JSON names (RosterNode embeds
// the spec), the provider's from its schema, so an argument without a roster key, or a
// roster key the resource does not take, fails here. Each exception says why.
func TestRosterAndNodeSwitchTakeTheSameArguments(t *testing.T) {
	var resp resource.SchemaResponse
	(&nodeSwitchResource{}).Schema(t.Context(), resource.SchemaRequest{}, &resp)
	provider := nodeSwitchArguments(resp.Schema)
	roster := rosterKeys(reflect.TypeOf(fleet.RosterNode{}), "")
	onlyProvider := map[string]string{
		"id": "computed", "generation": "computed", "verdict": "computed", "derivation": "computed", "changes": "computed", "reboots": "computed",
		"node":              "the roster's key",
		"node_plan":         "the command's --submission and --baked",
		"submission_digest": "the command reads the submission once, at its start",
		"submission_file":   "the command's --submission",
		"timeouts":          "the command runs until done or interrupted",
		"deploy":            "the command's verb: `fediversity rollback --to last-good` deploys every node's last good system",
	}
	onlyRoster := map[string]string{
		"probes.body_pattern": "the roster's older name of probes.body_regexp",
	}
	for _, k := range sortedSet(provider) {
		if _, ok := onlyProvider[k]; !ok && !roster[k] {
			t.Errorf("fediversity_node_switch takes %s, a roster has no such key", k)
		}
	}
	for _, k := range sortedSet(roster) {
		if _, ok := onlyRoster[k]; !ok && !provider[k] {
			t.Errorf("a roster takes %s, fediversity_node_switch has no such argument", k)
		}
	}
	for k := range onlyProvider {
		if roster[k] {
			t.Errorf("%s is listed as the provider's only, but a roster takes it too", k)
		}
	}
	for k := range onlyRoster {
		if !roster[k] || provider[k] {
			t.Errorf("%s is listed as the roster's only: roster %v, provider %v", k, roster[k], provider[k])
		}
	}
}

// nodeSwitchArguments are the resource's arguments in a roster's spelling: the ssh
// block's at the top, check and probe blocks as checks and probes, nested ones as
// block.attribute, and timings.<name> for the timings the resource uses (the names
// it marks deprecated it only keeps for old configurations).
func nodeSwitchArguments(s schema.Schema) map[string]bool {
	names := map[string]bool{}
	roster := map[string]string{"check": "checks", "probe": "probes"}
	rename := func(n string) string {
		if r, ok := roster[n]; ok {
			return r
		}
		return n
	}
	var nested func(prefix string, attrs map[string]schema.Attribute, blocks map[string]schema.Block)
	nested = func(prefix string, attrs map[string]schema.Attribute, blocks map[string]schema.Block) {
		for n, a := range attrs {
			if a.GetDeprecationMessage() == "" {
				names[prefix+n] = true
			}
		}
		for n, b := range blocks {
			names[prefix+n] = true
			switch b := b.(type) {
			case schema.SingleNestedBlock:
				nested(prefix+n+".", b.Attributes, b.Blocks)
			case schema.ListNestedBlock:
				nested(prefix+n+".", b.NestedObject.Attributes, b.NestedObject.Blocks)
			}
		}
	}
	for n, a := range s.Attributes {
		if a.GetDeprecationMessage() == "" {
			names[n] = true
		}
	}
	for n, b := range s.Blocks {
		switch n {
		case "ssh":
			nested("", b.(schema.SingleNestedBlock).Attributes, b.(schema.SingleNestedBlock).Blocks)
			continue
		case "timeouts":
			names[n] = true
			continue
		}
		names[rename(n)] = true
		switch b := b.(type) {
		case schema.SingleNestedBlock:
			nested(rename(n)+".", b.Attributes, b.Blocks)
		case schema.ListNestedBlock:
			nested(rename(n)+".", b.NestedObject.Attributes, b.NestedObject.Blocks)
		}
	}
	return names
}

// rosterKeys are the JSON keys of a roster type, embedded structs' at their parent's
// level, nested objects' as parent.key, and the timings a node's run reads as
// timings.<name>.
func rosterKeys(t reflect.Type, prefix string) map[string]bool {
	names := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && n == "" {
			for k := range rosterKeys(f.Type, prefix) {
				names[k] = true
			}
			continue
		}
		if n == "" || n == "-" {
			continue
		}
		names[prefix+n] = true
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			for k := range rosterKeys(ft, prefix+n+".") {
				names[k] = true
			}
		}
		if prefix == "" && n == "timings" {
			for _, tm := range nodespec.NodeTimingNames() {
				names["timings."+tm] = true
			}
		}
	}
	return names
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The timings block's model has a field for every row of the engine's table.
func TestTimingsModelMatchesTable(t *testing.T) {
	var m kit.TimingsModel
	for _, tm := range kit.TimingTable {
		if kit.ModelField(&m, tm.Name) == nil {
			t.Errorf("timingsModel has no field tfsdk:%q", tm.Name)
		}
	}
	if n := reflect.TypeOf(m).NumField(); n != len(kit.TimingTable) {
		t.Errorf("timingsModel has %d fields, the table %d rows", n, len(kit.TimingTable))
	}
}
