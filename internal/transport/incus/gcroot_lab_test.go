package incus

import (
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// A garbage collection on the node between the copy and the activation (nix.gc's timer,
// an operator's nix-collect-garbage) cannot delete what the copy sent: the copy's first
// round trip roots it (deploybody.PushedRoot). The switch then activates it; the boot
// entry's round trip hands it to the system profile and releases the root, and a
// collection after that still keeps it.
func TestLabPushedClosureSurvivesGarbageCollection(t *testing.T) {
	labtest.Require(t)
	node := labtest.NewInstance(t, "gc-root")
	tr := labTransport(t, node)
	ctx := labCtx(t)
	top := labtest.BuildClosureSeed(t, labtest.ClosureGood, freshSeed(t))
	exec := func(script string) string {
		return strings.TrimSpace(labtest.Incus(t, "exec", node.Instance, "--", "/bin/sh", "-c", "exec 2>/dev/null; "+script))
	}
	if _, err := tr.CopyClosure(ctx, top); err != nil {
		t.Fatal(err)
	}
	if got := exec("readlink " + deploybody.PushedRoot + " || true"); got != top {
		t.Errorf("after the copy the GC root %s points at %q, want %s", deploybody.PushedRoot, got, top)
	}
	exec("nix-store --gc >/dev/null 2>&1")
	if got := exec("nix-store --check-validity " + top + " 2>/dev/null && echo valid || echo deleted"); got != "valid" {
		t.Fatalf("a garbage collection between the copy and the switch deleted the pushed system: %s", got)
	}
	// The switch activates the collected-around system (its units' own faults, exit 4,
	// are not this test's: what counts is that it runs).
	sr, err := tr.Switch(ctx, top, "test", 5*time.Minute)
	if err != nil || (sr.ExitCode != 0 && sr.ExitCode != 4) {
		t.Fatalf("test after the collection: exit %d %v: %s", sr.ExitCode, err, sr.Stderr)
	}
	if got := exec("readlink -e /run/current-system"); got != top {
		t.Fatalf("after the switch the node runs %q, want %s", got, top)
	}
	if _, err := tr.FinalizeBoot(ctx, top, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := exec("readlink " + deploybody.PushedRoot + " || echo released"); got != "released" {
		t.Fatalf("the boot entry did not release the pushed closure's root: %q", got)
	}
	exec("nix-store --gc >/dev/null 2>&1")
	if got := exec("nix-store --check-validity " + top + " 2>/dev/null && readlink -e /nix/var/nix/profiles/system"); got != top {
		t.Fatalf("after the boot entry and a collection: %q, want the profile on %s", got, top)
	}
}
