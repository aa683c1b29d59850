package nixstore

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// NixInstantiateBin evaluates a build to its derivation; tests may point it elsewhere
// (e.g. at a wrapper that counts evaluations).
var NixInstantiateBin = "nix-instantiate"

// Instantiate evaluates spec to the one derivation (.drv store path) it denotes,
// without building anything: what a plan needs to tell whether a node's system changed.
// It takes the same spec as Build, so the derivation is the one Build would build; a
// flake (spec.Flake) is evaluated with nix eval.
func Instantiate(ctx context.Context, spec BuildSpec) (string, error) {
	if spec.Flake != "" {
		return instantiateFlake(ctx, spec)
	}
	args, what, err := spec.nixArgs()
	if err != nil {
		return "", fmt.Errorf("evaluation: %w", err)
	}
	// Without --add-root the .drv is not a garbage collector root: a collection may
	// remove it, and whoever kept its name (a cache entry) must check it is still held.
	outs, err := runNix(ctx, NixInstantiateBin, args, nil)
	if err != nil {
		return "", fmt.Errorf("evaluation of %s failed %w", what, err)
	}
	if len(outs) != 1 || !ValidStorePath(outs[0]) || !strings.HasSuffix(outs[0], ".drv") {
		return "", fmt.Errorf("evaluation of %s: want exactly one derivation, nix-instantiate printed %q (select one with an attribute)", what, outs)
	}
	return outs[0], nil
}

// Realise builds the derivation drv (nix-store --realise; nothing is built when its
// output is already valid) and returns its one output path. log, if set, receives the
// build log.
func Realise(ctx context.Context, drv string, log io.Writer) (string, error) {
	if !ValidStorePath(drv) || !strings.HasSuffix(drv, ".drv") {
		return "", fmt.Errorf("realise: %q is not a derivation (want %s/<hash>-<name>.drv)", drv, StoreDir)
	}
	args := []string{"--realise"}
	if needsNoBuildUsers() {
		args = append(args, "--option", "build-users-group", "")
	}
	outs, err := runNix(ctx, NixStoreBin, append(args, drv), log)
	if err != nil {
		return "", fmt.Errorf("build of %s failed %w", drv, err)
	}
	if len(outs) != 1 || !ValidStorePath(outs[0]) {
		return "", fmt.Errorf("build of %s: want exactly one output store path, nix-store printed %q", drv, outs)
	}
	return outs[0], nil
}
