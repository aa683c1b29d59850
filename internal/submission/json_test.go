package submission

import (
	"errors"
	"strings"
	"testing"
)

func TestCanonical(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"sorted keys, no space", `{ "b": 1, "a": [true, false, null] }`, `{"a":[true,false,null],"b":1}`},
		{"nested objects sorted", `{"z":{"y":1,"x":{"b":2,"a":1}}}`, `{"z":{"x":{"a":1,"b":2},"y":1}}`},
		{"big integer keeps every digit", `{"id": 123456789012345678901234567890}`, `{"id":123456789012345678901234567890}`},
		{"negative zero", `[-0, -0.0, 0e5]`, `[0,0,0]`},
		{"integral float", `[1.0, 1e2, 2.50, 0.1, 1e-7, 1e21]`, `[1,100,2.5,0.1,1e-07,1e+21]`},
		{"escapes only what JSON requires", `["a\"b\\c\n\t\u0001", "<&>", "\u00e9", "\u2028"]`,
			"[\"a\\\"b\\\\c\\n\\t\\u0001\",\"<&>\",\"é\",\"\u2028\"]"},
		{"unicode keys sort by code point", `{"é":1,"z":2,"A":3}`, `{"A":3,"z":2,"é":1}`},
		{"empty containers", `{"a":{},"b":[]}`, `{"a":{},"b":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalizeJSON([]byte(tt.in))
			if err != nil {
				t.Fatalf("CanonicalizeJSON: %v", err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			again, err := CanonicalizeJSON(got)
			if err != nil || string(again) != string(got) {
				t.Fatalf("canonical form is not stable: %s → %s (%v)", got, again, err)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		name, in, wantPath, wantProblem string
	}{
		{"duplicate key", `{"applications":{"mastodon":{"enable":true,"enable":false}}}`, "$.applications.mastodon.enable", "appears twice"},
		{"invalid utf-8", "{\"a\":\"\xff\"}", "$", "not valid UTF-8"},
		{"trailing document", `{"a":1} {"b":2}`, "$", "more after the end"},
		{"empty", ``, "$", "ends early: it is empty or cut short"},
		{"truncated", `{"a":[1,2`, "$.a", "ends early: it is empty or cut short (a truncated file?), or a bracket or brace is not closed (stopped at byte 9 of 9, line 1)"},
		{"bad token with its line", "{\n\"a\": tru}", "$.a", "line 2"},
		{"number too large for a float", `{"a":1e400}`, "$.a", "does not fit"},
		{"odd key path", `{"a b":{"c":1,"c":2}}`, `$["a b"].c`, "appears twice"},
		{"too deep", strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2), "$" + strings.Repeat("[0]", MaxDepth+1), "nests deeper"},
		{"list index path", `{"a":[{"x":1,"x":1}]}`, `$.a[0].x`, "appears twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			var pe *PathError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) = %v, want a *PathError", tt.in, err)
			}
			if pe.Path != tt.wantPath || !strings.Contains(pe.Problem, tt.wantProblem) {
				t.Fatalf("got path %q problem %q, want path %q problem containing %q", pe.Path, pe.Problem, tt.wantPath, tt.wantProblem)
			}
		})
	}
}

func TestDigestIgnoresFormattingNotValues(t *testing.T) {
	a, err := Digest([]byte(`{"domain":"example.org","applications":{"mastodon":{"enable":true}}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Digest([]byte("{\n  \"applications\": { \"mastodon\": { \"enable\": true } },\n  \"domain\": \"example.org\"\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("key order and white space changed the digest: %s vs %s", a, b)
	}
	c, err := Digest([]byte(`{"domain":"example.org","applications":{"mastodon":{"enable":false}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if a == c {
		t.Fatalf("a changed value kept the digest %s", a)
	}
	if len(a) != 64 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Fatalf("digest %q is not 64 lower-case hex digits", a)
	}
}
