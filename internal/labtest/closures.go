package labtest

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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
	ClosureCycling          = "cycling"
	ClosureSlowSwitch       = "slow-switch"
	ClosureStaleJob         = "stale-job"
	ClosureChain            = "chain"
	ClosureChainMemberFails = "chain-member-fails"
	ClosureChainNoProgress  = "chain-no-progress"
	ClosureHTTP             = "http"
	ClosureHTTPBroken       = "http-broken"
	ClosureSpireChain       = "spire-chain"
	ClosureSpireChainBroken = "spire-chain-broken"
	// ClosureSpireChainStore needs the agent it carries: BuildSpireChainStore.
	ClosureSpireChainStore = "spire-chain-store"
	ClosureBootable        = "bootable"
	// ClosureBootableInitFails is bootable whose init exits 3 a second after it starts,
	// before systemd: a crash-looping PID 1 in a pod.
	ClosureBootableInitFails = "bootable-init-fails"
	// The stand-in's switch-to-configuration contract (lab/closures/default.nix says what
	// each does against ClosureGood or ClosureGoodV2).
	ClosureGoodV2NoRestart = "good-v2-no-restart"
	ClosureGoodV2Reload    = "good-v2-reload"
	ClosureGoodDropin      = "good-dropin"
	ClosureGoodSystemdB    = "good-systemd-b"
	ClosureGoodInitV3      = "good-init-v3"
	ClosureActivationFails = "activation-fails"
	ClosureCheckFails      = "check-fails"
	ClosureKernelA         = "kernel-a"
	ClosureKernelAParams   = "kernel-a-params"
	ClosureKernelAFirmware = "kernel-a-firmware"
	ClosureInhibitorA      = "inhibitor-a"
	ClosureInhibitorB      = "inhibitor-b"
	// ClosureBootableSwitchable boots from its own Incus image and takes later systems
	// through a deploy (fediversity_incus_image).
	ClosureBootableSwitchable = "bootable-switchable"
	// ClosureBootableSpireAgent needs its SPIRE arguments: BuildBootableSpireAgent.
	ClosureBootableSpireAgent = "bootable-spire-agent"
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
	var args map[string]string
	if seed != "" {
		args = map[string]string{"seed": seed}
	}
	return buildClosure(t, attr, args)
}

// BuildSlowSwitch is the slow-switch closure with an activation of the given seconds
// (15 for ClosureSlowSwitch): for a test whose cut must land inside the switch even
// when a loaded machine makes the steps before the switch slow.
func BuildSlowSwitch(t testing.TB, seconds int) string {
	t.Helper()
	return buildClosure(t, ClosureSlowSwitch, map[string]string{"switchDelay": strconv.Itoa(seconds)})
}

// BuildBootableSpireAgent is the bootable stand-in with the SPIRE agent of a k8s node
// (ClosureBootableSpireAgent): lab/spire/build.sh's spire-agent in the store, attesting
// with k8s_psat as cluster (the namespace) to the spire-server at server:port.
func BuildBootableSpireAgent(t testing.TB, cluster, server string, port int) string {
	t.Helper()
	return buildClosure(t, ClosureBootableSpireAgent, map[string]string{
		"spireAgent": SpireAgentBinary(t), "spireCluster": cluster, "spireServer": server, "spireServerPort": strconv.Itoa(port),
	})
}

// BuildSpireChainStore is the SPIRE lane's system with the agent in its own closure
// (ClosureSpireChainStore): lab/spire/build.sh's spire-agent copied into the store.
func BuildSpireChainStore(t testing.TB) string {
	t.Helper()
	return buildClosure(t, ClosureSpireChainStore, map[string]string{"spireAgent": SpireAgentBinary(t)})
}

func buildClosure(t testing.TB, attr string, args map[string]string) string {
	t.Helper()
	key := attr
	for _, k := range slices.Sorted(maps.Keys(args)) {
		key += "\x00" + k + "=" + args[k]
	}
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
	spec := nixstore.BuildSpec{File: file, Attr: attr, ArgStr: args}
	p, err := nixstore.Build(ctx, spec)
	if err != nil {
		t.Fatalf("labtest: building lab closure %q: %v", attr, err)
	}
	closureCache.Store(key, p)
	return p
}

// KernelTriggerWhy is why NixOS' reboot rule reboots from the stand-in system booted to
// the stand-in system next, when their kernels alone differ: both carry reboot-triggers
// (as every stand-in with a kernel does, nixos/modules/tasks/auto-upgrade.nix), so the
// rule names the trigger, old -> new, in the words the deploy prints.
func KernelTriggerWhy(t testing.TB, booted, next string) string {
	t.Helper()
	kernel := func(toplevel string) string {
		data, err := os.ReadFile(toplevel + "/reboot-triggers")
		if err != nil {
			t.Fatalf("reboot-triggers of %s: %v", toplevel, err)
		}
		var triggers map[string]string
		if err := json.Unmarshal(data, &triggers); err != nil || triggers["kernel"] == "" {
			t.Fatalf("reboot-triggers of %s: no kernel (%v): %s", toplevel, err, data)
		}
		return triggers["kernel"]
	}
	return "reboot-triggers changed: kernel : " + kernel(booted) + " -> " + kernel(next)
}
