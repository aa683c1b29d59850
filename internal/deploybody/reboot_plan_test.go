package deploybody

import (
	"os"
	"path/filepath"
	"testing"
)

// A plan knows a reboot from the toplevel in the deployer's store and the booted
// system's parts as the node printed them: the same rule and words as the switch
// phase's (kernel, initrd, kernel-modules, systemd, each resolved).
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
	bootedA, ok := LocalBootParts(a)
	if !ok {
		t.Fatal("LocalBootParts of a built toplevel: not ok")
	}
	// What the node prints is what the state records and parses back.
	booted, ok := ParseBootedParts(bootedA.String())
	if !ok {
		t.Fatalf("ParseBootedParts(%q): not ok", bootedA.String())
	}
	for _, tc := range []struct {
		activation Activation
		booted     BootParts
		toplevel   string
		want       string
	}{
		{ActivationRebootIfNeeded, booted, b, "kernel, initrd, kernel-modules changed"},
		{ActivationRebootIfNeeded, booted, aV2, ""},
		{ActivationRebootIfNeeded, nil, b, ""}, // no booted system: the switch decides
		{ActivationReboot, booted, aV2, "asked to"},
		{ActivationSwitch, booted, b, ""},
		{ActivationBoot, booted, b, ""},
	} {
		planned, ok := LocalBootParts(tc.toplevel)
		if !ok {
			t.Fatalf("LocalBootParts(%s): not ok", tc.toplevel)
		}
		if got := PlannedReboot(tc.activation, tc.booted, planned); got != tc.want {
			t.Errorf("%s from %v to %s: %q, want %q", tc.activation, tc.booted, filepath.Base(tc.toplevel), got, tc.want)
		}
	}
	if _, ok := LocalBootParts(filepath.Join(store, "not-built")); ok {
		t.Error("LocalBootParts of a toplevel not in the store: ok, want not known")
	}
	if _, ok := ParseBootedParts("kernel=/x"); ok {
		t.Error("ParseBootedParts of a line without every part: ok")
	}
	if got := RebootNotice("web01", "kernel changed"); got != "node web01 will reboot: kernel changed" {
		t.Errorf("RebootNotice = %q", got)
	}
}
