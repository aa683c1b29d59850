package submission

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// bakedFixture is a baked configuration with three nodes: web01 runs mastodon,
// web02 runs pixelfed, web03 runs both.
const bakedFixture = `{
  "nodes": {
    "web01": {"applications": ["mastodon"], "identity": {"instance": "fedi-n1", "ssh_key_path": "/tmp/stage-1/key"}, "module": {"_file": "nodes/web01.nix"}},
    "web02": {"applications": ["pixelfed"], "identity": {"instance": "fedi-n2"}},
    "web03": {"applications": ["mastodon", "pixelfed"]}
  },
  "applications": {
    "mastodon": {"enable": true, "streaming": {"workers": 2}},
    "pixelfed": {"enable": true, "max_upload_mb": 15}
  },
  "domain": "baked.example",
  "email": "baked@example.org",
  "dns": {"zone": "baked.example"}
}`

func evaluate(t *testing.T, in Input) *Result {
	t.Helper()
	if in.OperatorRoot == "" {
		in.OperatorRoot = t.TempDir()
	}
	if in.Method == "" {
		in.Method = "tf"
	}
	if in.Baked == nil {
		in.Baked = []byte(bakedFixture)
	}
	res, err := Evaluate(in)
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	return res
}

func evaluateErr(t *testing.T, in Input) Errors {
	t.Helper()
	if in.OperatorRoot == "" {
		in.OperatorRoot = t.TempDir()
	}
	if in.Method == "" {
		in.Method = "tf"
	}
	if in.Baked == nil {
		in.Baked = []byte(bakedFixture)
	}
	res, err := Evaluate(in)
	if err == nil {
		t.Fatalf("Evaluate succeeded with plans %v, want an error", res.NodePlans)
	}
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Evaluate error %T %v, want Errors", err, err)
	}
	return errs
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return m
}

func dig(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		o, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = o[k]
	}
	return v
}

func wantError(t *testing.T, errs Errors, path, problem string) *PathError {
	t.Helper()
	e := findError(errs, path, problem)
	if e == nil {
		t.Fatalf("no error at %s containing %q; got:\n%v", path, problem, errs)
	}
	return e
}

// requireError is wantError for callers that only check the error is there.
func requireError(t *testing.T, errs Errors, path, problem string) {
	t.Helper()
	if findError(errs, path, problem) == nil {
		t.Fatalf("no error at %s containing %q; got:\n%v", path, problem, errs)
	}
}

func findError(errs Errors, path, problem string) *PathError {
	for _, e := range errs {
		if e.Path == path && strings.Contains(e.Problem, problem) {
			return e
		}
	}
	return nil
}

// An application named without enable is off.
func TestMergeNamedButNotEnabledIsOff(t *testing.T) {
	for _, sub := range []string{
		`{"applications": {"mastodon": {"streaming": {"workers": 4}}}}`,
		`{"applications": {"mastodon": {"enable": false}}}`,
		`{"applications": {"mastodon": {}}}`,
	} {
		res := evaluate(t, Input{Submission: []byte(sub)})
		merged := decode(t, res.Merged)
		if on := dig(merged, "applications", "mastodon", "enable"); on != false {
			t.Errorf("%s: merged mastodon.enable = %v, want false", sub, on)
		}
		if !reflect.DeepEqual(res.DisabledApplications, []string{"mastodon"}) {
			t.Errorf("%s: disabled_applications = %v, want [mastodon]", sub, res.DisabledApplications)
		}
		// web01 ran only mastodon, so it is disabled and has no plan.
		if !reflect.DeepEqual(res.EnabledNodes, []string{"web02", "web03"}) {
			t.Errorf("%s: enabled_nodes = %v, want [web02 web03]", sub, res.EnabledNodes)
		}
		if _, ok := res.NodePlans["web01"]; ok {
			t.Errorf("%s: disabled node web01 has a plan", sub)
		}
		if apps := dig(decode(t, res.NodePlans["web03"]), "applications"); !reflect.DeepEqual(keysOf(apps), []string{"pixelfed"}) {
			t.Errorf("%s: web03 plan applications = %v, want only pixelfed", sub, keysOf(apps))
		}
	}
}

// An application not named keeps its baked entry.
func TestMergeNotNamedKeepsBakedEntry(t *testing.T) {
	res := evaluate(t, Input{Submission: []byte(`{"applications": {"mastodon": {"enable": true}}}`)})
	merged := decode(t, res.Merged)
	want := map[string]any{"enable": true, "max_upload_mb": float64(15)}
	if got := dig(merged, "applications", "pixelfed"); !reflect.DeepEqual(got, want) {
		t.Fatalf("pixelfed = %v, want the baked entry %v", got, want)
	}
	// The named one merges key by key over its baked entry.
	if got := dig(merged, "applications", "mastodon", "streaming", "workers"); got != float64(2) {
		t.Fatalf("mastodon.streaming.workers = %v, want the baked 2", got)
	}
	if len(res.DisabledApplications) != 0 {
		t.Fatalf("disabled_applications = %v, want none", res.DisabledApplications)
	}
}

// Applications, domain and email in the method branch move
// to the top level and the branch goes away.
func TestMergeRaisesMethodBranch(t *testing.T) {
	sub := `{
	  "domain": "top.example",
	  "tf-incus": {"applications": {"mastodon": {"enable": true}, "pixelfed": {"enable": false}}, "domain": "branch.example", "email": "branch@example.org"},
	  "k8s": {"domain": "other-method.example"}
	}`
	res := evaluate(t, Input{Submission: []byte(sub), Method: "tf-incus"})
	merged := decode(t, res.Merged)
	for _, m := range Methods {
		if _, ok := merged[m]; ok {
			t.Errorf("merged configuration still has the method branch %q", m)
		}
	}
	if merged["domain"] != "branch.example" || merged["email"] != "branch@example.org" {
		t.Errorf("domain/email = %v/%v, want the branch values", merged["domain"], merged["email"])
	}
	if !reflect.DeepEqual(res.DisabledApplications, []string{"pixelfed"}) {
		t.Errorf("disabled_applications = %v, want [pixelfed]", res.DisabledApplications)
	}
	plan := decode(t, res.NodePlans["web01"])
	if plan["domain"] != "branch.example" || plan["method"] != "tf-incus" {
		t.Errorf("web01 plan domain/method = %v/%v", plan["domain"], plan["method"])
	}
	if _, ok := dig(plan, "shared").(map[string]any)["k8s"]; ok {
		t.Errorf("another method's branch leaked into the plan: %s", res.NodePlans["web01"])
	}
	if len(res.Warnings) != 0 {
		t.Errorf("unexpected warnings %v", res.Warnings)
	}
}

func TestMergeBranchDropsOtherKeysWithAWarning(t *testing.T) {
	res := evaluate(t, Input{Submission: []byte(`{"tf": {"domain": "d.example", "replicas": 3}}`), Method: "tf"})
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "$.tf.replicas") {
		t.Fatalf("warnings = %v, want one naming $.tf.replicas", res.Warnings)
	}
	if strings.Contains(res.Merged, "replicas") {
		t.Fatalf("dropped key reached the merged configuration: %s", res.Merged)
	}
}

// Changing one application changes only the plans of the nodes that run it.
func TestChangingOneApplicationChangesOnlyItsNodes(t *testing.T) {
	a := evaluate(t, Input{Submission: []byte(`{"applications": {"pixelfed": {"enable": true, "max_upload_mb": 15}}}`)})
	b := evaluate(t, Input{Submission: []byte(`{"applications": {"pixelfed": {"enable": true, "max_upload_mb": 100}}}`)})
	if a.Digest == b.Digest {
		t.Fatal("different submissions have one digest")
	}
	changed := []string{}
	for _, n := range a.EnabledNodes {
		if a.NodePlans[n] != b.NodePlans[n] {
			changed = append(changed, n)
			if a.NodePlanDigests[n] == b.NodePlanDigests[n] {
				t.Errorf("plan of %s changed but its digest did not", n)
			}
		} else if a.NodePlanDigests[n] != b.NodePlanDigests[n] {
			t.Errorf("plan of %s is equal but its digest changed", n)
		}
	}
	if !reflect.DeepEqual(changed, []string{"web02", "web03"}) {
		t.Fatalf("changed plans %v, want exactly the pixelfed nodes [web02 web03]", changed)
	}
}

// A change in the DNS domain changes the plans.
func TestDomainChangeChangesEveryPlan(t *testing.T) {
	a := evaluate(t, Input{Submission: []byte(`{"domain": "a.example"}`)})
	b := evaluate(t, Input{Submission: []byte(`{"domain": "b.example"}`)})
	for _, n := range a.EnabledNodes {
		if a.NodePlans[n] == b.NodePlans[n] {
			t.Errorf("plan of %s did not change with the domain", n)
		}
	}
}

// Credential locations never enter a plan: two runs that stage them at different
// places give equal plans.
func TestCredentialLocationsNeverEnterAPlan(t *testing.T) {
	sub := []byte(`{"applications": {"mastodon": {"enable": true}}}`)
	run := func(stage string) *Result {
		root := t.TempDir()
		return evaluate(t, Input{
			Submission:   sub,
			OperatorRoot: root,
			IdentityKeys: []string{"instance", "dns_provider"},
			Identity: map[string]string{
				"dns_provider":       "desec",
				"ssh_key_path":       stage + "/id_ed25519",
				"CREDENTIALS_DIR":    stage,
				"KUBE_CONFIG_PATH":   stage + "/kubeconfig",
				"REGISTRY_AUTH_FILE": stage + "/auth.json",
			},
			PerRunValues: map[string]string{
				"ssh_private_key_file": stage + "/id_ed25519",
				"kube_config_path":     stage + "/kubeconfig",
			},
		})
	}
	a, b := run("/tmp/stage-aaaa"), run("/run/user/0/stage-bbbb")
	if !reflect.DeepEqual(a.NodePlans, b.NodePlans) || !reflect.DeepEqual(a.NodePlanDigests, b.NodePlanDigests) {
		t.Fatalf("plans differ between two credential locations:\n%v\n%v", a.NodePlans, b.NodePlans)
	}
	for n, p := range a.NodePlans {
		if strings.Contains(p, "stage-") {
			t.Errorf("plan of %s holds a staged credential location: %s", n, p)
		}
	}
	id := dig(decode(t, a.NodePlans["web01"]), "identity")
	want := map[string]any{"instance": "fedi-n1", "dns_provider": "desec"}
	if !reflect.DeepEqual(id, want) {
		t.Fatalf("web01 identity = %v, want only the declared keys %v", id, want)
	}
}

func TestIdentityNodeValueWinsOverGlobal(t *testing.T) {
	res := evaluate(t, Input{
		IdentityKeys: []string{"instance"},
		Identity:     map[string]string{"instance": "global"},
	})
	for node, want := range map[string]string{"web01": "fedi-n1", "web02": "fedi-n2", "web03": "global"} {
		if got := dig(decode(t, res.NodePlans[node]), "identity", "instance"); got != want {
			t.Errorf("%s identity.instance = %v, want %s", node, got, want)
		}
	}
}

func TestCredentialIdentityKeyIsRefused(t *testing.T) {
	for _, key := range []string{"SSH_PRIVATE_KEY_FILE", "kubeconfig", "KUBE_CONFIG_PATH", "REGISTRY_AUTH_FILE", "CREDENTIALS_DIRECTORY", "ssh-auth-sock", "api_token"} {
		errs := evaluateErr(t, Input{IdentityKeys: []string{"instance", key}})
		e := wantError(t, errs, "identity_keys[1]", "per-run credential")
		if e.In != InIdentityKeys || !strings.Contains(e.Problem, key) {
			t.Errorf("error %v does not name identity_keys and %s", e, key)
		}
	}
	for _, key := range []string{"instance", "DNS_DOMAIN", "incus_project", "hosting_provider"} {
		if IsCredentialKey(key) {
			t.Errorf("%s taken for a credential key", key)
		}
	}
}

func TestPerRunValueInAPlanIsRefused(t *testing.T) {
	errs := evaluateErr(t, Input{
		Submission:   []byte(`{"applications": {"mastodon": {"enable": true, "deploy_key": "/tmp/stage-x/id_ed25519"}}}`),
		PerRunValues: map[string]string{"ssh_private_key_file": "/tmp/stage-x/id_ed25519"},
	})
	e := wantError(t, errs, "$.nodes.web01.applications.mastodon.deploy_key", "ssh_private_key_file")
	if e.In != InNodePlan || e.Node != "web01" {
		t.Fatalf("error %+v does not say it is web01's plan", e)
	}
}

// A non-data value is an error that names its path in the plan.
func TestNonDataValuesAreRefusedWithTheirPath(t *testing.T) {
	tests := []struct {
		name, value, wantPath, problem string
	}{
		{"nix store path", `"/nix/store/0123456789abcdfghijklmnpqrsvwxyz-mastodon-4.3"`, "$.nodes.web01.applications.mastodon.key", "Nix store path"},
		{"store path inside a string", `"--config=/nix/store/0123456789abcdfghijklmnpqrsvwxyz-cfg/x"`, "$.nodes.web01.applications.mastodon.key", "Nix store path"},
		{"interpolation", `"https://${var.domain}/"`, "$.nodes.web01.applications.mastodon.key", "interpolation"},
		{"unknown placeholder", `"74D93920-ED26-11E3-AC10-0800200C9A66"`, "$.nodes.web01.applications.mastodon.key", "not yet known"},
		{"nix lambda", `"«lambda @ /x/default.nix:3:5»"`, "$.nodes.web01.applications.mastodon.key", "function"},
		{"nix-instantiate lambda", `"<LAMBDA>"`, "$.nodes.web01.applications.mastodon.key", "function"},
		{"functor", `{"__functor": "f"}`, "$.nodes.web01.applications.mastodon.key.__functor", "function"},
		{"mkForce", `{"_type": "override", "priority": 50, "content": 1}`, "$.nodes.web01.applications.mastodon.key._type", "module-system"},
		{"derivation", `{"type": "derivation", "name": "x"}`, "$.nodes.web01.applications.mastodon.key", "derivation"},
		{"deep in a list", `[1, {"a": "<CODE>"}]`, "$.nodes.web01.applications.mastodon.key[1].a", "function"},
		{"bad file reference", `{"_file": "a", "mode": "0644"}`, "$.nodes.web01.applications.mastodon.key", "one key"},
		{"file reference not a string", `{"_file": 3}`, "$.nodes.web01.applications.mastodon.key", "one key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := `{"applications": {"mastodon": {"enable": true, "key": ` + tt.value + `}}}`
			errs := evaluateErr(t, Input{Submission: []byte(sub)})
			e := wantError(t, errs, tt.wantPath, tt.problem)
			if e.In != InNodePlan || e.Node != "web01" {
				t.Errorf("error %+v is not labelled as web01's node plan", e)
			}
			// web03 runs mastodon too: its plan is refused as well, under its own name.
			requireError(t, errs, strings.Replace(tt.wantPath, "web01", "web03", 1), tt.problem)
		})
	}
}

func TestFileReferences(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "nodes"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.key"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.key"), filepath.Join(root, "nodes", "link.key")); err != nil {
		t.Fatal(err)
	}
	at := "$.nodes.web01.applications.mastodon.key"
	t.Run("absolute inside the tree is stored relative", func(t *testing.T) {
		sub := `{"applications": {"mastodon": {"enable": true, "key": {"_file": "` + filepath.Join(root, "apps", "mastodon.nix") + `"}}}}`
		res := evaluate(t, Input{Submission: []byte(sub), OperatorRoot: root})
		plan := decode(t, res.NodePlans["web01"])
		if got := dig(plan, "applications", "mastodon", "key"); !reflect.DeepEqual(got, map[string]any{"_file": "apps/mastodon.nix"}) {
			t.Fatalf("key = %v, want {_file: apps/mastodon.nix}", got)
		}
		if got := dig(plan, "settings", "module"); !reflect.DeepEqual(got, map[string]any{"_file": "nodes/web01.nix"}) {
			t.Fatalf("settings.module = %v, want the baked relative reference", got)
		}
		if strings.Contains(res.NodePlans["web01"], root) {
			t.Fatalf("the plan names the operator tree's location: %s", res.NodePlans["web01"])
		}
	})
	t.Run("two checkouts of the tree give equal plans", func(t *testing.T) {
		other := t.TempDir()
		mk := func(r string) string {
			return `{"applications": {"mastodon": {"enable": true, "key": {"_file": "` + filepath.Join(r, "apps", "m.nix") + `"}}}}`
		}
		a := evaluate(t, Input{Submission: []byte(mk(root)), OperatorRoot: root})
		b := evaluate(t, Input{Submission: []byte(mk(other)), OperatorRoot: other})
		if a.NodePlans["web01"] != b.NodePlans["web01"] {
			t.Fatalf("plans differ between checkouts:\n%s\n%s", a.NodePlans["web01"], b.NodePlans["web01"])
		}
	})
	for _, tt := range []struct{ name, ref, problem string }{
		{"absolute outside the tree", filepath.Join(outside, "secret.key"), "outside the operator tree"},
		{"relative climbing out", "../elsewhere/x.nix", "leaves the operator tree"},
		{"link leading out", "nodes/link.key", "outside the operator tree"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sub := `{"applications": {"mastodon": {"enable": true, "key": {"_file": "` + tt.ref + `"}}}}`
			errs := evaluateErr(t, Input{Submission: []byte(sub), OperatorRoot: root})
			requireError(t, errs, at, tt.problem)
		})
	}
}

// A baked node map that publishes no node names is refused when a submission
// is given.
func TestNodeMapWithoutNamesIsRefusedWithASubmission(t *testing.T) {
	sub := []byte(`{"applications": {"mastodon": {"enable": true}}}`)
	for _, baked := range []string{
		`{"applications": {"mastodon": {"enable": true}}}`,
		`{"nodes": {}, "applications": {"mastodon": {"enable": true}}}`,
		`{"nodes": null, "applications": {"mastodon": {"enable": true}}}`,
	} {
		errs := evaluateErr(t, Input{Submission: sub, Baked: []byte(baked)})
		requireError(t, errs, "$.nodes", "publishes no node names")
		// Without a submission the same baked configuration is not refused.
		res := evaluate(t, Input{Baked: []byte(baked)})
		if len(res.NodePlans) != 0 || res.Digest != "" {
			t.Fatalf("without nodes and submission: plans %v digest %q", res.NodePlans, res.Digest)
		}
	}
}

func TestShapeErrorsNameTheirPlace(t *testing.T) {
	tests := []struct {
		name, baked, sub, method, in, path, problem string
	}{
		{"enable not a boolean", "", `{"applications": {"mastodon": {"enable": "yes"}}}`, "", InSubmission, "$.applications.mastodon.enable", "not true or false"},
		{"enable not a boolean in the branch", "", `{"tf": {"applications": {"mastodon": {"enable": 1}}}}`, "tf", InSubmission, "$.tf.applications.mastodon.enable", "not true or false"},
		{"application not an object", "", `{"applications": {"mastodon": true}}`, "", InSubmission, "$.applications.mastodon", "not an object"},
		{"branch not an object", "", `{"tf": ["mastodon"]}`, "tf", InSubmission, "$.tf", "not an object"},
		{"domain not a string", "", `{"domain": 5}`, "", InSubmission, "$.domain", "not a string"},
		{"submission not an object", "", `["mastodon"]`, "", InSubmission, "$", "not an object"},
		{"unknown application on a node", `{"nodes": {"web01": {"applications": ["peertube"]}}, "applications": {}}`, `{}`, "", InMerged, "$.nodes.web01.applications[0]", "does not define"},
		{"node applications not a list", `{"nodes": {"web01": {"applications": "mastodon"}}, "applications": {"mastodon": {}}}`, `{}`, "", InMerged, "$.nodes.web01.applications", "not a list"},
		{"baked method branch", `{"nodes": {"a": {}}, "ssh": {}}`, `{}`, "", InBaked, "$.ssh", "method branch"},
		{"unknown method", "", `{}`, "nixops", InMethod, "method", "not a deployment method"},
		{"duplicate key in the submission", "", `{"domain": "a", "domain": "b"}`, "", InSubmission, "$.domain", "appears twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Submission: []byte(tt.sub), Method: tt.method}
			if tt.baked != "" {
				in.Baked = []byte(tt.baked)
			}
			e := wantError(t, evaluateErr(t, in), tt.path, tt.problem)
			if e.In != tt.in {
				t.Fatalf("error is in %q, want %q", e.In, tt.in)
			}
		})
	}
}

func TestWarnsWhenAnEnabledApplicationRunsNowhere(t *testing.T) {
	res := evaluate(t, Input{Submission: []byte(`{"applications": {"peertube": {"enable": true}}}`)})
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "peertube") {
		t.Fatalf("warnings = %v, want one about peertube", res.Warnings)
	}
}

func TestDigestIsOfTheSubmissionAsRead(t *testing.T) {
	raw := []byte(`{"tf": {"domain": "x.example"}}`)
	res := evaluate(t, Input{Submission: raw})
	want, err := Digest(raw)
	if err != nil {
		t.Fatal(err)
	}
	if res.Digest != want {
		t.Fatalf("digest %s, want %s", res.Digest, want)
	}
	raised := evaluate(t, Input{Submission: []byte(`{"domain": "x.example"}`)})
	if raised.Digest == res.Digest {
		t.Fatal("the digest is of the merged form, not of the submission as read")
	}
	if raised.NodePlans["web01"] != res.NodePlans["web01"] {
		t.Fatal("the raised and the branch form give different plans")
	}
}

func TestEvaluateIsDeterministic(t *testing.T) {
	in := Input{Submission: []byte(`{"applications": {"mastodon": {"enable": true}}, "domain": "d.example"}`), OperatorRoot: t.TempDir(),
		IdentityKeys: []string{"instance"}}
	a, b := evaluate(t, in), evaluate(t, in)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two evaluations differ:\n%+v\n%+v", a, b)
	}
}

func keysOf(v any) []string {
	m, _ := v.(map[string]any)
	return sortedKeys(m)
}

func TestHoldsPath(t *testing.T) {
	for _, tt := range []struct {
		s, p string
		want bool
	}{
		{"/run/key", "/run/key", true},
		{"--identity=/run/key --x", "/run/key", true},
		{"/run/key/sub", "/run/key", true},
		{"/run/keys/x", "/run/key", false},
		{"/run/key.pub", "/run/key", false},
		{"/run/key_old /run/key", "/run/key", true},
		{"anything", "", false},
	} {
		if got := holdsPath(tt.s, tt.p); got != tt.want {
			t.Errorf("holdsPath(%q, %q) = %v, want %v", tt.s, tt.p, got, tt.want)
		}
	}
}

// A node plan's problem says which document set the value and where it is there, so
// the operator is pointed at a place that exists.
func TestNodePlanProblemNamesItsSource(t *testing.T) {
	baked := strings.Replace(bakedFixture, `"max_upload_mb": 15`, `"max_upload_mb": 15, "cfg": "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-cfg"`, 1)
	errs := evaluateErr(t, Input{Baked: []byte(baked),
		Submission: []byte(`{"applications": {"mastodon": {"enable": true, "key": "<LAMBDA>"}}}`)})
	fromBaked := wantError(t, errs, "$.nodes.web02.applications.pixelfed.cfg", "Nix store path")
	if fromBaked.Source != InBaked || fromBaked.SourcePath != "$.applications.pixelfed.cfg" {
		t.Errorf("baked value: source %q at %q", fromBaked.Source, fromBaked.SourcePath)
	}
	fromSub := wantError(t, errs, "$.nodes.web01.applications.mastodon.key", "function")
	if fromSub.Source != InSubmission || fromSub.SourcePath != "$.applications.mastodon.key" {
		t.Errorf("submitted value: source %q at %q", fromSub.Source, fromSub.SourcePath)
	}
}

// The operator methods are refused for a group that runs no application, through the
// catalog's per-group lookup, naming the methods the group can use.
func TestOperatorMethodNeedsAnApplication(t *testing.T) {
	baked := []byte(`{"nodes": {"web01": {}}, "applications": {}}`)
	for _, m := range []string{"tf-incus-operator", "k8s-operator"} {
		_, err := Evaluate(Input{Baked: baked, Method: m, OperatorRoot: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "available only for a group that runs an application") ||
			!strings.Contains(err.Error(), "ssh, tf, tf-incus, k8s") {
			t.Errorf("method %s for a group without applications: %v", m, err)
		}
	}
	if _, err := Evaluate(Input{Baked: baked, Method: "tf-incus", OperatorRoot: t.TempDir()}); err != nil {
		t.Errorf("tf-incus for a group without applications: %v", err)
	}
}
