package submission

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCanonical: whatever Parse accepts has a canonical form that is valid JSON, holds
// the same data as the input (as Go's decoder reads both) and is its own canonical form.
// Valid UTF-8 JSON that Parse refuses is refused only for a repeated key.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[true,false,null]}`, `123456789012345678901234567890`, `[-0,1.0,1e2,0.1,1e-7,1e21]`,
		`"a\"b\\c\n\u0001<&>\u2028é"`, `{"a":{"a":{"a":{}}}}`, `{"a":1,"a":2}`, `[1,2`, "\"\xff\"", `1e400`, `{} {}`,
		`{"\ud800":1}`, `[5e-324, 1.7976931348623157e308, -1.5e-10]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := Parse(raw)
		if err != nil {
			if json.Valid(raw) && utf8.Valid(raw) && !isDuplicateKey(err) && !strings.Contains(err.Error(), "does not fit") &&
				!strings.Contains(err.Error(), "nests deeper") {
				t.Fatalf("Parse refused valid JSON %q: %v", raw, err)
			}
			return
		}
		c, err := Canonical(v)
		if err != nil {
			t.Fatalf("Canonical of a parsed value: %v", err)
		}
		if !json.Valid(c) {
			t.Fatalf("canonical text %q is not JSON", c)
		}
		var a, b any
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatalf("encoding/json refuses what Parse accepted (%q): %v", raw, err)
		}
		if err := json.Unmarshal(c, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("canonical form changed the data:\n in  %q\n out %q", raw, c)
		}
		c2, err := CanonicalizeJSON(c)
		if err != nil || string(c2) != string(c) {
			t.Fatalf("canonical form is not stable: %q → %q (%v)", c, c2, err)
		}
		if strings.ContainsAny(string(c), "\n\t") {
			t.Fatalf("canonical form has white space: %q", c)
		}
	})
}

// FuzzMerge: for any baked configuration and submission, Evaluate never panics; when it
// succeeds, its published names agree with each other, every plan is canonical and its
// digest matches, the result depends on the data and not on its formatting, and no
// method branch survives the merge.
func FuzzMerge(f *testing.F) {
	f.Add([]byte(bakedFixture), []byte(`{"applications":{"mastodon":{"enable":true}}}`), uint8(0))
	f.Add([]byte(bakedFixture), []byte(`{"tf-incus":{"applications":{"pixelfed":{"enable":false}},"domain":"x"},"k8s":{}}`), uint8(2))
	f.Add([]byte(bakedFixture), []byte(`{"applications":{"mastodon":{}},"nodes":{"web09":{"applications":["mastodon"]}}}`), uint8(1))
	f.Add([]byte(`{"nodes":{}}`), []byte(`{}`), uint8(3))
	f.Add([]byte(`{"nodes":{"a":{"applications":["x","x"]}},"applications":{"x":{"enable":true,"f":{"_file":"a/../b"}}}}`), []byte(`{"applications":{"x":{"enable":true}}}`), uint8(4))
	f.Add([]byte(`{"nodes":{"n":{"applications":["a"],"identity":{"instance":"x","ssh_key":"/k"}}},"applications":{"a":{}}}`),
		[]byte(`{"ssh":{"applications":{"a":{"enable":true,"f":{"_file":"/srv/operator-tree/x"}}},"email":"e"},"shared":[1,2.5,null]}`), uint8(0))
	f.Add([]byte(`{"nodes":{"n":{"applications":["a"]}},"applications":{"a":{"enable":true}},"dns":{"zone":"z"}}`),
		[]byte(`{"applications":{"a":{"enable":true,"v":"/nix/store/0123456789abcdfghijklmnpqrsvwxyz-x"}}}`), uint8(0))
	f.Add([]byte(`{"nodes":{"n":{"applications":["a"]}},"applications":{"a":{"enable":true}}}`),
		[]byte(`{"k8s-operator":{"applications":{"a":{"enable":true,"m":{"_type":"override"}}},"other":1}}`), uint8(5))
	f.Fuzz(func(t *testing.T, baked, sub []byte, m uint8) {
		in := Input{Baked: baked, Submission: sub, Method: Methods[int(m)%len(Methods)],
			OperatorRoot: "/srv/operator-tree", IdentityKeys: []string{"instance"}, Identity: map[string]string{"instance": "i"}}
		res, err := Evaluate(in)
		if err != nil {
			if _, ok := err.(Errors); !ok {
				t.Fatalf("error of type %T, want Errors: %v", err, err)
			}
			return
		}
		planned := make([]string, 0, len(res.NodePlans))
		for n, p := range res.NodePlans {
			planned = append(planned, n)
			c, err := CanonicalizeJSON([]byte(p))
			if err != nil || string(c) != p {
				t.Fatalf("plan of %s is not canonical JSON: %q (%v)", n, p, err)
			}
			if res.NodePlanDigests[n] != sha256Hex([]byte(p)) {
				t.Fatalf("digest of %s does not match its plan", n)
			}
		}
		sort.Strings(planned)
		if !reflect.DeepEqual(planned, res.EnabledNodes) || len(res.NodePlanDigests) != len(planned) {
			t.Fatalf("enabled_nodes %v and node plans %v disagree", res.EnabledNodes, planned)
		}
		merged := map[string]any{}
		if err := json.Unmarshal([]byte(res.Merged), &merged); err != nil {
			t.Fatalf("merged is not a JSON object: %v", err)
		}
		for _, meth := range Methods {
			if _, ok := merged[meth]; ok {
				t.Fatalf("method branch %s survived the merge", meth)
			}
		}
		apps, _ := merged["applications"].(map[string]any)
		for _, d := range res.DisabledApplications {
			if appEnabled(apps, d) {
				t.Fatalf("%s is both disabled and enabled", d)
			}
		}
		// Formatting does not matter: the canonical texts of both inputs give the same result.
		cb, _ := CanonicalizeJSON(baked)
		cs, _ := CanonicalizeJSON(sub)
		in2 := in
		in2.Baked, in2.Submission = cb, cs
		res2, err := Evaluate(in2)
		if err != nil {
			t.Fatalf("canonical form of accepted input refused: %v", err)
		}
		if !reflect.DeepEqual(res, res2) {
			t.Fatalf("result depends on formatting:\n%+v\n%+v", res, res2)
		}
	})
}
