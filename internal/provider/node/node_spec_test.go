package node

import (
	"os"
	"path/filepath"
	"reflect"
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
		{"unpinned host key", func(a *nodeArgs) { a.ssh.HostKey = types.StringNull() },
			`{"host": "h"}`, "ssh.host_key"},
		{"host key cut short", func(a *nodeArgs) { a.ssh.HostKey = str("ssh-ed25519 AAAA…") },
			`{"host": "h", "host_key": "ssh-ed25519 AAAA…"}`, "ssh.host_key"},
		{"keepalive", func(a *nodeArgs) { a.ssh.Keepalive = str("soon") },
			`{"host": "h", "host_key": "` + specTestKey + `", "keepalive": "soon"}`, "ssh.keepalive"},
		{"jump unpinned", func(a *nodeArgs) { a.ssh.Jump = &kit.JumpHostModel{Host: str("bastion")} },
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
			a := nodeArgs{node: "web01", ssh: okSSH(), strict: types.BoolNull(), chain: types.ListNull(types.StringType), budgets: types.MapNull(types.Int64Type)}
			c.args(&a)
			_, _, diags := nodeOptions(t.Context(), &kit.Config{}, a)
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

// Every argument fediversity_node_switch offers a node, a roster can say: the roster's
// keys are read from the node spec's JSON names, the provider's from its schema, so a
// new argument without a roster key fails here.
func TestRosterSaysEveryNodeSwitchArgument(t *testing.T) {
	var resp resource.SchemaResponse
	(&nodeSwitchResource{}).Schema(t.Context(), resource.SchemaRequest{}, &resp)
	s := resp.Schema
	notNodeArguments := map[string]string{
		"id": "computed", "generation": "computed", "verdict": "computed", "derivation": "computed", "changes": "computed", "reboots": "computed",
		"node":              "the roster's key",
		"node_plan":         "the command's --submission and --baked",
		"submission_digest": "the command reads the submission once, at its start",
		"submission_file":   "the command's --submission",
		"timeouts":          "the command runs until done or interrupted",
		"deploy":            "the command's verb: `fediversity rollback --to last-good` deploys every node's last good system",
	}
	rosterNode := jsonNames(reflect.TypeOf(fleet.RosterNode{}))
	check := func(where string, names []string, accepted map[string]bool) {
		for _, n := range names {
			if _, skip := notNodeArguments[n]; skip && where == "" {
				continue
			}
			if !accepted[n] {
				t.Errorf("fediversity_node_switch offers %s%s, the roster has no such key", where, n)
			}
		}
	}
	var top []string
	for n := range s.Attributes {
		top = append(top, n)
	}
	for n := range s.Blocks {
		top = append(top, n)
	}
	check("", top, merge(rosterNode, map[string]bool{"check": rosterNode["checks"], "probe": rosterNode["probes"], "ssh": true}))
	sub := func(block string) []string {
		var names []string
		switch b := s.Blocks[block].(type) {
		case schema.SingleNestedBlock:
			for n, a := range b.Attributes {
				if a.GetDeprecationMessage() == "" {
					names = append(names, n)
				}
			}
			for n := range b.Blocks {
				names = append(names, n)
			}
		case schema.ListNestedBlock:
			for n := range b.NestedObject.Attributes {
				names = append(names, n)
			}
		}
		return names
	}
	check("ssh.", sub("ssh"), jsonNames(reflect.TypeOf(nodespec.SSH{})))
	check("incus.", sub("incus"), jsonNames(reflect.TypeOf(nodespec.Incus{})))
	check("snapshot.", sub("snapshot"), jsonNames(reflect.TypeOf(nodespec.Snapshot{})))
	check("build.", sub("build"), jsonNames(reflect.TypeOf(nodespec.Build{})))
	check("check.", sub("check"), jsonNames(reflect.TypeOf(nodespec.Check{})))
	check("probe.", sub("probe"), jsonNames(reflect.TypeOf(nodespec.Probe{})))
	timings := map[string]bool{}
	for _, n := range nodespec.NodeTimingNames() {
		timings[n] = true
	}
	check("timings.", sub("timings"), timings)
}

// jsonNames are the JSON keys of a struct type, embedded structs' included.
func jsonNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous {
			for n := range jsonNames(f.Type) {
				names[n] = true
			}
			continue
		}
		if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n != "" && n != "-" {
			names[n] = true
		}
	}
	return names
}

func merge(a, b map[string]bool) map[string]bool {
	out := map[string]bool{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
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
