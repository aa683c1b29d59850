// Package nixstore runs the deployer's local Nix (nix-store, nix-build) with os/exec:
// the closure of a store path, a streaming export of store paths, validity checks and
// builds of the stand-in or real NixOS toplevels.
//
// It must not import the plugin framework nor any transport: transports import it.
package nixstore

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// StoreDir is the Nix store every path handled here must live in.
const StoreDir = "/nix/store"

// Binaries used; tests and unusual installs may point them elsewhere.
var (
	NixStoreBin = "nix-store"
	NixBuildBin = "nix-build"
)

// CleanAbsolutePath accepts a clean absolute path without whitespace or control
// characters: what a store path (of any store directory) must look like before it
// reaches a command line or a cache entry.
func CleanAbsolutePath(p string) bool {
	if p == "" || !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
		return false
	}
	for _, r := range p {
		if r <= ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// ValidStorePath reports whether p names a top-level store object
// (/nix/store/<32 chars>-<name>), the only shape this package passes to nix.
func ValidStorePath(p string) bool {
	rest, ok := strings.CutPrefix(p, StoreDir+"/")
	if !ok || len(rest) < 34 || rest[32] != '-' || strings.ContainsAny(rest, "/\x00\n") {
		return false
	}
	for _, c := range rest[:32] {
		if !strings.ContainsRune("0123456789abcdfghijklmnpqrsvwxyz", c) {
			return false
		}
	}
	for _, c := range rest[33:] {
		if !isASCIIAlnum(c) && !strings.ContainsRune("+-._?=", c) {
			return false
		}
	}
	return true
}

func checkPaths(paths []string) error {
	for _, p := range paths {
		if !ValidStorePath(p) {
			return fmt.Errorf("%q is not a Nix store path (want %s/<hash>-<name>)", p, StoreDir)
		}
	}
	return nil
}

// run runs a nix command, returning stdout; a failure carries the tail of stderr.
func run(ctx context.Context, stdout io.Writer, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr tailBuffer
	cmd.Stdout = stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s %s: %w", name, args[0], ctx.Err())
		}
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = "(no output on stderr)"
		}
		return fmt.Errorf("%s %s: %w: %s", name, args[0], err, msg)
	}
	return nil
}

// Closure returns the closure of path (path and everything it references, recursively)
// as nix-store -qR prints it: dependencies before the paths that use them. The answer
// is asked of nix-store once per process and path (closures): a store path's
// references never change while it is valid, and the nodes of a group that deploy one
// system each ask for its closure at about the same time.
func Closure(ctx context.Context, path string) ([]string, error) {
	if err := checkPaths([]string{path}); err != nil {
		return nil, fmt.Errorf("closure: %w", err)
	}
	return closures.get(ctx, path)
}

// closures is this process's memory of the closures nix-store printed. A 16-node
// `fediversity deploy` of one system started nix-store 51 times, about three per node,
// two of them the same closure query; each start cost about 28 ms of CPU, most of it
// the dynamic linker loading Nix's libraries, on the cores the deploy shares with
// everything else. With the memory it starts nix-store 20 to 23 times (perf, in the
// design page's fleet benchmark).
var closures = &closureMemo{exists: func(p string) bool { _, err := os.Lstat(p); return err == nil }}

// closureMemoMax bounds how many closures a process remembers; past it the memory
// starts afresh (a long-lived process deploys few distinct systems at a time).
const closureMemoMax = 64

type closureMemo struct {
	flight Flight
	exists func(string) bool // a remembered closure is used only while its path is in the store
	mu     sync.Mutex
	known  map[string][]string
}

func (m *closureMemo) get(ctx context.Context, path string) ([]string, error) {
	m.mu.Lock()
	paths, ok := m.known[path]
	m.mu.Unlock()
	if ok && m.exists(path) {
		return append([]string(nil), paths...), nil
	}
	joined, _, err := m.flight.Do(ctx, path, func() (string, error) {
		paths, err := queryClosure(ctx, path)
		return strings.Join(paths, "\n"), err
	})
	if err != nil {
		return nil, err
	}
	paths = strings.Split(joined, "\n") // store paths hold no newline (checkPaths)
	m.mu.Lock()
	if m.known == nil || len(m.known) >= closureMemoMax {
		m.known = map[string][]string{}
	}
	m.known[path] = paths
	m.mu.Unlock()
	return append([]string(nil), paths...), nil
}

// queryClosure asks nix-store for the closure of path.
func queryClosure(ctx context.Context, path string) ([]string, error) {
	var out bytes.Buffer
	if err := run(ctx, &out, NixStoreBin, "--query", "--requisites", path); err != nil {
		return nil, fmt.Errorf("closure of %s (is it built and in the local store?): %w", path, err)
	}
	var paths []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			paths = append(paths, l)
		}
	}
	if err := checkPaths(paths); err != nil {
		return nil, fmt.Errorf("closure of %s: nix-store printed %w", path, err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("closure of %s: nix-store printed no paths", path)
	}
	return paths, nil
}

// Export writes the export archive of paths (nix-store --export, which orders them so
// that a path's references come before it) to w, streaming: nothing is held in memory.
func Export(ctx context.Context, paths []string, w io.Writer) error {
	if len(paths) == 0 {
		return errors.New("export: no paths given")
	}
	if err := checkPaths(paths); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	sorted := append([]string(nil), paths...)
	sort.Strings(sorted) // nix-store sorts topologically itself; this only makes argv stable
	if err := run(ctx, w, NixStoreBin, append([]string{"--export"}, sorted...)...); err != nil {
		return fmt.Errorf("export of %d paths: %w", len(paths), err)
	}
	return nil
}

// Has reports whether the local store holds path as a valid store object.
func Has(path string) bool {
	if !ValidStorePath(path) {
		return false
	}
	if _, err := os.Lstat(path); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return run(ctx, io.Discard, NixStoreBin, "--check-validity", path) == nil
}

// BuildSpec says what to build. Exactly one of File, Expr and Flake is set.
type BuildSpec struct {
	// Flake is a flake reference whose attribute Attr is the system's toplevel
	// (`<Flake>#<Attr>`). Only Instantiate takes it (nix eval); PlanFile, ArgStr and
	// Options do not apply, the node plan goes in PlanInput.
	Flake string
	// PlanInput, for a flake, is a directory holding only the node plan
	// (NodePlanInputFile), handed to the flake as its NodePlanInput.
	PlanInput string
	// FlakeLocked, when set, is the locked reference of Flake (FlakeIdentity.Locked,
	// from the metadata the cache key was made of): it is what is evaluated, so that
	// the evaluation reads what the key covers, not the flake as an edit left it since.
	// Messages still name Flake.
	FlakeLocked string
	// File is a Nix file (or a directory with default.nix) to build.
	File string
	// Expr is a Nix expression to build (nix-build -E).
	Expr string
	// Attr selects an attribute of the file or expression (-A); empty builds the whole.
	Attr string
	// PlanFile, when set, is passed as `--argstr <PlanArg> <absolute path>` so the
	// expression can read the node plan (builtins.fromJSON (builtins.readFile planFile)).
	PlanFile string
	// PlanArg names the argument PlanFile is given as; "planFile" when empty.
	PlanArg string
	// ArgStr are further --argstr name value pairs (e.g. a seed).
	ArgStr map[string]string
	// Options are further --option name value pairs. The deployer's own nix settings
	// (its sandbox among them) are left as they are.
	Options map[string]string
	// Log, if not nil, receives nix-build's stderr (build logs) as it is written.
	Log io.Writer
}

// Build builds spec with nix-build --no-out-link and returns
// the one output path it printed (the toplevel).
func Build(ctx context.Context, spec BuildSpec) (string, error) {
	args, what, err := spec.nixArgs()
	if err != nil {
		return "", fmt.Errorf("build: %w", err)
	}
	outs, err := runNix(ctx, NixBuildBin, append([]string{"--no-out-link"}, args...), spec.Log)
	if err != nil {
		return "", fmt.Errorf("build of %s failed %w", what, err)
	}
	if len(outs) != 1 || !ValidStorePath(outs[0]) {
		return "", fmt.Errorf("build of %s: want exactly one output store path, nix-build printed %q (select one derivation with an attribute)", what, outs)
	}
	return outs[0], nil
}

// nixArgs are the arguments nix-build and nix-instantiate share for spec, and a name
// of what is built for messages.
func (spec BuildSpec) nixArgs() (args []string, what string, err error) {
	if spec.Flake != "" {
		return nil, "", errors.New("a flake is evaluated with nix eval (Instantiate), not nix-build")
	}
	if (spec.File == "") == (spec.Expr == "") {
		return nil, "", errors.New("set exactly one of File and Expr")
	}
	if needsNoBuildUsers() {
		// Root without a nixbld group (a plain nix-bin install): nix refuses to build
		// unless told to build as root itself.
		args = append(args, "--option", "build-users-group", "")
	}
	for _, k := range sortedKeys(spec.Options) {
		args = append(args, "--option", k, spec.Options[k])
	}
	if spec.PlanFile != "" {
		abs, err := filepath.Abs(spec.PlanFile)
		if err != nil {
			return nil, "", fmt.Errorf("plan file %s: %w", spec.PlanFile, err)
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, "", fmt.Errorf("plan file: %w", err)
		}
		name := spec.PlanArg
		if name == "" {
			name = "planFile"
		}
		args = append(args, "--argstr", name, abs)
	}
	for _, k := range sortedKeys(spec.ArgStr) {
		args = append(args, "--argstr", k, spec.ArgStr[k])
	}
	if spec.Attr != "" {
		args = append(args, "--attr", spec.Attr)
	}
	what = spec.File
	if spec.Expr != "" {
		args = append(args, "--expr", spec.Expr)
		what = "expression"
	} else {
		args = append(args, spec.File)
	}
	if spec.Attr != "" {
		what += " attribute " + spec.Attr
	}
	return args, what, nil
}

// runNix runs a nix command that prints store paths, one a line, and returns them. A
// failure reads "(<exit status>); <command> said:\n<tail of stderr>", or the context's
// error when that ended it. log, if set, also receives stderr as it is written.
func runNix(ctx context.Context, name string, args []string, log io.Writer) ([]string, error) {
	out, err := runNixLogged(ctx, name, args, log)
	if err != nil {
		return nil, err
	}
	var outs []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			outs = append(outs, l)
		}
	}
	return outs, nil
}

// runNixOutput runs a nix command and returns its standard output; failures read as
// runNix's.
func runNixOutput(ctx context.Context, name string, args []string) ([]byte, error) {
	return runNixLogged(ctx, name, args, nil)
}

func runNixLogged(ctx context.Context, name string, args []string, log io.Writer) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout bytes.Buffer
	var stderr tailBuffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if log != nil {
		cmd.Stderr = io.MultiWriter(&stderr, log)
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("(%w)", ctx.Err())
		}
		return nil, fmt.Errorf("(%v); %s said:\n%s", err, filepath.Base(name), strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

func needsNoBuildUsers() bool {
	if os.Geteuid() != 0 {
		return false
	}
	_, err := user.LookupGroup("nixbld")
	return err != nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// tailBuffer keeps the last 8 KiB written to it: enough for an error message, bounded
// for a build that logs megabytes.
type tailBuffer struct{ b []byte }

const tailMax = 8 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

func isASCIIAlnum(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// DeployerStore is the deployer's own store as the deploy body reads it for the
// summary of what a deploy changed (deploybody.LocalStore).
type DeployerStore struct{}

// Has only looks for the path (one stat, no nix-store process): a path that is there but
// not valid makes Closure fail, and the summary then says the closure is unknown.
func (DeployerStore) Has(path string) bool {
	if !ValidStorePath(path) {
		return false
	}
	_, err := os.Lstat(path)
	return err == nil
}

// Closure is the closure of path in the deployer's store.
func (DeployerStore) Closure(ctx context.Context, path string) ([]string, error) {
	return Closure(ctx, path)
}
