package deploybody

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"sort"
	"strings"
)

// What a deploy changed, as nvd and `nixos-rebuild --diff` summarise it: store paths
// and packages added and removed, bytes copied, units added, removed and changed. It
// is computed from what the run reads anyway: the copy's closure list and its
// missing-path answer, the deployer's store (the previous system's closure, when the
// deployer holds it), the new toplevel's unit files on the deployer, and digests of
// the previous system's unit files taken in the snapshot's round trip.

// Changes is the difference between the system the node ran before a deploy and the
// new toplevel. Lists are sorted; a nil list means "unknown" (Notes says why).
type Changes struct {
	PreviousSystem string
	// PreviousClosureKnown: the deployer's store holds the previous system's closure,
	// so PathsRemoved and the package versions it replaces are known.
	PreviousClosureKnown bool
	PathsAdded           []string
	PathsRemoved         []string
	// Packages are "name version" (version may be empty); PackagesChanged are
	// "name: old → new".
	PackagesAdded   []string
	PackagesRemoved []string
	PackagesChanged []string
	PathsCopied     int
	BytesCopied     int64
	UnitsAdded      []string
	UnitsRemoved    []string
	UnitsChanged    []string
	// Counts is the full length of every list above that is known, by its attribute
	// name (paths_added, …). A list longer than ChangesListLimit keeps only its first
	// ChangesListLimit names (a deploy adds thousands of paths, and the state keeps
	// them), and a note says so.
	Counts map[string]int
	// Notes say what could not be known and why.
	Notes []string
}

// ChangesListLimit is how many names each list of Changes keeps.
const ChangesListLimit = 50

// lists are the lists of c by their attribute names, in the report's order.
func (c *Changes) lists() []struct {
	name string
	list *[]string
} {
	return []struct {
		name string
		list *[]string
	}{
		{"paths_added", &c.PathsAdded}, {"paths_removed", &c.PathsRemoved},
		{"packages_changed", &c.PackagesChanged}, {"packages_added", &c.PackagesAdded}, {"packages_removed", &c.PackagesRemoved},
		{"units_changed", &c.UnitsChanged}, {"units_added", &c.UnitsAdded}, {"units_removed", &c.UnitsRemoved},
	}
}

// bound counts every known list and cuts those longer than ChangesListLimit to their
// first ChangesListLimit names, with a note for each.
func (c *Changes) bound() {
	c.Counts = map[string]int{}
	for _, l := range c.lists() {
		if *l.list == nil {
			continue // unknown: no count
		}
		n := len(*l.list)
		c.Counts[l.name] = n
		if n > ChangesListLimit {
			*l.list = (*l.list)[:ChangesListLimit:ChangesListLimit]
			c.Notes = append(c.Notes, fmt.Sprintf("%s: %d in all, only the first %d are listed (counts has every list's full length)", l.name, n, ChangesListLimit))
		}
	}
}

// LocalStore is what the summary needs of the deployer's Nix store. The provider
// passes internal/nixstore; nil leaves the previous closure unknown.
type LocalStore interface {
	Has(path string) bool
	Closure(ctx context.Context, path string) ([]string, error)
}

// cmdUnitDigests prints "<sha256>  <name>" for each unit file of the running system. It
// rides in the snapshot's batch (no round trip of its own).
var cmdUnitDigests = []string{"sh", "-c", `cd /run/current-system/etc/systemd/system 2>/dev/null || exit 0; for f in *; do [ -f "$f" ] && sha256sum -- "$f"; done; exit 0`}

// parseUnitDigests reads the answer to cmdUnitDigests; ok is false when it is unread.
func parseUnitDigests(res RunResult) (digests map[string]string, ok bool) {
	if res.ExitCode != 0 {
		return nil, false
	}
	digests = map[string]string{}
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		sum, name, found := strings.Cut(strings.TrimSpace(line), "  ")
		if !found || len(sum) != 64 || !ValidUnitName(name) {
			continue
		}
		digests[name] = sum
	}
	return digests, true
}

// localUnitDigests digests the unit files of toplevel on the deployer.
func localUnitDigests(lt localTree, toplevel string) (map[string]string, error) {
	dir := unitDir(toplevel)
	entries, err := lt.readDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		if !ValidUnitName(name) || dependencyDir(name) || strings.HasSuffix(name, ".d") {
			continue
		}
		data, err := lt.readFile(path.Join(dir, name))
		if err != nil {
			continue // a directory or a dangling link: not a unit file
		}
		sum := sha256.Sum256(data)
		out[name] = hex.EncodeToString(sum[:])
	}
	return out, nil
}

// changesIn is what the summary of changes is made of.
type changesIn struct {
	previous, toplevel string
	copied             CopyStats
	// previousUnits are the previous system's unit files (name → sha256); nil when
	// unread.
	previousUnits map[string]string
}

// computeChanges is what a deploy changed, its lists bounded.
func (e *runEnv) computeChanges(ctx context.Context, in changesIn) *Changes {
	c := e.diffSystems(ctx, in)
	c.bound()
	return c
}

// diffSystems is what the deploy changed, every list whole.
func (e *runEnv) diffSystems(ctx context.Context, in changesIn) *Changes {
	c := &Changes{PreviousSystem: in.previous, PathsCopied: in.copied.PathsMissing, BytesCopied: in.copied.BytesSent}
	newClosure := in.copied.Closure
	var oldClosure []string
	switch {
	case c.PreviousSystem == "":
		c.Notes = append(c.Notes, "the node ran no NixOS system before: everything is new")
		oldClosure, c.PreviousClosureKnown = []string{}, true
	case c.PreviousSystem == in.toplevel:
		oldClosure, c.PreviousClosureKnown = newClosure, true
	case e.o.LocalStore != nil && e.o.LocalStore.Has(c.PreviousSystem):
		old, err := e.o.LocalStore.Closure(ctx, c.PreviousSystem)
		if err != nil {
			c.Notes = append(c.Notes, "the previous system's closure could not be read on the deployer: "+err.Error())
		} else {
			oldClosure, c.PreviousClosureKnown = old, true
		}
	default:
		c.Notes = append(c.Notes, fmt.Sprintf("the deployer's store does not hold the previous system %s: removed paths and the versions they replace are unknown; added paths are the ones the node lacked", c.PreviousSystem))
	}
	switch {
	case newClosure == nil:
		c.Notes = append(c.Notes, "the transport did not list the closure: paths unknown")
	case c.PreviousClosureKnown:
		c.PathsAdded, c.PathsRemoved = setDiff(newClosure, oldClosure), setDiff(oldClosure, newClosure)
		c.PackagesAdded, c.PackagesRemoved, c.PackagesChanged = packageDiff(c.PathsAdded, c.PathsRemoved)
	default:
		c.PathsAdded = sortedCopy(in.copied.Sent)
		c.PackagesAdded, _, _ = packageDiff(c.PathsAdded, nil)
	}
	if in.previousUnits == nil {
		c.Notes = append(c.Notes, "the previous system's unit files were unread: units unknown")
		return c
	}
	now, err := localUnitDigests(e.tree, in.toplevel)
	if err != nil {
		c.Notes = append(c.Notes, "the new toplevel's units are unreadable on the deployer: "+err.Error())
		return c
	}
	c.UnitsAdded, c.UnitsRemoved, c.UnitsChanged = []string{}, []string{}, []string{}
	for name, sum := range now {
		old, ok := in.previousUnits[name]
		switch {
		case !ok:
			c.UnitsAdded = append(c.UnitsAdded, name)
		case old != sum:
			c.UnitsChanged = append(c.UnitsChanged, name)
		}
	}
	for name := range in.previousUnits {
		if _, ok := now[name]; !ok {
			c.UnitsRemoved = append(c.UnitsRemoved, name)
		}
	}
	sort.Strings(c.UnitsAdded)
	sort.Strings(c.UnitsRemoved)
	sort.Strings(c.UnitsChanged)
	return c
}

func setDiff(a, b []string) []string {
	inB := map[string]bool{}
	for _, p := range b {
		inB[p] = true
	}
	out := []string{}
	for _, p := range a {
		if !inB[p] {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func sortedCopy(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

// packageName splits a store path's name the way nix does (builtins.parseDrvName): the
// version starts at the first dash followed by a digit.
func packageName(storePath string) (name, version string) {
	base := path.Base(storePath)
	if _, rest, ok := strings.Cut(base, "-"); ok {
		base = rest // drop the hash
	}
	for i := 0; i+1 < len(base); i++ {
		if base[i] == '-' && base[i+1] >= '0' && base[i+1] <= '9' {
			return base[:i], base[i+1:]
		}
	}
	return base, ""
}

// packageDiff groups added and removed paths by package name: a name on both sides
// changed version (or was rebuilt, when the versions agree).
func packageDiff(added, removed []string) (pkgAdded, pkgRemoved, pkgChanged []string) {
	versions := func(paths []string) map[string][]string {
		m := map[string][]string{}
		for _, p := range paths {
			n, v := packageName(p)
			m[n] = append(m[n], v)
		}
		return m
	}
	newV, oldV := versions(added), versions(removed)
	label := func(n string, vs []string) string {
		sort.Strings(vs)
		v := strings.Join(vs, ", ")
		if v == "" {
			return n
		}
		return n + " " + v
	}
	pkgAdded, pkgRemoved, pkgChanged = []string{}, []string{}, []string{}
	for n, vs := range newV {
		old, ok := oldV[n]
		switch {
		case !ok:
			pkgAdded = append(pkgAdded, label(n, vs))
		default:
			sort.Strings(vs)
			sort.Strings(old)
			from, to := strings.Join(old, ", "), strings.Join(vs, ", ")
			if from == to {
				pkgChanged = append(pkgChanged, fmt.Sprintf("%s: %s rebuilt", n, to))
			} else {
				pkgChanged = append(pkgChanged, fmt.Sprintf("%s: %s → %s", n, from, to))
			}
		}
	}
	for n, vs := range oldV {
		if _, ok := newV[n]; !ok {
			pkgRemoved = append(pkgRemoved, label(n, vs))
		}
	}
	sort.Strings(pkgAdded)
	sort.Strings(pkgRemoved)
	sort.Strings(pkgChanged)
	return pkgAdded, pkgRemoved, pkgChanged
}

// renderChanges writes the changes for the report.
func renderChanges(c *Changes) string {
	if c == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("  changes:\n")
	line := func(name string, items []string) {
		label := strings.ReplaceAll(name, "_", " ") + ":"
		switch {
		case items == nil:
			fmt.Fprintf(&b, "    %-18s unknown\n", label)
		case len(items) == 0:
			fmt.Fprintf(&b, "    %-18s none\n", label)
		case c.Counts[name] > len(items):
			fmt.Fprintf(&b, "    %-18s %s, … (%d in all)\n", label, strings.Join(items, ", "), c.Counts[name])
		default:
			fmt.Fprintf(&b, "    %-18s %s\n", label, strings.Join(items, ", "))
		}
	}
	fmt.Fprintf(&b, "    %-18s %d paths, %d bytes\n", "copied:", c.PathsCopied, c.BytesCopied)
	for _, l := range c.lists() {
		if !strings.HasPrefix(l.name, "paths_") { // paths are too many to read: counted in copied
			line(l.name, *l.list)
		}
	}
	for _, n := range c.Notes {
		fmt.Fprintf(&b, "    note: %s\n", n)
	}
	return b.String()
}
