package deploybody

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// reboot-triggers as NixOS writes them (pkgs.writers.writeJSON: jq's layout), for a
// system on kernel k with kernel-params p and one switch inhibitor.
func triggersJSON(k, p, dbus string) string {
	return "{\n  \"dbus-implementation\": \"" + dbus + "\",\n  \"firmware\": \"/nix/store/fw-firmware\",\n" +
		"  \"kernel\": \"" + k + "\",\n  \"kernel-params\": \"" + p + "\"\n}\n"
}

// NixOS' rule, one table: reboot-triggers decide when both systems have them (a key
// present in both with another value; a key only one side has changes nothing), else
// kernel, initrd and kernel-modules; a changed switch inhibitor of the running system
// needs a reboot too; a changed systemd alone never does (it is not compared at all).
func TestRebootWhy(t *testing.T) {
	parts := func(k string) map[string]string {
		return map[string]string{"kernel": k + "/bzImage", "initrd": k + "/initrd", "kernel-modules": k + "/lib"}
	}
	trig := func(k, p, dbus string) map[string]string { return parseComponents([]byte(triggersJSON(k, p, dbus))) }
	const k612, k618 = "/nix/store/k612-linux-6.12", "/nix/store/k618-linux-6.18"
	for _, tc := range []struct {
		name          string
		node, planned *RebootFacts
		want          string
	}{
		{"no booted system: the switch decides", nil, &RebootFacts{Parts: parts(k618)}, ""},
		{"kernel-params only",
			&RebootFacts{Parts: parts(k612), Triggers: trig(k612, "quiet", "dbus")},
			&RebootFacts{Parts: parts(k612), Triggers: trig(k612, "quiet,console=ttyS0", "dbus")},
			"reboot-triggers changed: kernel-params : quiet -> quiet,console=ttyS0"},
		{"firmware and kernel, sorted",
			&RebootFacts{Parts: parts(k612), Triggers: map[string]string{"kernel": k612, "firmware": "/nix/store/fw1"}},
			&RebootFacts{Parts: parts(k618), Triggers: map[string]string{"kernel": k618, "firmware": "/nix/store/fw2"}},
			"reboot-triggers changed: firmware : /nix/store/fw1 -> /nix/store/fw2; kernel : " + k612 + " -> " + k618},
		{"the same triggers, another toplevel (a systemd change): no reboot",
			&RebootFacts{Parts: parts(k612), Triggers: trig(k612, "quiet", "dbus")},
			&RebootFacts{Parts: parts(k612), Triggers: trig(k612, "quiet", "dbus")}, ""},
		{"triggers decide over the links: the links differ, the triggers do not",
			&RebootFacts{Parts: parts(k612), Triggers: map[string]string{"kernel-params": "quiet"}},
			&RebootFacts{Parts: parts(k618), Triggers: map[string]string{"kernel-params": "quiet"}}, ""},
		{"a key only the new system has changes nothing",
			&RebootFacts{Parts: parts(k612), Triggers: map[string]string{"kernel": k612}},
			&RebootFacts{Parts: parts(k612), Triggers: map[string]string{"kernel": k612, "firmware": "/nix/store/fw"}}, ""},
		{"a switch inhibitor in the triggers",
			&RebootFacts{Parts: parts(k612), Triggers: trig(k612, "quiet", "dbus")},
			&RebootFacts{Parts: parts(k612), Triggers: trig(k612, "quiet", "broker")},
			"reboot-triggers changed: dbus-implementation : dbus -> broker"},
		{"booted without triggers: kernel, initrd, kernel-modules",
			&RebootFacts{Parts: parts(k612)},
			&RebootFacts{Parts: parts(k618), Triggers: trig(k618, "quiet", "dbus")},
			"kernel, initrd, kernel-modules changed"},
		{"new system without triggers, same kernel",
			&RebootFacts{Parts: parts(k612), Triggers: trig(k612, "quiet", "dbus")},
			&RebootFacts{Parts: parts(k612)}, ""},
		{"an initrd alone",
			&RebootFacts{Parts: map[string]string{"kernel": "k", "initrd": "i1", "kernel-modules": "m"}},
			&RebootFacts{Parts: map[string]string{"kernel": "k", "initrd": "i2", "kernel-modules": "m"}},
			"initrd changed"},
		{"a changed inhibitor of the running system (a container: no kernel)",
			&RebootFacts{Parts: parts(""), Inhibitors: map[string]string{"nvidia": "570"}},
			&RebootFacts{Parts: parts(""), Inhibitors: map[string]string{"nvidia": "575", "new": "x"}},
			"switch inhibitors changed: nvidia : 570 -> 575"},
		{"an inhibitor the running system lacks",
			&RebootFacts{Parts: parts("")},
			&RebootFacts{Parts: parts(""), Inhibitors: map[string]string{"nvidia": "575"}}, ""},
	} {
		if got := rebootWhy(tc.node, tc.planned); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A components file that is not a JSON object counts as an empty one, as NixOS' own
// `try fromjson catch {}`; a value that is not a string compares as its JSON text.
func TestParseComponents(t *testing.T) {
	for in, want := range map[string]map[string]string{
		triggersJSON("/k", "a b", "dbus"): {"dbus-implementation": "dbus", "firmware": "/nix/store/fw-firmware", "kernel": "/k", "kernel-params": "a b"},
		"":                                {},
		"not json":                        {},
		`["kernel"]`:                      {},
		`null`:                            {},
		`{"n": 3, "o": {"a": [1, 2]}}`:    {"n": "3", "o": `{"a":[1,2]}`},
	} {
		if got := parseComponents([]byte(in)); !reflect.DeepEqual(got, want) {
			t.Errorf("parseComponents(%q) = %v, want %v", in, got, want)
		}
	}
}

// The node's facts are printed by the real script, run here by sh on a system laid out
// as NixOS lays it out (reboot-triggers and switch-inhibitors as jq writes them, kernel
// links into a kernel's output), parsed back, and kept in state as the same line.
func TestRebootFactsScriptOnAToplevel(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Fatal("no sh on the deployer")
	}
	dir := t.TempDir()
	kernel := filepath.Join(dir, "linux-6.18")
	must(t, os.MkdirAll(filepath.Join(kernel, "lib"), 0o755))
	for _, f := range []string{"bzImage", "initrd"} {
		must(t, os.WriteFile(filepath.Join(kernel, f), nil, 0o644))
	}
	top := filepath.Join(dir, "system")
	must(t, os.MkdirAll(top, 0o755))
	for link, target := range map[string]string{"kernel": "bzImage", "initrd": "initrd"} {
		must(t, os.Symlink(filepath.Join(kernel, target), filepath.Join(top, link)))
	}
	// No kernel-modules link: absent parts print empty. kernel-params holds a tab,
	// escaped as jq writes it.
	must(t, os.WriteFile(filepath.Join(top, "reboot-triggers"), []byte(triggersJSON(kernel, `quiet\tloglevel=4`, "dbus")), 0o644))
	// switch-inhibitors written by hand: tabs between its tokens, no newline at its end.
	must(t, os.WriteFile(filepath.Join(top, "switch-inhibitors"), []byte("{\n\t\"dbus-implementation\":\t\t\"dbus\"\n}"), 0o644))
	out, err := exec.Command("sh", "-c", rebootFactsFunctions+"\nfacts \"$1\" \"$1\"", "sh", top).Output()
	if err != nil {
		t.Fatalf("facts: %v", err)
	}
	if strings.Count(string(out), "\n") != 1 {
		t.Fatalf("the facts must be one line: %q", out)
	}
	got, ok := ParseRebootFacts(string(out))
	if !ok {
		t.Fatalf("ParseRebootFacts(%q): not ok", out)
	}
	want := &RebootFacts{
		Parts: map[string]string{"kernel": filepath.Join(kernel, "bzImage"), "initrd": filepath.Join(kernel, "initrd"), "kernel-modules": ""},
		Triggers: map[string]string{"dbus-implementation": "dbus", "firmware": "/nix/store/fw-firmware", "kernel": kernel,
			"kernel-params": "quiet\tloglevel=4"},
		Inhibitors: map[string]string{"dbus-implementation": "dbus"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("node side = %+v\nwant        %+v", got, want)
	}
	// The deployer reads the same toplevel the same way (the plan's side).
	local, ok := LocalRebootFacts(top)
	if !ok || !reflect.DeepEqual(local, want) {
		t.Fatalf("deployer side = %+v (ok %v), want %+v", local, ok, want)
	}
	if _, ok := LocalRebootFacts(filepath.Join(dir, "not-built")); ok {
		t.Error("LocalRebootFacts of a toplevel not in the store: ok, want not known")
	}
	// What the state keeps reads back the same.
	back, ok := ParseRebootFacts(got.String())
	if !ok || !reflect.DeepEqual(back, got) {
		t.Fatalf("state line %q reads back as %+v (ok %v), want %+v", got.String(), back, ok, got)
	}
}

// Lines Read gives: none (no booted system), the line of a state written before
// reboot-triggers were read (space-separated, with a systemd part), and malformed ones.
func TestParseRebootFactsLines(t *testing.T) {
	if f, ok := ParseRebootFacts("none\n"); !ok || f != nil {
		t.Errorf("none: %+v %v", f, ok)
	}
	f, ok := ParseRebootFacts("kernel=/k initrd=/i kernel-modules=/m systemd=/s ")
	if !ok || f.Parts["kernel"] != "/k" || f.Triggers != nil || f.Inhibitors != nil {
		t.Errorf("a line of the earlier form: %+v %v", f, ok)
	}
	for _, bad := range []string{"kernel=/x", "", "garbage", "kernel=/k\tinitrd=/i"} {
		if _, ok := ParseRebootFacts(bad); ok {
			t.Errorf("ParseRebootFacts(%q): ok", bad)
		}
	}
	f, ok = ParseRebootFacts("kernel=\tinitrd=\tkernel-modules=\treboot-triggers=none\tswitch-inhibitors={\"a\": \"b c\"}\n")
	if !ok || f.Triggers != nil || f.Inhibitors["a"] != "b c" {
		t.Errorf("no triggers, one inhibitor: %+v %v", f, ok)
	}
}

// The plan's rule is the deploy's, by activation.
func TestPlannedReboot(t *testing.T) {
	node := &RebootFacts{Parts: map[string]string{"kernel": "a"}, Triggers: map[string]string{"kernel-params": "quiet"}}
	planned := &RebootFacts{Parts: map[string]string{"kernel": "a"}, Triggers: map[string]string{"kernel-params": "quiet splash"}}
	same := &RebootFacts{Parts: map[string]string{"kernel": "b"}, Triggers: map[string]string{"kernel-params": "quiet"}}
	for _, tc := range []struct {
		a             Activation
		node, planned *RebootFacts
		want          string
	}{
		{ActivationRebootIfNeeded, node, planned, "reboot-triggers changed: kernel-params : quiet -> quiet splash"},
		{ActivationRebootIfNeeded, node, same, ""},
		{ActivationRebootIfNeeded, nil, planned, ""},
		{ActivationReboot, node, same, "asked to"},
		{ActivationSwitch, node, planned, ""},
		{ActivationBoot, node, planned, ""},
	} {
		if got := PlannedReboot(tc.a, tc.node, tc.planned); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.a, got, tc.want)
		}
	}
	if got := RebootNotice("web01", "kernel changed"); got != "node web01 will reboot: kernel changed" {
		t.Errorf("RebootNotice = %q", got)
	}
}
