package judge

import (
	"strings"
	"testing"
)

func TestValidateChecks(t *testing.T) {
	cases := map[string]struct {
		checks []NodeCheck
		probes []Probe
		want   string
	}{
		"ok":          {checks: []NodeCheck{{Name: "a", Argv: []string{"true"}}}, probes: []Probe{{Name: "b", TCP: "127.0.0.1:80"}}},
		"empty argv":  {checks: []NodeCheck{{Name: "a"}}, want: `check "a": argv is empty`},
		"same name":   {checks: []NodeCheck{{Name: "a", Argv: []string{"true"}}}, probes: []Probe{{Name: "a", TCP: "127.0.0.1:80"}}, want: "used twice"},
		"both":        {probes: []Probe{{Name: "b", TCP: "127.0.0.1:80", URL: "http://x/"}}, want: "exactly one of url and tcp"},
		"scheme":      {probes: []Probe{{Name: "b", URL: "ftp://u:pw@x/"}}, want: `"ftp://…@x/" is not http`},
		"tcp no port": {probes: []Probe{{Name: "b", TCP: "127.0.0.1"}}, want: "not host:port"},
	}
	for name, c := range cases {
		err := ValidateChecks(c.checks, c.probes)
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
}

func TestTailOutputMasksAndBounds(t *testing.T) {
	out := tailOutput(strings.Repeat("x", 1000) + "\nAuthorization: Bearer abc.def\ntoken=s3cr3t\n-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\nend")
	for _, leak := range []string{"abc.def", "s3cr3t", "AAAA"} {
		if strings.Contains(out, leak) {
			t.Fatalf("%q leaked in %q", leak, out)
		}
	}
	if len(out) > checkOutputTail+len("…") || !strings.HasSuffix(out, "end") {
		t.Fatalf("tail = %q (%d bytes)", out, len(out))
	}
}

// Credentials in the shapes check and probe output carries them: JSON and YAML
// answers of an API, and URLs with a user and password (a database URL in an error).
func TestMaskSecretsJSONAndURLs(t *testing.T) {
	for in, want := range map[string]string{
		`{"user": "app", "password": "hunter2", "ok": true}`:      `{"user": "app", "password": "(masked)", "ok": true}`,
		`{"access_token":"eyJhbGciOi.x.y","expires_in":3600}`:     `{"access_token":"(masked)","expires_in":3600}`,
		`{"token": 123456789, "user": "bob"}`:                     `{"token": (masked) "bob"}`,
		`{"secret": "with \"escaped\" quotes", "n": 1}`:           `{"secret": "(masked)", "n": 1}`,
		`{'api_key': 'k-123'}`:                                    `{'api_key': '(masked)'}`,
		"password: hunter2":                                       "password: (masked)",
		`"Authorization": "Basic dXNlcjpwYXNz"`:                   `"Authorization": "(masked)"`,
		"error: dial postgres://app:s3cret@db:5432/fedi: refused": "error: dial postgres://(masked)@db:5432/fedi: refused",
		"GET https://deploy:pa55word@registry.example/v2/ 401":    "GET https://(masked)@registry.example/v2/ 401",
		"https://user@example.org/ is fine":                       "https://user@example.org/ is fine",
		"redis://:onlypass@cache:6379":                            "redis://(masked)@cache:6379",
		`{"passwordless": true}`:                                  `{"passwordless": true}`,
	} {
		if got := maskSecrets(in); got != want {
			t.Errorf("maskSecrets(%q)\n got %q\nwant %q", in, got, want)
		}
	}
}
