package deploybody

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeStore stands for the deployer's Nix store (the real one is read through
// internal/nixstore and proven by the lab acceptance test).
type fakeStore map[string][]string

func (f fakeStore) Has(p string) bool { _, ok := f[p]; return ok }
func (f fakeStore) Closure(_ context.Context, p string) ([]string, error) {
	return f[p], nil
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

const (
	pathNginxOld = "/nix/store/11111111111111111111111111111111-nginx-1.26.0"
	pathNginxNew = "/nix/store/22222222222222222222222222222222-nginx-1.27.1"
	pathGlibc    = "/nix/store/33333333333333333333333333333333-glibc-2.40"
	pathOldTool  = "/nix/store/44444444444444444444444444444444-oldtool-3"
	pathNewTool  = "/nix/store/55555555555555555555555555555555-newtool"
)

// A deploy over a node whose previous closure the deployer holds: paths, packages and
// units, and the same summary in the report.
func TestChangesFromTheCopyAndTheSnapshot(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}, "db.service": {b: runs}})
	s.node.closurePaths = []string{testToplevel, pathNginxNew, pathGlibc, pathNewTool}
	s.node.store[pathGlibc] = true
	s.node.unitDigests = map[string]string{
		"web.service":  digest("old web unit"), // changed
		"db.service":   digest(plainService),   // same file
		"gone.service": digest("x"),            // removed
	}
	s.opts.LocalStore = fakeStore{testPrevious: {testPrevious, pathNginxOld, pathGlibc, pathOldTool}}
	res, err := s.deploy()
	if err != nil {
		t.Fatal(err)
	}
	c := res.Changes
	want := &Changes{
		PreviousSystem: testPrevious, PreviousClosureKnown: true,
		PathsAdded:      []string{testToplevel, pathNginxNew, pathNewTool},
		PathsRemoved:    []string{testPrevious, pathNginxOld, pathOldTool},
		PackagesAdded:   []string{"newtool"},
		PackagesRemoved: []string{"oldtool 3"},
		PackagesChanged: []string{"nginx: 1.26.0 → 1.27.1", "nixos-system-fedi-n1: 26.05 rebuilt"},
		PathsCopied:     1, BytesCopied: 1024,
		UnitsAdded: []string{}, UnitsRemoved: []string{"gone.service"}, UnitsChanged: []string{"web.service"}, UnitsNotRestarted: []string{},
		Counts: map[string]int{"paths_added": 3, "paths_removed": 3, "packages_added": 1, "packages_removed": 1,
			"packages_changed": 2, "units_added": 0, "units_removed": 1, "units_changed": 1, "units_not_restarted": 0},
	}
	// plainService is every unit's text in the scenario, so web.service differs only
	// by the digest given above.
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("changes = %+v\nwant      %+v", c, want)
	}
	if !strings.Contains(res.Report, "nginx: 1.26.0 → 1.27.1") || !strings.Contains(res.Report, "units changed:     web.service") {
		t.Fatalf("report lacks the changes:\n%s", res.Report)
	}
}

// Without the previous closure on the deployer, the summary says what it knows: the
// paths the node lacked, and that removals are unknown.
func TestChangesWithoutThePreviousClosure(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.node.closurePaths = []string{testToplevel, pathNginxNew, pathGlibc}
	s.node.store[pathGlibc] = true
	res, err := s.deploy()
	if err != nil {
		t.Fatal(err)
	}
	c := res.Changes
	if c.PreviousClosureKnown || c.PathsRemoved != nil || !reflect.DeepEqual(c.PathsAdded, []string{testToplevel, pathNginxNew}) {
		t.Fatalf("changes = %+v", c)
	}
	if c.UnitsChanged != nil || len(c.Notes) != 2 || !strings.Contains(c.Notes[0], "does not hold the previous system") || !strings.Contains(c.Notes[1], "units unknown") {
		t.Fatalf("notes = %q, units %v", c.Notes, c.UnitsChanged)
	}
	if !strings.Contains(res.Report, "units changed:     unknown") {
		t.Fatalf("report:\n%s", res.Report)
	}
}

// A deploy that adds thousands of paths (a NixOS upgrade) keeps the first
// ChangesListLimit of each list, with its full count and a note: the state stays small
// and still says how much changed.
func TestChangesListsAreBounded(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	closure := []string{testToplevel}
	for i := range 3000 {
		closure = append(closure, fmt.Sprintf("/nix/store/%032d-pkg%d-1.0", i, i))
	}
	s.node.closurePaths = closure
	s.opts.LocalStore = fakeStore{testPrevious: {testPrevious}}
	res, err := s.deploy()
	if err != nil {
		t.Fatal(err)
	}
	c := res.Changes
	if len(c.PathsAdded) != ChangesListLimit || c.Counts["paths_added"] != 3001 || c.PathsAdded[0] != "/nix/store/00000000000000000000000000000000-pkg0-1.0" {
		t.Fatalf("paths_added: %d kept (first %q), count %d; want the first %d of 3001", len(c.PathsAdded), c.PathsAdded[0], c.Counts["paths_added"], ChangesListLimit)
	}
	if len(c.PackagesAdded) != ChangesListLimit || c.Counts["packages_added"] != 3000 || len(c.PathsRemoved) != 1 || c.Counts["paths_removed"] != 1 {
		t.Fatalf("packages_added: %d kept, count %d; paths_removed %v count %d", len(c.PackagesAdded), c.Counts["packages_added"], c.PathsRemoved, c.Counts["paths_removed"])
	}
	notes := strings.Join(c.Notes, "\n")
	for _, want := range []string{"paths_added: 3001 in all, only the first 50 are listed", "packages_added: 3000 in all"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if !strings.Contains(res.Report, ", … (3000 in all)") || len(res.Report) > 8000 {
		t.Fatalf("report (%d bytes) does not say the package list was cut:\n%s", len(res.Report), res.Report)
	}
}

// NixOS configures upstream units through drop-ins (<unit>.d/overrides.conf): a change
// made only there counts as a changed unit, a drop-in added or removed too, and a unit
// made only of drop-ins (an instance) is a unit. The node's digests are the real
// command's lines (one sha256sum over the files and drop-ins), the deployer's the
// closure's files.
func TestChangesCountDropIns(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}, "db.service": {b: runs}, "cache.service": {b: runs}})
	const override = "[Service]\nEnvironment=MODE=new\n"
	writeClosure(t, s.root, testToplevel, closureSpec{units: map[string]string{
		"web.service.d/overrides.conf":        override,                    // changed in the drop-in only
		"db.service.d/overrides.conf":         override,                    // the same drop-in as before
		"cache.service.d/10-limit.conf":       "[Service]\nX=1\n",          // a drop-in added
		"getty@tty1.service.d/overrides.conf": "[Service]\nTTYReset=yes\n", // an instance made of a drop-in
		"masked.service":                      "",                          // replaced by a link to /dev/null below
	}})
	must(t, os.Remove(filepath.Join(s.root, testEtcOutput, "etc/systemd/system/masked.service")))
	must(t, os.Symlink("/dev/null", filepath.Join(s.root, testEtcOutput, "etc/systemd/system/masked.service")))
	s.node.unitDigests = map[string]string{
		"web.service":                         digest(plainService),
		"web.service.d/overrides.conf":        digest("[Service]\nEnvironment=MODE=old\n"),
		"db.service":                          digest(plainService),
		"db.service.d/overrides.conf":         digest(override),
		"cache.service":                       digest(plainService),
		"getty@tty1.service.d/overrides.conf": digest("[Service]\nTTYReset=yes\n"),
	}
	res, err := s.deploy()
	if err != nil {
		t.Fatal(err)
	}
	c := res.Changes
	if !reflect.DeepEqual(c.UnitsChanged, []string{"cache.service", "web.service"}) || len(c.UnitsAdded) != 0 || len(c.UnitsRemoved) != 0 {
		t.Fatalf("changed %q added %q removed %q; want cache.service and web.service changed, nothing added (a masked unit is no file) or removed",
			c.UnitsChanged, c.UnitsAdded, c.UnitsRemoved)
	}
}

// The node's command (run here by sh, on a unit directory laid out as NixOS lays it
// out) and the deployer's reading of the same directory give the same digests, so a
// unit that did not change is never listed.
func TestUnitDigestsNodeAndDeployerAgree(t *testing.T) {
	root := t.TempDir()
	writeClosure(t, root, testToplevel, closureSpec{
		units: map[string]string{"web.service": plainService, "web.service.d/overrides.conf": "[Service]\nX=1\n",
			"getty@tty1.service.d/overrides.conf": "[Service]\nTTYReset=yes\n", "db.service": plainService, "masked.service": ""},
		wants: map[string][]string{"multi-user.target": {"web.service"}},
	})
	units := filepath.Join(root, testEtcOutput, "etc/systemd/system")
	must(t, os.Remove(filepath.Join(units, "masked.service")))
	must(t, os.Symlink("/dev/null", filepath.Join(units, "masked.service")))
	script := strings.Replace(cmdUnitDigests[2], "/run/current-system/etc/systemd/system", units, 1)
	out, err := exec.Command("sh", "-c", script).Output()
	if err != nil {
		t.Fatalf("the node's command: %v", err)
	}
	node, ok := parseUnitDigests(RunResult{Stdout: out})
	if !ok {
		t.Fatal("not ok")
	}
	local, err := localUnitDigests(localTree{root: root}, testToplevel)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(node, local) || len(node) != 3 {
		t.Fatalf("node %v\ndeployer %v\nwant the same three units (web, db, the getty instance; not the masked one)", node, local)
	}
}

// The node's answer: GNU sha256sum escapes a name with a backslash (and marks its
// line), and drop-ins group under their unit.
func TestParseUnitDigests(t *testing.T) {
	sum := func(s string) string { return digest(s) }
	out := sum("a") + "  a.service\n" +
		sum("o") + "  a.service.d/overrides.conf\n" +
		"\\" + sum("m") + "  mnt-foo\\x2dbar.mount\n" +
		sum("x") + "  not-a-unit\n" +
		"garbage\n"
	got, ok := parseUnitDigests(RunResult{Stdout: []byte(out)})
	if !ok {
		t.Fatal("not ok")
	}
	want := unitDigests(map[string]string{"a.service": sum("a"), "a.service.d/overrides.conf": sum("o"), `mnt-foo\x2dbar.mount`: sum("m")})
	if !reflect.DeepEqual(got, want) || len(got) != 2 || got["a.service"] == sum("a") || got[`mnt-foo\x2dbar.mount`] != sum("m") {
		t.Fatalf("got %v, want %v (a.service's digest covers its drop-in)", got, want)
	}
	if _, ok := parseUnitDigests(RunResult{ExitCode: 1}); ok {
		t.Fatal("an unread answer: ok")
	}
}

func TestPackageName(t *testing.T) {
	for in, want := range map[string][2]string{
		"/nix/store/0000-nginx-1.27.1":                        {"nginx", "1.27.1"},
		"/nix/store/0000-nixos-system-web01-25.05.20250101.a": {"nixos-system-web01", "25.05.20250101.a"},
		"/nix/store/0000-unit-fedi-web.service":               {"unit-fedi-web.service", ""},
		"/nix/store/0000-python3.12-requests-2.32.3":          {"python3.12-requests", "2.32.3"},
	} {
		if n, v := packageName(in); n != want[0] || v != want[1] {
			t.Errorf("packageName(%s) = %q %q, want %q", in, n, v, want)
		}
	}
}
