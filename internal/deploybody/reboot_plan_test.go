package deploybody

import (
	"os"
	"path/filepath"
	"testing"
)

// A plan reads the new toplevel in the deployer's store: a system without
// reboot-triggers is compared by its kernel, initrd and kernel-modules links, each
// resolved (two toplevels on one kernel compare equal), against the node's facts as
// the node printed them and the state kept them.
func TestPlannedRebootComparesResolvedParts(t *testing.T) {
	store := t.TempDir()
	linux := func(name string) string {
		dir := filepath.Join(store, name)
		if err := os.MkdirAll(filepath.Join(dir, "lib"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"bzImage", "initrd"} {
			if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	toplevel := func(name, kernel string) string {
		dir := filepath.Join(store, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for link, target := range map[string]string{"kernel": "bzImage", "initrd": "initrd", "kernel-modules": "lib"} {
			if err := os.Symlink(filepath.Join(kernel, target), filepath.Join(dir, link)); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	k612, k618 := linux("linux-6.12"), linux("linux-6.18")
	a, aV2, b := toplevel("a", k612), toplevel("a-v2", k612), toplevel("b", k618)
	factsA, ok := LocalRebootFacts(a)
	if !ok {
		t.Fatal("LocalRebootFacts of a built toplevel: not ok")
	}
	// What the node prints is what the state records and parses back.
	node, ok := ParseRebootFacts(factsA.String())
	if !ok {
		t.Fatalf("ParseRebootFacts(%q): not ok", factsA.String())
	}
	for _, tc := range []struct {
		activation Activation
		node       *RebootFacts
		toplevel   string
		want       string
	}{
		{ActivationRebootIfNeeded, node, b, "kernel, initrd, kernel-modules changed"},
		{ActivationRebootIfNeeded, node, aV2, ""},
		{ActivationRebootIfNeeded, nil, b, ""}, // no booted system: the switch decides
		{ActivationReboot, node, aV2, "asked to"},
		{ActivationSwitch, node, b, ""},
		{ActivationBoot, node, b, ""},
	} {
		planned, ok := LocalRebootFacts(tc.toplevel)
		if !ok {
			t.Fatalf("LocalRebootFacts(%s): not ok", tc.toplevel)
		}
		if got := PlannedReboot(tc.activation, tc.node, planned); got != tc.want {
			t.Errorf("%s from %v to %s: %q, want %q", tc.activation, tc.node, filepath.Base(tc.toplevel), got, tc.want)
		}
	}
}
