package submission_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	submissionds "github.com/fediversity/terraform-provider-fediversity/internal/provider/submission"
	"github.com/fediversity/terraform-provider-fediversity/internal/submission"
)

// submissionBaked is the baked configuration of these tests: web01 runs mastodon,
// web02 runs pixelfed, web03 runs both.
const submissionBaked = `{
  "nodes": {
    "web01": {"applications": ["mastodon"], "identity": {"instance": "fedi-n1"}},
    "web02": {"applications": ["pixelfed"], "identity": {"instance": "fedi-n2"}},
    "web03": {"applications": ["mastodon", "pixelfed"], "identity": {"instance": "fedi-n3"}}
  },
  "applications": {
    "mastodon": {"enable": false},
    "pixelfed": {"enable": false, "max_upload_mb": 15}
  },
  "domain": "baked.example",
  "email": "ops@baked.example"
}`

// ---------------------------------------------------------------------------
// Unit tests through the provider's protocol server: the same path Terraform and
// OpenTofu use, without a binary.

type protoHarness struct {
	t      *testing.T
	server tfprotov6.ProviderServer
	schema *tfprotov6.GetProviderSchemaResponse
}

func newProtoHarness(t *testing.T) *protoHarness {
	t.Helper()
	server, err := providerserver.NewProtocol6WithError(provider.New("test")())()
	if err != nil {
		t.Fatal(err)
	}
	schema, err := server.GetProviderSchema(context.Background(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil || hasErrors(schema.Diagnostics) {
		t.Fatalf("GetProviderSchema: %v %v", err, schema.Diagnostics)
	}
	return &protoHarness{t: t, server: server, schema: schema}
}

// object builds a value of the schema's object type; attributes not given are null.
func (h *protoHarness) object(typ tftypes.Type, vals map[string]tftypes.Value) tftypes.Value {
	h.t.Helper()
	ot := typ.(tftypes.Object)
	all := map[string]tftypes.Value{}
	for name, at := range ot.AttributeTypes {
		all[name] = tftypes.NewValue(at, nil)
	}
	for name, v := range vals {
		if _, ok := ot.AttributeTypes[name]; !ok {
			h.t.Fatalf("the schema has no attribute %q", name)
		}
		all[name] = v
	}
	return tftypes.NewValue(ot, all)
}

func (h *protoHarness) dynamic(typ tftypes.Type, v tftypes.Value) *tfprotov6.DynamicValue {
	h.t.Helper()
	dv, err := tfprotov6.NewDynamicValue(typ, v)
	if err != nil {
		h.t.Fatal(err)
	}
	return &dv
}

func (h *protoHarness) configure(vals map[string]tftypes.Value) {
	h.t.Helper()
	typ := h.schema.Provider.ValueType()
	resp, err := h.server.ConfigureProvider(context.Background(), &tfprotov6.ConfigureProviderRequest{
		Config: h.dynamic(typ, h.object(typ, vals)),
	})
	if err != nil || hasErrors(resp.Diagnostics) {
		h.t.Fatalf("ConfigureProvider: %v %s", err, diagText(resp.Diagnostics))
	}
}

// read reads fediversity_submission and returns its state as plain Go values (nil on
// error) and the diagnostics.
func (h *protoHarness) read(vals map[string]tftypes.Value) (map[string]any, []*tfprotov6.Diagnostic) {
	h.t.Helper()
	typ := h.schema.DataSourceSchemas["fediversity_submission"].ValueType()
	cfg := h.dynamic(typ, h.object(typ, vals))
	vresp, err := h.server.ValidateDataResourceConfig(context.Background(), &tfprotov6.ValidateDataResourceConfigRequest{
		TypeName: "fediversity_submission", Config: cfg,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if hasErrors(vresp.Diagnostics) {
		return nil, vresp.Diagnostics
	}
	resp, err := h.server.ReadDataSource(context.Background(), &tfprotov6.ReadDataSourceRequest{
		TypeName: "fediversity_submission", Config: cfg,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if hasErrors(resp.Diagnostics) {
		return nil, resp.Diagnostics
	}
	state, err := resp.State.Unmarshal(typ)
	if err != nil {
		h.t.Fatal(err)
	}
	return toGo(h.t, state).(map[string]any), resp.Diagnostics
}

func toGo(t *testing.T, v tftypes.Value) any {
	t.Helper()
	if v.IsNull() {
		return nil
	}
	switch {
	case v.Type().Is(tftypes.String):
		var s string
		_ = v.As(&s)
		return s
	case v.Type().Is(tftypes.Map{}) || v.Type().Is(tftypes.Object{}):
		var m map[string]tftypes.Value
		if err := v.As(&m); err != nil {
			t.Fatal(err)
		}
		out := map[string]any{}
		for k, e := range m {
			out[k] = toGo(t, e)
		}
		return out
	case v.Type().Is(tftypes.List{}):
		var l []tftypes.Value
		if err := v.As(&l); err != nil {
			t.Fatal(err)
		}
		out := []any{}
		for _, e := range l {
			out = append(out, toGo(t, e))
		}
		return out
	}
	t.Fatalf("unexpected type %s", v.Type())
	return nil
}

func str(s string) tftypes.Value { return tftypes.NewValue(tftypes.String, s) }

func strList(s ...string) tftypes.Value {
	vals := make([]tftypes.Value, len(s))
	for i, e := range s {
		vals[i] = str(e)
	}
	return tftypes.NewValue(tftypes.List{ElementType: tftypes.String}, vals)
}

func strMap(m map[string]string) tftypes.Value {
	vals := map[string]tftypes.Value{}
	for k, v := range m {
		vals[k] = str(v)
	}
	return tftypes.NewValue(tftypes.Map{ElementType: tftypes.String}, vals)
}

func hasErrors(d []*tfprotov6.Diagnostic) bool {
	for _, e := range d {
		if e.Severity == tfprotov6.DiagnosticSeverityError {
			return true
		}
	}
	return false
}

func diagText(d []*tfprotov6.Diagnostic) string {
	var b strings.Builder
	for _, e := range d {
		fmt.Fprintf(&b, "[%s] %s: %s (at %v)\n", e.Severity, e.Summary, e.Detail, e.Attribute)
	}
	return b.String()
}

// Credential locations at provider level: Configure takes per-run credential locations (from the
// provider block and from the environment); none of them may reach a node plan or the
// data source's state, and two runs that stage them at different paths publish equal
// plans.
func TestSubmissionProviderConfigureDoesNotLeakPerRunValues(t *testing.T) {
	root := t.TempDir()
	run := func(stage string) map[string]any {
		t.Setenv("SSH_AUTH_SOCK", stage+"/agent.sock")
		t.Setenv("KUBE_CONFIG_PATH", stage+"/kubeconfig")
		t.Setenv("REGISTRY_AUTH_FILE", stage+"/auth.json")
		h := newProtoHarness(t)
		h.configure(map[string]tftypes.Value{
			"ssh_private_key_file": str(stage + "/id_ed25519"),
			"k8s_namespace":        str("fediversity"),
		})
		state, diags := h.read(map[string]tftypes.Value{
			"submission_json": str(`{"applications": {"mastodon": {"enable": true}, "pixelfed": {"enable": true}}}`),
			"baked_json":      str(submissionBaked),
			"method":          str("tf"),
			"operator_root":   str(root),
			"identity_keys":   strList("instance", "dns_zone"),
			"identity": strMap(map[string]string{
				"dns_zone": "example.org",
			}),
		})
		if state == nil {
			t.Fatalf("read failed:\n%s", diagText(diags))
		}
		// The identity map is itself kept in the data source's state: a staged
		// credential path in it is refused, naming the key.
		h2 := newProtoHarness(t)
		h2.configure(map[string]tftypes.Value{"ssh_private_key_file": str(stage + "/id_ed25519")})
		refused, diags := h2.read(map[string]tftypes.Value{
			"submission_json": str(`{"applications": {"mastodon": {"enable": true}}}`),
			"baked_json":      str(submissionBaked),
			"method":          str("tf"),
			"operator_root":   str(root),
			"identity_keys":   strList("instance", "dns_zone"),
			"identity":        strMap(map[string]string{"dns_zone": "example.org", "ssh_key": stage + "/id_ed25519"}),
		})
		if refused != nil || !strings.Contains(diagText(diags), `Per-run value refused: identity["ssh_key"]`) {
			t.Fatalf("a staged credential path in identity was not refused:\n%s", diagText(diags))
		}
		return state
	}
	a := run("/tmp/fediversity-stage-aaaa")
	b := run("/run/user/0/fediversity-stage-bbbb")
	for _, attr := range []string{"node_plans", "node_plan_digests", "enabled_nodes", "digest", "merged"} {
		ja, _ := json.Marshal(a[attr])
		jb, _ := json.Marshal(b[attr])
		if string(ja) != string(jb) {
			t.Errorf("%s differs between two credential locations:\n%s\n%s", attr, ja, jb)
		}
	}
	for _, state := range []map[string]any{a, b} {
		computed := map[string]any{}
		for _, attr := range []string{"node_plans", "node_plan_digests", "enabled_nodes", "disabled_applications", "digest", "merged"} {
			computed[attr] = state[attr]
		}
		text, _ := json.Marshal(computed)
		if strings.Contains(string(text), "fediversity-stage-") {
			t.Fatalf("a per-run credential location reached the published values: %s", text)
		}
	}
	plans := a["node_plans"].(map[string]any)
	if len(plans) != 3 {
		t.Fatalf("node_plans has %d entries, want 3: %v", len(plans), plans)
	}
	var plan map[string]any
	if err := json.Unmarshal([]byte(plans["web02"].(string)), &plan); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"instance": "fedi-n2", "dns_zone": "example.org"}
	if fmt.Sprint(plan["identity"]) != fmt.Sprint(want) {
		t.Fatalf("web02 identity = %v, want only the declared keys %v", plan["identity"], want)
	}
}

// The provider's configured credential location, placed in a submission, is refused
// with a diagnostic that names the plan path and the provider attribute.
func TestSubmissionRefusesTheProvidersCredentialLocation(t *testing.T) {
	h := newProtoHarness(t)
	key := filepath.Join(t.TempDir(), "id_ed25519")
	h.configure(map[string]tftypes.Value{"ssh_private_key_file": str(key)})
	_, diags := h.read(map[string]tftypes.Value{
		"submission_json": str(`{"applications": {"mastodon": {"enable": true, "deploy_key": "` + key + `"}}}`),
		"baked_json":      str(submissionBaked),
		"method":          str("tf"),
		"operator_root":   str(t.TempDir()),
	})
	text := diagText(diags)
	for _, want := range []string{"Unable to read submission", "$.nodes.web01.applications.mastodon.deploy_key", "ssh_private_key_file"} {
		if !strings.Contains(text, want) {
			t.Fatalf("diagnostics do not contain %q:\n%s", want, text)
		}
	}
}

func TestSubmissionDataSourceValidation(t *testing.T) {
	h := newProtoHarness(t)
	h.configure(nil)
	base := func() map[string]tftypes.Value {
		return map[string]tftypes.Value{
			"baked_json":      str(submissionBaked),
			"method":          str("tf"),
			"submission_json": str(`{"applications": {"mastodon": {"enable": true}}}`),
		}
	}
	tests := []struct {
		name   string
		change func(map[string]tftypes.Value)
		want   []string
	}{
		{"both file and JSON", func(v map[string]tftypes.Value) { v["submission_file"] = str("/x.json") }, []string{"submission_file", "submission_json"}},
		{"neither file nor JSON", func(v map[string]tftypes.Value) { delete(v, "submission_json") }, []string{"submission_file", "submission_json"}},
		{"unknown method", func(v map[string]tftypes.Value) { v["method"] = str("nixops") }, []string{"tf-incus-operator", "nixops"}},
		{"credential identity key", func(v map[string]tftypes.Value) { v["identity_keys"] = strList("KUBE_CONFIG_PATH") },
			[]string{"Unable to read submission", "identity_keys", "KUBE_CONFIG_PATH", "per-run credential"}},
		{"missing file", func(v map[string]tftypes.Value) {
			delete(v, "submission_json")
			v["submission_file"] = str(filepath.Join(t.TempDir(), "nope.json"))
		}, []string{"Unable to read submission", "nope.json", "no such file"}},
		{"bad JSON", func(v map[string]tftypes.Value) { v["submission_json"] = str(`{"applications": `) },
			[]string{"Unable to read submission", "The submission (submission_json)", "$.applications", "ends early"}},
		{"node map without names", func(v map[string]tftypes.Value) {
			v["baked_json"] = str(`{"nodes": {}, "applications": {"mastodon": {}}}`)
		}, []string{"Unable to read submission", "baked_json", "$.nodes", "publishes no node names"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := base()
			tt.change(v)
			state, diags := h.read(v)
			if state != nil {
				t.Fatalf("read succeeded, want an error")
			}
			text := diagText(diags)
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("diagnostics do not contain %q:\n%s", w, text)
				}
			}
		})
	}
}

func TestSubmissionDataSourceSchemaIsDocumented(t *testing.T) {
	var resp datasource.SchemaResponse
	submissionds.NewSubmissionDataSource().Schema(context.Background(), datasource.SchemaRequest{}, &resp)
	if resp.Schema.MarkdownDescription == "" {
		t.Error("the data source has no MarkdownDescription")
	}
	for name, a := range resp.Schema.Attributes {
		if len(a.GetMarkdownDescription()) < 40 {
			t.Errorf("attribute %s has no real MarkdownDescription: %q", name, a.GetMarkdownDescription())
		}
	}
}

// ---------------------------------------------------------------------------
// Acceptance tests: the real terraform or tofu binary plans and applies.

const submissionV1 = `{"applications": {"mastodon": {"enable": true}, "pixelfed": {"enable": true, "max_upload_mb": 15}}, "domain": "one.example"}`

// The same data as submissionV1, formatted and ordered differently.
const submissionV1Reformatted = `{
  "domain": "one.example",
  "applications": {
    "pixelfed": {"max_upload_mb": 15, "enable": true},
    "mastodon": {"enable": true}
  }
}
`

// submissionV2 changes one application, pixelfed, which web02 and web03 run.
const submissionV2 = `{"applications": {"mastodon": {"enable": true}, "pixelfed": {"enable": true, "max_upload_mb": 100}}, "domain": "one.example"}`

func submissionAccConfig(file, bakedFile, root, stage string) string {
	return acctest.Config(fmt.Sprintf(`
provider "fediversity" {
  ssh_private_key_file = %[4]q
}

data "fediversity_submission" "this" {
  submission_file = %[1]q
  baked_json      = file(%[2]q)
  method          = "tf"
  operator_root   = %[3]q
  identity_keys   = ["instance"]
}

# Each node's deploy consumes its plan; terraform_data stands in for it here. One
# resource per node, not for_each: terraform-plugin-testing cannot read for_each state.
resource "terraform_data" "web01" {
  input = lookup(data.fediversity_submission.this.node_plans, "web01", "")
}
resource "terraform_data" "web02" {
  input = lookup(data.fediversity_submission.this.node_plans, "web02", "")
}
resource "terraform_data" "web03" {
  input = lookup(data.fediversity_submission.this.node_plans, "web03", "")
}

output "digest" {
  value = data.fediversity_submission.this.digest
}
`, file, bakedFile, root, stage))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustDigest(t *testing.T, s string) string {
	t.Helper()
	d, err := submission.Digest([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// expectChangedNodePlans checks that, of the resources that consume node plans
// (terraform_data.<node>), exactly the named nodes have a planned change, and that each
// change is a change of the node's plan.
type expectChangedNodePlans struct {
	nodes []string
}

func (e expectChangedNodePlans) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	var changed, seen []string
	for _, rc := range req.Plan.ResourceChanges {
		if rc.Type != "terraform_data" {
			continue
		}
		seen = append(seen, rc.Name)
		if rc.Change.Actions.NoOp() {
			continue
		}
		before, _ := rc.Change.Before.(map[string]any)
		after, _ := rc.Change.After.(map[string]any)
		if before == nil || after == nil || fmt.Sprint(before["input"]) == fmt.Sprint(after["input"]) {
			resp.Error = fmt.Errorf("%s is planned to %v without a change of its node plan", rc.Address, rc.Change.Actions)
			return
		}
		changed = append(changed, rc.Name)
	}
	sort.Strings(changed)
	want := append([]string(nil), e.nodes...)
	sort.Strings(want)
	if len(seen) == 0 {
		resp.Error = fmt.Errorf("the plan has no terraform_data resource")
		return
	}
	if strings.Join(changed, ",") != strings.Join(want, ",") {
		resp.Error = fmt.Errorf("node plans changed for %v, want exactly %v (resources in the plan: %v)", changed, want, seen)
	}
}

// End to end: a change of one application shows a diff only in
// the plans of the nodes that run it; an unchanged (even reformatted) submission and a
// new credential location give an empty plan.
func TestAccSubmissionDataSource_nodePlanDiffs(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "submission.json")
	bakedFile := filepath.Join(dir, "baked.json")
	writeFile(t, bakedFile, submissionBaked)
	data := "data.fediversity_submission.this"
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() { writeFile(t, file, submissionV1) },
				Config:    submissionAccConfig(file, bakedFile, dir, "/tmp/stage-aaaa/id_ed25519"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(data, tfjsonpath.New("digest"), knownvalue.StringExact(mustDigest(t, submissionV1))),
					statecheck.ExpectKnownValue(data, tfjsonpath.New("enabled_nodes"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.StringExact("web01"), knownvalue.StringExact("web02"), knownvalue.StringExact("web03"),
					})),
					statecheck.ExpectKnownValue(data, tfjsonpath.New("disabled_applications"), knownvalue.ListSizeExact(0)),
					statecheck.ExpectKnownValue(data, tfjsonpath.New("node_plans"), knownvalue.MapSizeExact(3)),
					statecheck.ExpectKnownValue(data, tfjsonpath.New("node_plans").AtMapKey("web02"),
						knownvalue.StringRegexp(regexp.MustCompile(`"identity":\{"instance":"fedi-n2"\}`))),
					statecheck.ExpectKnownValue(data, tfjsonpath.New("node_plan_digests"), knownvalue.MapSizeExact(3)),
					statecheck.ExpectKnownOutputValue("digest", knownvalue.StringExact(mustDigest(t, submissionV1))),
				},
			},
			{
				// Same data, other formatting, and the credential staged elsewhere: nothing to do.
				PreConfig: func() { writeFile(t, file, submissionV1Reformatted) },
				Config:    submissionAccConfig(file, bakedFile, dir, "/run/user/0/stage-bbbb/id_ed25519"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
			},
			{
				PreConfig: func() { writeFile(t, file, submissionV2) },
				Config:    submissionAccConfig(file, bakedFile, dir, "/run/user/0/stage-bbbb/id_ed25519"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction("terraform_data.web01", plancheck.ResourceActionNoop),
						plancheck.ExpectResourceAction("terraform_data.web02", plancheck.ResourceActionUpdate),
						plancheck.ExpectResourceAction("terraform_data.web03", plancheck.ResourceActionUpdate),
						expectChangedNodePlans{nodes: []string{"web02", "web03"}},
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("digest", knownvalue.StringExact(mustDigest(t, submissionV2))),
				},
			},
			{
				// The submission names mastodon without enabling it: web01 leaves node_plans
				// (its consumer sees its plan go away) and web03 keeps only pixelfed.
				PreConfig: func() {
					writeFile(t, file, `{"applications": {"mastodon": {}, "pixelfed": {"enable": true, "max_upload_mb": 100}}, "domain": "one.example"}`)
				},
				Config: submissionAccConfig(file, bakedFile, dir, "/run/user/0/stage-bbbb/id_ed25519"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction("terraform_data.web01", plancheck.ResourceActionUpdate),
						plancheck.ExpectResourceAction("terraform_data.web02", plancheck.ResourceActionNoop),
						expectChangedNodePlans{nodes: []string{"web01", "web03"}},
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(data, tfjsonpath.New("enabled_nodes"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.StringExact("web02"), knownvalue.StringExact("web03"),
					})),
					statecheck.ExpectKnownValue(data, tfjsonpath.New("disabled_applications"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.StringExact("mastodon"),
					})),
				},
			},
		},
	})
}

// A per-run value (a credential staged under /tmp) given in `identity` is refused at
// plan: the map is stored in the state, so it would change every plan and keep a
// credential location there.
func TestAccSubmissionDataSource_refusesPerRunIdentity(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "submission.json")
	bakedFile := filepath.Join(dir, "baked.json")
	writeFile(t, bakedFile, submissionBaked)
	writeFile(t, file, submissionV1)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: acctest.Config(fmt.Sprintf(`
data "fediversity_submission" "this" {
  submission_file = %q
  baked_json      = file(%q)
  method          = "tf"
  operator_root   = %q
  identity_keys   = ["instance"]
  identity = {
    staged_credential = "/tmp/stage-aaaa/id_ed25519"
  }
}
`, file, bakedFile, dir)),
			ExpectError: regexp.MustCompile(`(?s)Per-run value refused.*staged_credential.*/tmp/stage-aaaa/id_ed25519`),
		}},
	})
}

// A bad submission fails the plan with an error that names the place in the plan.
func TestAccSubmissionDataSource_badSubmission(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "submission.json")
	bakedFile := filepath.Join(dir, "baked.json")
	writeFile(t, bakedFile, submissionBaked)
	outside := filepath.Join(t.TempDir(), "mastodon.key")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					writeFile(t, file, `{"applications": {"mastodon": {"enable": true, "key": {"_file": "`+outside+`"}}}}`)
				},
				Config: submissionAccConfig(file, bakedFile, dir, "/tmp/stage/id"),
				ExpectError: regexp.MustCompile(`(?s)Unable to read submission.*\$\.nodes\.web01\.applications\.mastodon\.key` +
					`.*outside\s+the\s+operator\s+tree`),
			},
			{
				PreConfig: func() {
					writeFile(t, file, `{"applications": {"mastodon": {"enable": true, "version": "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-mastodon"}}}`)
				},
				Config:      submissionAccConfig(file, bakedFile, dir, "/tmp/stage/id"),
				ExpectError: regexp.MustCompile(`(?s)Unable to read submission.*\$\.nodes\.web01\.applications\.mastodon\.version.*Nix\s+store\s+path`),
			},
			{
				PreConfig:   func() { writeFile(t, file, `{"applications": {"mastodon": {"enable": "yes"}}}`) },
				Config:      submissionAccConfig(file, bakedFile, dir, "/tmp/stage/id"),
				ExpectError: regexp.MustCompile(`(?s)Unable to read submission.*\$\.applications\.mastodon\.enable.*not\s+true\s+or\s+false`),
			},
		},
	})
}
