package nixstore

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func requireNix(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(NixBuildBin); err != nil {
		if os.Getenv("FEDIVERSITY_LAB") == "1" {
			t.Fatalf("nix-build is not installed (lab/install-host.sh installs it): %v", err)
		}
		t.Skip("nix-build is not installed on this machine")
	}
	// The test derivations are built by /bin/sh, which a build sandbox lacks; the
	// product leaves the deployer's sandbox setting alone, so the test sets it.
	t.Setenv("NIX_CONFIG", os.Getenv("NIX_CONFIG")+"\nsandbox = false")
}

func closuresFile(t *testing.T) string {
	t.Helper()
	f, err := filepath.Abs("../../lab/closures/default.nix")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return c
}

func TestValidStorePath(t *testing.T) {
	for p, want := range map[string]bool{
		"/nix/store/yz1f3iqli0jfd7wzg3vngchnpjq7xnp5-nixos-system-fedi-good-1":  true,
		"/nix/store/yz1f3iqli0jfd7wzg3vngchnpjq7xnp5-a+b_c.d?=e":                true,
		"/nix/store/yz1f3iqli0jfd7wzg3vngchnpjq7xnp5-":                          false,
		"/nix/store/yz1f3iqli0jfd7wzg3vngchnpjq7xnp5-x/bin/sh":                  false,
		"/nix/store/ez1f3iqli0jfd7wzg3vngchnpjq7xnp5-x":                         false, // 'e' is not nix32
		"/nix/store/yz1f3iqli0jfd7wzg3vngchnpjq7xnp5-x y":                       false,
		"/nix/store/yz1f3iqli0jfd7wzg3vngchnpjq7xnp5-x;rm":                      false,
		"/tmp/yz1f3iqli0jfd7wzg3vngchnpjq7xnp5-x":                               false,
		"nix/store/yz1f3iqli0jfd7wzg3vngchnpjq7xnp5-x":                          false,
		"/nix/store/yz1f3iqli0jfd7wzg3vngchnpjq7xnp5-x\n/nix/store/other-thing": false,
	} {
		if got := ValidStorePath(p); got != want {
			t.Errorf("ValidStorePath(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestBuildClosureExport(t *testing.T) {
	requireNix(t)
	seed := "nixstore-test"
	top, err := Build(ctx(t), BuildSpec{File: closuresFile(t), Attr: "good", ArgStr: map[string]string{"seed": seed}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(top, "-nixos-system-fedi-good-1") || !Has(top) {
		t.Fatalf("Build returned %q (Has: %v)", top, Has(top))
	}
	for _, f := range []string{"bin/switch-to-configuration", "nixos-version", "sw/bin/fedi-idle", "etc/systemd/system/fedi-web.service"} {
		if _, err := os.Stat(filepath.Join(top, f)); err != nil {
			t.Errorf("toplevel lacks %s: %v", f, err)
		}
	}
	other, err := Build(ctx(t), BuildSpec{File: closuresFile(t), Attr: "good", ArgStr: map[string]string{"seed": seed + "-2"}})
	if err != nil || other == top {
		t.Fatalf("another seed gave %q (%v), want a path other than %q", other, err, top)
	}

	cl, err := Closure(ctx(t), top)
	if err != nil {
		t.Fatal(err)
	}
	// The closure is every path reachable from the toplevel by references, as nix-store
	// -q --references walks them one at a time here (not Closure's own --requisites): the
	// stand-in's toplevel, its tools, its payload and its system path (lab/closures).
	if want := walkReferences(t, top); !sameSet(cl, want) {
		t.Fatalf("closure = %q, want the paths reachable by references %q", cl, want)
	}
	for _, part := range []string{"-fedi-tools", "-fedi-payload"} {
		found := false
		for _, p := range cl {
			found = found || strings.HasSuffix(p, part)
		}
		if !found {
			t.Errorf("closure %q lacks the %s path", cl, part)
		}
	}
	var buf bytes.Buffer
	if err := Export(ctx(t), cl, &buf); err != nil {
		t.Fatal(err)
	}
	// The export must carry the payload (256 KiB) and name every path.
	if buf.Len() < 256<<10 {
		t.Fatalf("export is %d bytes, smaller than the payload", buf.Len())
	}
	for _, p := range cl {
		if !bytes.Contains(buf.Bytes(), []byte(p)) {
			t.Errorf("export does not name %s", p)
		}
	}
	// And it imports into an empty (chroot) store as the whole closure.
	root := t.TempDir()
	imp := exec.Command(NixStoreBin, "--store", root, "--import")
	imp.Stdin = &buf
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("import into %s: %v\n%s", root, err, out)
	}
	for _, p := range cl {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("imported store lacks %s", p)
		}
	}
}

func TestBuildWithPlanFile(t *testing.T) {
	requireNix(t)
	plan := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(plan, []byte(`{"node":"web01"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	expr := `{ planFile }: derivation { name = "plan-test"; system = builtins.currentSystem; builder = "/bin/sh";
	  args = [ "-c" "echo ${(builtins.fromJSON (builtins.readFile planFile)).node} > $out" ]; }`
	out, err := Build(ctx(t), BuildSpec{Expr: expr, PlanFile: plan})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	if strings.TrimSpace(string(b)) != "web01" {
		t.Fatalf("built %q from the plan, want web01", b)
	}
}

func TestErrorsSayWhat(t *testing.T) {
	requireNix(t)
	_, err := Build(ctx(t), BuildSpec{File: closuresFile(t), Attr: "no-such-scenario"})
	if err == nil || !strings.Contains(err.Error(), "no-such-scenario") {
		t.Fatalf("err = %v, want it to name the attribute", err)
	}
	if _, err := Build(ctx(t), BuildSpec{}); err == nil {
		t.Fatal("empty spec accepted")
	}
	missing := "/nix/store/00000000000000000000000000000000-not-there"
	if Has(missing) {
		t.Fatal("Has says a missing path is there")
	}
	if _, err := Closure(ctx(t), missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("closure of a missing path: %v", err)
	}
	if _, err := Closure(ctx(t), "/etc/passwd"); err == nil {
		t.Fatal("closure of a non-store path accepted")
	}
}

// walkReferences lists the paths reachable from top, asking nix-store for each path's
// direct references.
func walkReferences(t *testing.T, top string) []string {
	t.Helper()
	seen := map[string]bool{top: true}
	queue := []string{top}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out, err := exec.Command(NixStoreBin, "--query", "--references", p).Output()
		if err != nil {
			t.Fatalf("nix-store --query --references %s: %v", p, err)
		}
		for _, r := range strings.Fields(string(out)) {
			if !seen[r] {
				seen[r] = true
				queue = append(queue, r)
			}
		}
	}
	all := make([]string, 0, len(seen))
	for p := range seen {
		all = append(all, p)
	}
	return all
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	in := map[string]bool{}
	for _, x := range a {
		in[x] = true
	}
	for _, x := range b {
		if !in[x] {
			return false
		}
	}
	return true
}

// Issue 39, item 9: the deployer's nix runs with the sandbox its own nix.conf (or
// NIX_CONFIG) says: the plan's evaluation, the apply's build and realise pass no
// `--option sandbox`. A recording stand-in for each nix command shows the arguments.
// On the current main every call turned the sandbox off.
func TestNixLeavesTheSandboxToTheDeployer(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "args")
	for _, bin := range []*string{&NixBuildBin, &NixInstantiateBin, &NixStoreBin} {
		stand := filepath.Join(dir, filepath.Base(*bin))
		out := "/nix/store/00000000000000000000000000000000-x"
		if filepath.Base(*bin) == "nix-instantiate" {
			out += ".drv"
		}
		script := "#!/bin/sh\necho \"$*\" >>" + log + "\necho " + out + "\n"
		if err := os.WriteFile(stand, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		prev := *bin
		*bin = stand
		t.Cleanup(func() { *bin = prev })
	}
	file := filepath.Join(dir, "node.nix")
	if err := os.WriteFile(file, []byte("{ }: { }"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _ = Instantiate(ctx, BuildSpec{File: file})
	_, _ = Build(ctx, BuildSpec{File: file})
	_, _ = Realise(ctx, "/nix/store/00000000000000000000000000000000-x.drv", nil)
	b, err := os.ReadFile(log)
	if err != nil || strings.Count(string(b), "\n") != 3 {
		t.Fatalf("the stand-ins ran %q (%v), want three calls", b, err)
	}
	if strings.Contains(string(b), "sandbox") {
		t.Fatalf("a nix call set the sandbox itself:\n%s", b)
	}
}
