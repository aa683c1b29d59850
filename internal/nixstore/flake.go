package nixstore

// The flake form of a build: `<flake ref>#<attribute>`, evaluated with the `nix`
// command. Nix 2.8 (Debian's nix-bin) keeps flakes experimental, so every call here
// passes --extra-experimental-features 'nix-command flakes' on its own command line;
// the operator's nix settings are never changed, and the file forms never get it.

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// NixBin is the nix command the flake form runs; tests may point it at a wrapper that
// counts evaluations.
var NixBin = "nix"

// NodePlanInput is the flake input the node plan is handed as: the provider passes
// `--override-input fediversity-node-plan path:<dir>`, dir holding only
// node-plan.json. The flake declares it (flake = false) with a default of its own, so
// that it also evaluates without the provider:
//
//	inputs.fediversity-node-plan = { url = "path:./no-node-plan"; flake = false; };
//
// and reads `builtins.readFile "${fediversity-node-plan}/node-plan.json"`. The
// evaluation stays pure (no --impure): the input's content is copied into the store,
// so a change of the plan changes the derivation, and nothing else outside the flake
// and its locked inputs is read.
const NodePlanInput = "fediversity-node-plan"

// NodePlanInputFile is the file name the node plan has inside the NodePlanInput
// directory.
const NodePlanInputFile = "node-plan.json"

// flakeArgs are cmd with the arguments every flake command gets.
func flakeArgs(cmd ...string) []string {
	args := append([]string{"--extra-experimental-features", "nix-command flakes"}, cmd...)
	// Never write the operator's flake.lock from a plan: nix locks what the lock file
	// lacks in memory (and says so on stderr); `nix flake lock` is the operator's.
	args = append(args, "--no-write-lock-file")
	if needsNoBuildUsers() {
		args = append(args, "--option", "build-users-group", "")
	}
	return args
}

// SplitFlake splits `<flake ref>#<attribute>`; ok is false without a '#' or with an
// empty side.
func SplitFlake(installable string) (ref, attr string, ok bool) {
	ref, attr, found := strings.Cut(installable, "#")
	return ref, attr, found && ref != "" && attr != ""
}

// FlakeRefIn makes a relative path flake reference ("." "./nodes" "path:./nodes")
// absolute, taken from dir; other references (git+file:, github:, an absolute path)
// are returned as they are.
func FlakeRefIn(ref, dir string) string {
	prefix, p := "", ref
	if rest, ok := strings.CutPrefix(ref, "path:"); ok {
		prefix, p = "path:", rest
	}
	if p != "." && p != ".." && !strings.HasPrefix(p, "./") && !strings.HasPrefix(p, "../") {
		return ref
	}
	if dir == "" {
		dir = "."
	}
	abs, err := filepath.Abs(filepath.Join(dir, p))
	if err != nil {
		return ref
	}
	return prefix + abs
}

// FlakeIdentity is what `nix flake metadata` says a flake is: the locked narHash of the
// flake and of each input (which covers every file of each), and whether the flake
// declares the node plan input.
type FlakeIdentity struct {
	// Hashes maps "" (the flake itself) and each lock node's name to its locked narHash.
	Hashes map[string]string
	// TakesNodePlan tells that the flake's inputs include NodePlanInput.
	TakesNodePlan bool
	// Locked is the flake's locked reference (the metadata's url: a path flake with its
	// narHash, a clean git tree with its rev), "" when nix gave none. Not part of the
	// identity's String: it names the same content the hashes do.
	Locked string `json:",omitempty"`
}

// String is the identity as one line, stable for the same hashes.
func (f FlakeIdentity) String() string {
	names := make([]string, 0, len(f.Hashes))
	for n := range f.Hashes {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s=%s;", n, f.Hashes[n])
	}
	return b.String()
}

// FlakeMetadata runs `nix flake metadata --json` on ref. An input without a narHash
// (nix reports none for some kinds) is an error: the identity would not cover it.
func FlakeMetadata(ctx context.Context, ref string) (FlakeIdentity, error) {
	out, err := runNixOutput(ctx, NixBin, flakeArgs("flake", "metadata", "--json", ref))
	if err != nil {
		return FlakeIdentity{}, fmt.Errorf("nix flake metadata of %s failed %w", ref, err)
	}
	var meta struct {
		URL    string `json:"url"`
		Locked struct {
			NarHash string `json:"narHash"`
		} `json:"locked"`
		Locks struct {
			Root  string `json:"root"`
			Nodes map[string]struct {
				Inputs map[string]json.RawMessage `json:"inputs"`
				Locked struct {
					NarHash string `json:"narHash"`
				} `json:"locked"`
			} `json:"nodes"`
		} `json:"locks"`
	}
	if err := json.Unmarshal(out, &meta); err != nil {
		return FlakeIdentity{}, fmt.Errorf("nix flake metadata of %s: unreadable output: %w", ref, err)
	}
	if meta.Locked.NarHash == "" {
		return FlakeIdentity{}, fmt.Errorf("nix flake metadata of %s reports no narHash for the flake", ref)
	}
	id := FlakeIdentity{Hashes: map[string]string{"": meta.Locked.NarHash}, Locked: meta.URL}
	for name, n := range meta.Locks.Nodes {
		if name == meta.Locks.Root {
			_, id.TakesNodePlan = n.Inputs[NodePlanInput]
			continue
		}
		if n.Locked.NarHash == "" {
			return FlakeIdentity{}, fmt.Errorf("nix flake metadata of %s reports no narHash for input %s", ref, name)
		}
		id.Hashes[name] = n.Locked.NarHash
	}
	return id, nil
}

// instantiateFlake evaluates `<ref>#<attr>.drvPath` (nix eval writes the .drv into
// the store, as nix-instantiate does), handing the node plan as NodePlanInput when
// spec.PlanInput is set.
func instantiateFlake(ctx context.Context, spec BuildSpec) (string, error) {
	what := spec.Flake + "#" + spec.Attr
	if spec.Attr == "" {
		return "", fmt.Errorf("evaluation of flake %s: no attribute (want <flake ref>#<attribute>)", spec.Flake)
	}
	cmd := []string{"eval", "--raw"}
	if spec.PlanInput != "" {
		abs, err := filepath.Abs(spec.PlanInput)
		if err != nil {
			return "", fmt.Errorf("node plan input %s: %w", spec.PlanInput, err)
		}
		cmd = append(cmd, "--override-input", NodePlanInput, "path:"+abs)
	}
	ref := spec.Flake
	if spec.FlakeLocked != "" {
		ref = spec.FlakeLocked
	}
	out, err := runNixOutput(ctx, NixBin, append(flakeArgs(cmd...), ref+"#"+spec.Attr+".drvPath"))
	if err != nil {
		return "", fmt.Errorf("evaluation of flake %s failed %w", what, err)
	}
	drv := strings.TrimSpace(string(out))
	if !ValidStorePath(drv) || !strings.HasSuffix(drv, ".drv") {
		return "", fmt.Errorf("evaluation of flake %s: want a derivation, nix eval printed %q (the attribute must be a derivation, e.g. nixosConfigurations.<node>.config.system.build.toplevel)", what, drv)
	}
	return drv, nil
}
