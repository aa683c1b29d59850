package deploybody

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// The one-shot boot entry's script itself (records.BootOnceScript), run by sh against a
// systemd-boot entry directory and a bootctl that records what it is asked: with boot
// counting (boot.loader.systemd-boot.bootCounting) an entry's file name carries its
// counter, +N or +N-M after tries, and bootctl takes the entry's ID, without it
// (systemd-boot-builder.py; the Boot Loader Specification). A pin is found by its ID
// whatever the counter says now. A stub bootctl, because a real one needs EFI
// variables this machine does not have.
func TestBootOnceScriptTakesEntryIDs(t *testing.T) {
	const (
		newSys = "/nix/store/0000000000000000000000000000000a-nixos-system-fedi-n1-26.05"
		oldSys = "/nix/store/0000000000000000000000000000000b-nixos-system-fedi-n1-26.05"
	)
	for _, tc := range []struct {
		name                 string
		newFile, oldFile     string
		pinned               string // the pin an earlier run left (an ID), "" for none
		wantNewID, wantOldID string
	}{
		{"no boot counting", "nixos-generation-5.conf", "nixos-generation-4.conf", "", "nixos-generation-5.conf", "nixos-generation-4.conf"},
		{"a new entry with its tries", "nixos-generation-5+3.conf", "nixos-generation-4.conf", "", "nixos-generation-5.conf", "nixos-generation-4.conf"},
		{"entries tried before", "nixos-generation-5+2-1.conf", "nixos-generation-4+1-2.conf", "", "nixos-generation-5.conf", "nixos-generation-4.conf"},
		{"counters of two digits", "nixos-generation-15+12-10.conf", "nixos-generation-14+0-12.conf", "", "nixos-generation-15.conf", "nixos-generation-14.conf"},
		{"content-addressed names", "nixos-4f2c9a+3.conf", "nixos-77aa01.conf", "", "nixos-4f2c9a.conf", "nixos-77aa01.conf"},
		{"a specialisation's name", "nixos-generation-5-specialisation-web+3.conf", "nixos-generation-4.conf", "", "nixos-generation-5-specialisation-web.conf", "nixos-generation-4.conf"},
		{"the pin found by its ID", "nixos-generation-6+3.conf", "nixos-generation-4+0-3.conf", "nixos-generation-4.conf", "nixos-generation-6.conf", "nixos-generation-4.conf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			boot, bin := filepath.Join(dir, "boot"), filepath.Join(dir, "bin")
			entries := filepath.Join(boot, "loader/entries")
			must(t, os.MkdirAll(entries, 0o755))
			must(t, os.MkdirAll(bin, 0o755))
			entry := func(file, sys string) {
				must(t, os.WriteFile(filepath.Join(entries, file), []byte("title NixOS\nlinux /EFI/nixos/k.efi\noptions init="+sys+"/init loglevel=4\n"), 0o644))
			}
			entry(tc.newFile, newSys)
			entry(tc.oldFile, oldSys)
			asked := filepath.Join(dir, "asked")
			must(t, os.WriteFile(filepath.Join(bin, "bootctl"), []byte("#!/bin/sh\ncase \"$1\" in\n"+
				"is-installed) exit 0 ;;\n--print-boot-path) echo "+boot+" ;;\n"+
				"*) echo \"$*\" >>"+asked+" ;;\nesac\n"), 0o755))
			pin := filepath.Join(dir, "pin")
			script := strings.NewReplacer(records.BootPinFile, pin, "/run/current-system/sw/bin/bootctl", filepath.Join(dir, "none")).Replace(records.BootOnceScript)
			cmd := exec.Command("sh", "-c", script, "sh", newSys, oldSys, tc.pinned)
			cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("BootOnceScript: %v", err)
			}
			if got, want := strings.TrimSpace(string(out)), "oneshot "+tc.wantNewID+" "+tc.wantOldID+" "+oldSys; got != want {
				t.Fatalf("answer %q, want %q", got, want)
			}
			log, _ := os.ReadFile(asked)
			if got, want := string(log), "set-default "+tc.wantOldID+"\nset-oneshot "+tc.wantNewID+"\n"; got != want {
				t.Fatalf("bootctl was asked %q, want %q", got, want)
			}
			if got, _ := os.ReadFile(pin); strings.TrimSpace(string(got)) != tc.wantOldID {
				t.Fatalf("pin %q, want the ID %q", got, tc.wantOldID)
			}
		})
	}
}
