package main

import (
	"go/token"
	"strings"
	"testing"
)

// Every script and command the provider sends to a node calls only what a default
// NixOS system has (systemd's own commands only, in a unit), or names it by an
// absolute path. This is the check `make lint` runs, as a unit test CI runs too.
func TestNodeScriptsRunOnNixOS(t *testing.T) {
	rep, err := Check("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Scripts) < 30 {
		t.Fatalf("found only %d node-side scripts: the source scan lost them", len(rep.Scripts))
	}
	for _, f := range rep.Known {
		t.Logf("known (owned elsewhere): %s", f)
	}
	for _, f := range rep.Faults {
		t.Error(f)
	}
}

// The check itself: a unit script that calls a tool systemd's bin lacks is a fault, one
// that sets a system's sw/bin on its PATH first is not, and a login script may call
// what a default NixOS system has but nothing else.
func TestCheckerTellsUnitFromLogin(t *testing.T) {
	c := &checker{al: allowed{login: setOf([]string{"mv", "sleep", "systemctl", "flock", "timeout", "find"}), unit: setOf([]string{"systemctl"})}, rep: &Report{}, seen: map[string]bool{}}
	for _, tc := range []struct {
		where, text string
		fault       string
	}{
		{unit, `sleep 1; mv a b`, `calls "sleep"`},
		{unit, `PATH=$1/sw/bin:/run/current-system/sw/bin; sleep 1; mv a b`, ""},
		{unit, `"$1/bin/switch-to-configuration" test >"$3.out"; echo $? >"$3.rc"`, ""},
		{login, `systemd-run --unit=x --quiet /bin/sh -c 'sleep 5'`, `calls "sleep", which a NixOS systemd unit`},
		{login, `flock -n 9 && lslocks`, `calls "lslocks"`},
		{login, `command -v bootctl >/dev/null && exec timeout -k 2 5s systemctl is-system-running`, ""},
		{login, `find /run -name x -exec rm -f {} +`, `calls "rm"`},
	} {
		c.rep.Faults = nil
		c.script(&scope{p: &pkg{fset: token.NewFileSet()}}, token.NoPos, "t", tc.where, tc.text)
		got := strings.Join(c.rep.Faults, "\n")
		if (tc.fault == "") != (got == "") || !strings.Contains(got, tc.fault) {
			t.Errorf("%s %q: faults %q, want %q", tc.where, tc.text, got, tc.fault)
		}
	}
}
