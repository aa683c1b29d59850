package deploybody

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// What a deploy changed, as nvd and `nixos-rebuild --diff` summarise it: store paths
// and packages added and removed, bytes copied, units added, removed and changed, and
// the changed units the switch did not restart. It is computed from what the run reads
// anyway: the copy's closure list and its missing-path answer, the deployer's store
// (the previous system's closure, when the deployer holds it), the new toplevel's unit
// files on the deployer, digests of the previous system's unit files taken in the
// snapshot's round trip, and the switch's output.

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
	// UnitsChanged are the units in both whose file or drop-ins (<unit>.d/*.conf)
	// differ.
	UnitsChanged []string
	// UnitsNotRestarted are the changed units the switch left running their old code,
	// as "<unit>: changed, not restarted (restartIfChanged = false)" (not_restarted.go);
	// empty after a reboot.
	UnitsNotRestarted []string
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
		{"units_changed", &c.UnitsChanged}, {"units_not_restarted", &c.UnitsNotRestarted}, {"units_added", &c.UnitsAdded}, {"units_removed", &c.UnitsRemoved},
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

// cmdUnitDigests prints "<sha256>  <file>" for each unit file of the running system and
// each of its drop-ins (<unit>.d/*.conf: NixOS configures upstream units through
// <unit>.d/overrides.conf), in one sha256sum. Masked units (links to /dev/null) are not
// files. It rides in the snapshot's batch (no round trip of its own).
var cmdUnitDigests = []string{"sh", "-c", `cd /run/current-system/etc/systemd/system 2>/dev/null || exit 0
for f in * *.d/*.conf; do [ -f "$f" ] && set -- "$@" "$f"; done
[ $# -eq 0 ] || sha256sum -- "$@"; exit 0`}

// parseUnitDigests reads the answer to cmdUnitDigests into one digest per unit
// (unitDigests); ok is false when it is unread.
func parseUnitDigests(res RunResult) (digests map[string]string, ok bool) {
	if res.ExitCode != 0 {
		return nil, false
	}
	files := map[string]string{}
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		line = strings.TrimRight(line, "\r")
		// GNU sha256sum marks a line whose name it escaped with a leading backslash
		// (a unit name such as dev-disk-by\x2dlabel-root.device has one).
		escaped := strings.HasPrefix(line, "\\")
		sum, name, found := strings.Cut(strings.TrimPrefix(line, "\\"), "  ")
		if !found || len(sum) != 64 {
			continue
		}
		if escaped {
			name = strings.NewReplacer(`\\`, `\`, `\n`, "\n").Replace(name)
		}
		files[name] = sum
	}
	return unitDigests(files), true
}

// unitDigests makes one digest per unit of the digests of its files (file name under
// the unit directory → sha256): a unit without drop-ins keeps its file's digest; one
// with drop-ins gets a digest of its file's and each drop-in's, by name. A unit made
// only of drop-ins (an instance NixOS configures that way) counts too.
func unitDigests(files map[string]string) map[string]string {
	main := map[string]string{}
	dropIns := map[string][]string{}
	for name, sum := range files {
		unit, conf, isDropIn := strings.Cut(name, ".d/")
		switch {
		case isDropIn && judge.ValidUnitName(unit) && strings.HasSuffix(conf, ".conf") && !strings.Contains(conf, "/"):
			dropIns[unit] = append(dropIns[unit], conf+" "+sum)
		case !isDropIn && judge.ValidUnitName(name):
			main[name] = sum
		}
	}
	out := make(map[string]string, len(main))
	for name, sum := range main {
		out[name] = sum
	}
	for unit, confs := range dropIns {
		sort.Strings(confs)
		combined := sha256.Sum256([]byte(main[unit] + "\n" + strings.Join(confs, "\n")))
		out[unit] = hex.EncodeToString(combined[:])
	}
	return out
}

// localUnitDigests digests the unit files and drop-ins of toplevel on the deployer,
// the way cmdUnitDigests does on the node.
func localUnitDigests(lt localTree, toplevel string) (map[string]string, error) {
	dir := unitDir(toplevel)
	entries, err := lt.readDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	digest := func(name string) {
		data, err := lt.readRegularFile(path.Join(dir, name))
		if err != nil {
			return // a directory, a dangling link or a masked unit: not a unit file
		}
		sum := sha256.Sum256(data)
		files[name] = hex.EncodeToString(sum[:])
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case dependencyDir(name):
		case strings.HasSuffix(name, ".d"):
			if !judge.ValidUnitName(strings.TrimSuffix(name, ".d")) {
				continue
			}
			confs, err := lt.readDir(path.Join(dir, name))
			if err != nil {
				continue
			}
			for _, c := range confs {
				if strings.HasSuffix(c.Name(), ".conf") {
					digest(name + "/" + c.Name())
				}
			}
		case judge.ValidUnitName(name):
			digest(name)
		}
	}
	return unitDigests(files), nil
}

// changesIn is what the summary of changes is made of.
type changesIn struct {
	previous, toplevel string
	copied             CopyStats
	// previousUnits are the previous system's unit files (name → sha256); nil when
	// unread.
	previousUnits map[string]string
	// notRestarted are the changed units the switch left running (not_restarted.go).
	notRestarted []string
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
	c.UnitsNotRestarted = append([]string{}, in.notRestarted...)
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
		switch {
		case strings.HasPrefix(l.name, "paths_"): // too many to read: counted in copied
		case l.name == "units_not_restarted" && len(*l.list) == 0: // said only when there are some
		default:
			line(l.name, *l.list)
		}
	}
	for _, n := range c.Notes {
		fmt.Fprintf(&b, "    note: %s\n", n)
	}
	return b.String()
}
