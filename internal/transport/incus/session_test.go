package incus

import (
	"strings"
	"testing"
)

func TestCutFramedReadsOneCommandsFrame(t *testing.T) {
	const b = "0123456789abcdef0123456789abcdef"
	other := strings.Repeat("f", 32)
	for _, tc := range []struct {
		name, buf       string
		withCode        bool
		started, ok     bool
		body, rest      string
		code            int
		wantErrContains string
	}{
		{name: "nothing yet", buf: "", withCode: true},
		{name: "start only", buf: "\n" + b + " start\npartial", withCode: true, started: true},
		{name: "end marker cut short", buf: "\n" + b + " start\nx\n" + b + " done 0", withCode: true, started: true},
		{name: "whole, no final newline in output", buf: "\n" + b + " start\nout\n" + b + " done 7\n", withCode: true, started: true, ok: true, body: "out", code: 7},
		{name: "output ending in newlines", buf: "\n" + b + " start\nout\n\n\n" + b + " done 0\n", withCode: true, started: true, ok: true, body: "out\n\n"},
		{name: "stray bytes of an earlier background process are dropped", buf: "late noise\n" + b + " start\nx\n" + b + " done 0\nnext", withCode: true, started: true, ok: true, body: "x", rest: "next"},
		{name: "another command's boundary is just output", buf: "\n" + b + " start\n\n" + other + " done 3\n\n" + b + " done 1\n", withCode: true, started: true, ok: true, body: "\n" + other + " done 3\n", code: 1},
		{name: "stderr has no code", buf: "\n" + b + " start\nerr\n" + b + " done\n", started: true, ok: true, body: "err"},
		{name: "unreadable code", buf: "\n" + b + " start\n\n" + b + " done x\n", withCode: true, started: true, wantErrContains: "unreadable exit code"},
		{name: "stderr marker with junk", buf: "\n" + b + " start\n\n" + b + " done 3\n", started: true, wantErrContains: "malformed end marker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, code, rest, started, ok, err := cutFramed([]byte(tc.buf), b, tc.withCode)
			if tc.wantErrContains != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrContains) {
					t.Fatalf("err = %v, want %q", err, tc.wantErrContains)
				}
				return
			}
			if err != nil || started != tc.started || ok != tc.ok || string(body) != tc.body || code != tc.code || string(rest) != tc.rest {
				t.Fatalf("got body %q code %d rest %q started %v ok %v err %v", body, code, rest, started, ok, err)
			}
		})
	}
}
