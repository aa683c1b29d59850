package node

import (
	"os"
	"path/filepath"
	"testing"
)

// A build's new toplevel is known at plan from the derivation the plan evaluated: its
// out path, as the .drv (ATerm) names it first; a file that is not one gives none.
func TestDerivationOutputReadsTheDrv(t *testing.T) {
	dir := t.TempDir()
	drv := filepath.Join(dir, "x.drv")
	body := `Derive([("out","/nix/store/x159rn8i23n331h6mqx0fsbry3s4j4j2-nixos-system-fedi-kernel-a-1","","")],[("/nix/store/0fx5-fedi-payload.drv",["out"])],[],"x86_64-linux","/bin/sh",[],[])`
	if err := os.WriteFile(drv, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := derivationOutput(drv), "/nix/store/x159rn8i23n331h6mqx0fsbry3s4j4j2-nixos-system-fedi-kernel-a-1"; got != want {
		t.Errorf("derivationOutput = %q, want %q", got, want)
	}
	if got := derivationOutput(filepath.Join(dir, "missing.drv")); got != "" {
		t.Errorf("derivationOutput of a missing file = %q, want none", got)
	}
	if err := os.WriteFile(drv, []byte("not a derivation"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := derivationOutput(drv); got != "" {
		t.Errorf("derivationOutput of another file = %q, want none", got)
	}
}
