package node_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

const wordsTestKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3Cj0aK1mO4vVq7bWJm7pS9xXcG2d0dTq0m4Q1fG7kD"

// A bad setting of fediversity_verdict or fediversity_node_health is refused when the
// configuration is validated, once, at its attribute, in the node spec's words: the
// words the command prints for the same setting in a roster (the node, the field, what
// is wrong and what to do). The configuration goes through the provider's own server,
// as Terraform hands it over (its schema's validators and the object's), with only the
// attributes set here given.
func TestVerdictAndNodeHealthRefuseInTheSpecsWords(t *testing.T) {
	server, err := acctest.ProtoV6ProviderFactories["fediversity"]()
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := server.GetProviderSchema(t.Context(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	validate := map[string]func(config *tfprotov6.DynamicValue) []*tfprotov6.Diagnostic{
		"fediversity_verdict": func(config *tfprotov6.DynamicValue) []*tfprotov6.Diagnostic {
			resp, err := server.ValidateResourceConfig(t.Context(), &tfprotov6.ValidateResourceConfigRequest{TypeName: "fediversity_verdict", Config: config})
			if err != nil {
				t.Fatal(err)
			}
			return resp.Diagnostics
		},
		"fediversity_node_health": func(config *tfprotov6.DynamicValue) []*tfprotov6.Diagnostic {
			resp, err := server.ValidateDataResourceConfig(t.Context(), &tfprotov6.ValidateDataResourceConfigRequest{TypeName: "fediversity_node_health", Config: config})
			if err != nil {
				t.Fatal(err)
			}
			return resp.Diagnostics
		},
	}
	schemaOf := func(object string) *tfprotov6.Schema {
		if s, ok := schemas.ResourceSchemas[object]; ok {
			return s
		}
		return schemas.DataSourceSchemas[object]
	}
	roster := func(extra string) string {
		return `{"host": "127.0.0.1", "host_key": "` + wordsTestKey + `", ` + extra + `}`
	}
	cases := []struct {
		object string
		set    map[string]string // "block.attribute" for a block's
		roster string            // the same node in the command's roster
		field  string
		// the spec's summary and message, as the command prints them
		summary, message string
	}{
		{"fediversity_verdict", map[string]string{"toplevel": "/tmp/result"}, roster(`"toplevel": "/tmp/result"`),
			"toplevel", "Not a Nix store path", `"/tmp/result" is not a Nix store path (/nix/store/<hash>-<name>): give the store path of a built system, such as nix-build's output`},
		{"fediversity_verdict", map[string]string{"incus.instance": "web01"}, roster(`"incus": {"instance": "web01"}`),
			"incus", "Conflicting transports", "give exactly one transport: SSH (host) or incus, not both; a node is reached one way"},
		{"fediversity_verdict", map[string]string{"timings.watch": "0s"}, roster(`"timings": {"watch": "0s"}`),
			"timings.watch", "Invalid duration", `"0s" is not a positive duration: watch = "0s" is zero, and a timing must be positive; remove it to use the default (10s)`},
		{"fediversity_node_health", map[string]string{"toplevel": "/tmp/result"}, roster(`"toplevel": "/tmp/result"`),
			"toplevel", "Not a Nix store path", `"/tmp/result" is not a Nix store path (/nix/store/<hash>-<name>): give the store path of a built system, such as nix-build's output`},
		{"fediversity_node_health", map[string]string{"timings.settle": "0s"}, roster(`"timings": {"settle": "0s"}`),
			"timings.settle", "Invalid duration", `"0s" is not a positive duration: settle = "0s" is zero, and a timing must be positive; remove it to use the default (5s)`},
	}
	for _, c := range cases {
		t.Run(c.object+"/"+c.field, func(t *testing.T) {
			set := map[string]string{"node": "web01", "ssh.host": "127.0.0.1", "ssh.host_key": wordsTestKey}
			for k, v := range c.set {
				set[k] = v
			}
			typ := schemaOf(c.object).ValueType().(tftypes.Object)
			config, err := tfprotov6.NewDynamicValue(typ, configValue(typ, set, ""))
			if err != nil {
				t.Fatal(err)
			}
			got := theOneError(t, validate[c.object](&config), c.field)
			prefix := "Node web01: " + c.field + ": "
			message := strings.TrimSuffix(strings.TrimPrefix(got.Detail, prefix), ".")
			if got.Summary != c.summary || !strings.HasPrefix(got.Detail, prefix) || message != c.message {
				t.Fatalf("got %s: %s\nwant %s: %s%s.", got.Summary, got.Detail, c.summary, prefix, c.message)
			}
			file := filepath.Join(t.TempDir(), "roster.json")
			if err := os.WriteFile(file, []byte(`{"nodes": {"web01": `+c.roster+`}}`), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = fleet.LoadRoster(file)
			if want := `node "web01": ` + c.field + ": " + message; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("the command's words differ\nprovider: %s\ncommand:  %v", want, err)
			}
		})
	}
}

// configValue is a configuration of type typ with the attributes in set given (a
// block's as "block.attribute", under prefix) and everything else left out (null).
func configValue(typ tftypes.Object, set map[string]string, prefix string) tftypes.Value {
	vals := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		key := prefix + name
		if v, ok := set[key]; ok {
			vals[name] = tftypes.NewValue(at, v)
			continue
		}
		if ot, ok := at.(tftypes.Object); ok && givenUnder(set, key+".") {
			vals[name] = configValue(ot, set, key+".")
			continue
		}
		vals[name] = tftypes.NewValue(at, nil)
	}
	return tftypes.NewValue(typ, vals)
}

func givenUnder(set map[string]string, prefix string) bool {
	for k := range set {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// attributeName is a diagnostic's attribute path as a field of the node spec
// ("timings.watch").
// theOneError returns the only error of diags, which must be at field; the test fails
// with every error listed otherwise.
func theOneError(t *testing.T, diags []*tfprotov6.Diagnostic, field string) *tfprotov6.Diagnostic {
	t.Helper()
	var errs []string
	var got *tfprotov6.Diagnostic
	for _, d := range diags {
		if d.Severity != tfprotov6.DiagnosticSeverityError {
			continue
		}
		errs = append(errs, d.Summary+": "+d.Detail)
		if d.Attribute != nil && attributeName(d.Attribute) == field {
			got = d
		}
	}
	if got == nil || len(errs) != 1 {
		t.Fatalf("want one error, at %s; got %d: %s", field, len(errs), strings.Join(errs, " | "))
	}
	return got
}

func attributeName(p *tftypes.AttributePath) string {
	var parts []string
	for _, s := range p.Steps() {
		if n, ok := s.(tftypes.AttributeName); ok {
			parts = append(parts, string(n))
		}
	}
	return strings.Join(parts, ".")
}

// A host key that is not one is refused once per object that reaches a node, when the
// configuration is validated: one error, at the attribute, naming the node, in the node
// spec's words, which the command prints for the same roster entry. (The ssh block's
// schema used to check the key too, so the operator read the same mistake twice.)
func TestABadHostKeyIsOneErrorInTheSpecsWords(t *testing.T) {
	server, err := acctest.ProtoV6ProviderFactories["fediversity"]()
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := server.GetProviderSchema(t.Context(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	validateResource := func(object string) func(*tfprotov6.DynamicValue) []*tfprotov6.Diagnostic {
		return func(config *tfprotov6.DynamicValue) []*tfprotov6.Diagnostic {
			resp, err := server.ValidateResourceConfig(t.Context(), &tfprotov6.ValidateResourceConfigRequest{TypeName: object, Config: config})
			if err != nil {
				t.Fatal(err)
			}
			return resp.Diagnostics
		}
	}
	objects := []struct {
		name     string
		schema   *tfprotov6.Schema
		validate func(*tfprotov6.DynamicValue) []*tfprotov6.Diagnostic
		required map[string]string // the object's other required attributes
	}{
		{"fediversity_node_switch", schemas.ResourceSchemas["fediversity_node_switch"], validateResource("fediversity_node_switch"), nil},
		{"fediversity_verdict", schemas.ResourceSchemas["fediversity_verdict"], validateResource("fediversity_verdict"), nil},
		{"fediversity_spire_registration", schemas.ResourceSchemas["fediversity_spire_registration"], validateResource("fediversity_spire_registration"),
			map[string]string{"group": "g1", "trust_bundle": "-----BEGIN CERTIFICATE-----"}},
		{"fediversity_node_health", schemas.DataSourceSchemas["fediversity_node_health"], func(config *tfprotov6.DynamicValue) []*tfprotov6.Diagnostic {
			resp, err := server.ValidateDataResourceConfig(t.Context(), &tfprotov6.ValidateDataResourceConfigRequest{TypeName: "fediversity_node_health", Config: config})
			if err != nil {
				t.Fatal(err)
			}
			return resp.Diagnostics
		}, nil},
	}
	const badKey = "ssh-ed25519 not-a-key"
	cases := []struct {
		field  string            // the node spec's field, and the attribute
		set    map[string]string // beside node, ssh.host and a good ssh.host_key
		roster string            // the same node in the command's roster
	}{
		{"ssh.host_key", map[string]string{"ssh.host_key": badKey}, `{"host": "127.0.0.1", "host_key": "` + badKey + `"}`},
		{"ssh.jump.host_key", map[string]string{"ssh.jump.host": "bastion", "ssh.jump.host_key": badKey},
			`{"host": "127.0.0.1", "host_key": "` + wordsTestKey + `", "jump": {"host": "bastion", "host_key": "` + badKey + `"}}`},
	}
	for _, o := range objects {
		for _, c := range cases {
			t.Run(o.name+"/"+c.field, func(t *testing.T) {
				set := map[string]string{"node": "web01", "ssh.host": "127.0.0.1", "ssh.host_key": wordsTestKey}
				for k, v := range o.required {
					set[k] = v
				}
				for k, v := range c.set {
					set[k] = v
				}
				typ := o.schema.ValueType().(tftypes.Object)
				config, err := tfprotov6.NewDynamicValue(typ, configValue(typ, set, ""))
				if err != nil {
					t.Fatal(err)
				}
				got := theOneError(t, o.validate(&config), c.field)
				prefix := "Node web01: " + c.field + ": "
				if got.Summary != "Not an SSH host key" || !strings.HasPrefix(got.Detail, prefix) {
					t.Fatalf("got %s: %s\nwant Not an SSH host key: %s…", got.Summary, got.Detail, prefix)
				}
				message := strings.TrimSuffix(strings.TrimPrefix(got.Detail, prefix), ".")
				file := filepath.Join(t.TempDir(), "roster.json")
				if err := os.WriteFile(file, []byte(`{"nodes": {"web01": `+c.roster+`}}`), 0o600); err != nil {
					t.Fatal(err)
				}
				// The roster is flat: its fields are the ssh block's without "ssh.".
				_, err = fleet.LoadRoster(file)
				if want := `node "web01": ` + strings.TrimPrefix(c.field, "ssh.") + ": " + message; err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("the command's words differ\nprovider: %s\ncommand:  %v", want, err)
				}
			})
		}
	}
	// The spire node is no node's settings: its block keeps the schema's own check,
	// one error at its attribute too.
	for _, field := range []string{"spire_node.host_key", "spire_node.jump.host_key"} {
		t.Run("fediversity_spire_registration/"+field, func(t *testing.T) {
			set := map[string]string{"node": "web01", "group": "g1", "trust_bundle": "-----BEGIN CERTIFICATE-----",
				"ssh.host": "127.0.0.1", "ssh.host_key": wordsTestKey,
				"spire_node.host": "127.0.0.2", "spire_node.host_key": wordsTestKey, "spire_node.jump.host": "bastion", field: badKey}
			typ := schemas.ResourceSchemas["fediversity_spire_registration"].ValueType().(tftypes.Object)
			config, err := tfprotov6.NewDynamicValue(typ, configValue(typ, set, ""))
			if err != nil {
				t.Fatal(err)
			}
			var errs []string
			for _, d := range validateResource("fediversity_spire_registration")(&config) {
				if d.Severity == tfprotov6.DiagnosticSeverityError {
					errs = append(errs, d.Summary+": "+d.Detail)
				}
			}
			if want := "Not an SSH host key: " + field + ": "; len(errs) != 1 || !strings.HasPrefix(errs[0], want) {
				t.Fatalf("want one error, %s…; got %d: %s", want, len(errs), strings.Join(errs, " | "))
			}
		})
	}
}
