package labtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// Closure attributes of lab/closures/default.nix (see that file for what each does).
const (
	ClosureGood             = "good"
	ClosureGoodV2           = "good-v2"
	ClosureFailedUnit       = "failed-unit"
	ClosureRestartLoop      = "restart-loop"
	ClosureHostFault        = "host-fault"
	ClosureClosureFault     = "closure-fault"
	ClosureSkipped          = "skipped"
	ClosureSlowSwitch       = "slow-switch"
	ClosureStaleJob         = "stale-job"
	ClosureChain            = "chain"
	ClosureChainMemberFails = "chain-member-fails"
	ClosureChainNoProgress  = "chain-no-progress"
	ClosureHTTP             = "http"
	ClosureHTTPBroken       = "http-broken"
	ClosureSpireChain       = "spire-chain"
)

var closureCache sync.Map // "attr\x00seed" -> store path

// BuildClosure builds attribute attr of lab/closures/default.nix (found from the test's
// working directory upwards) and returns its store path. Results are cached per process.
func BuildClosure(t testing.TB, attr string) string {
	t.Helper()
	return BuildClosureSeed(t, attr, "")
}

// BuildClosureSeed is BuildClosure with a seed: a seed no other test uses gives store
// paths no node holds yet (to force a full copy).
func BuildClosureSeed(t testing.TB, attr, seed string) string {
	t.Helper()
	key := attr + "\x00" + seed
	if p, ok := closureCache.Load(key); ok {
		return p.(string)
	}
	if _, err := exec.LookPath(nixstore.NixBuildBin); err != nil {
		if os.Getenv("FEDIVERSITY_LAB") == "1" {
			t.Fatalf("labtest: nix-build is not installed (run lab/install-host.sh): %v", err)
		}
		t.Skip("labtest: nix-build is not installed; the lab closures cannot be built")
	}
	file := filepath.Join(RepoRoot(t), "lab", "closures", "default.nix")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	spec := nixstore.BuildSpec{File: file, Attr: attr}
	if seed != "" {
		spec.ArgStr = map[string]string{"seed": seed}
	}
	p, err := nixstore.Build(ctx, spec)
	if err != nil {
		t.Fatalf("labtest: building lab closure %q: %v", attr, err)
	}
	closureCache.Store(key, p)
	return p
}
