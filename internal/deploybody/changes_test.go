package deploybody

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
		UnitsAdded: []string{}, UnitsRemoved: []string{"gone.service"}, UnitsChanged: []string{"web.service"},
		Counts: map[string]int{"paths_added": 3, "paths_removed": 3, "packages_added": 1, "packages_removed": 1,
			"packages_changed": 2, "units_added": 0, "units_removed": 1, "units_changed": 1},
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
