package deploybody

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// localTree reads a closure's files on the deployer. root stands for "/" ("" is the
// deployer's own root); absolute symlinks are resolved inside root, the way a chroot
// would see them, so a closure unpacked under a test directory reads like the store.
type localTree struct{ root string }

const maxSymlinkHops = 40

// resolve maps an absolute closure path to a path on the deployer, following every
// symlink inside root.
func (lt localTree) resolve(p string) (string, error) {
	if lt.root == "" {
		return p, nil
	}
	pending := strings.Split(strings.TrimPrefix(path.Clean("/"+p), "/"), "/")
	current := "/"
	hops := 0
	for len(pending) > 0 {
		part := pending[0]
		pending = pending[1:]
		if part == "" || part == "." {
			continue
		}
		if part == ".." {
			current = path.Dir(current)
			continue
		}
		next := path.Join(current, part)
		host := filepath.Join(lt.root, filepath.FromSlash(next))
		info, err := os.Lstat(host)
		if err != nil || info.Mode()&os.ModeSymlink == 0 {
			current = next
			continue
		}
		hops++
		if hops > maxSymlinkHops {
			return "", fmt.Errorf("too many symlinks resolving %s under %s", p, lt.root)
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", err
		}
		rest := strings.Split(strings.TrimPrefix(path.Clean("/"+target), "/"), "/")
		if path.IsAbs(target) {
			current = "/"
		} else {
			rest = strings.Split(target, "/")
		}
		pending = append(rest, pending...)
	}
	return filepath.Join(lt.root, filepath.FromSlash(current)), nil
}

func (lt localTree) readDir(p string) ([]os.DirEntry, error) {
	host, err := lt.resolve(p)
	if err != nil {
		return nil, err
	}
	return os.ReadDir(host)
}

func (lt localTree) readFile(p string) ([]byte, error) {
	host, err := lt.resolve(p)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(host)
}

// readRegularFile reads p when it resolves to a regular file: a unit masked by a link
// to /dev/null is no unit file, as `[ -f ]` says on the node.
func (lt localTree) readRegularFile(p string) ([]byte, error) {
	host, err := lt.resolve(p)
	if err != nil {
		return nil, err
	}
	info, err := os.Stat(host)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	return os.ReadFile(host)
}

// closureUnits is what the body knows about the units of a toplevel.
type closureUnits struct {
	// owned are the names in <toplevel>/etc/systemd/system/ (files and symlinks).
	owned map[string]bool
	// wanted are the names in <toplevel>/etc/systemd/system/*.{wants,requires,upholds}/.
	wanted map[string]bool
	// rejected are entries that are not valid unit names (skipped, reported).
	rejected []string
}

func (c *closureUnits) owns(unit string) bool {
	if c.owned[unit] {
		return true
	}
	tmpl, ok := judge.TemplateOf(unit)
	return ok && c.owned[tmpl]
}

func (c *closureUnits) wants(unit string) bool {
	if c.wanted[unit] {
		return true
	}
	tmpl, ok := judge.TemplateOf(unit)
	return ok && c.wanted[tmpl]
}

// concreteUnits are the owned and wanted units that can be shown (no templates).
func (c *closureUnits) concreteUnits() []string {
	set := map[string]bool{}
	for u := range c.owned {
		if !judge.IsTemplate(u) {
			set[u] = true
		}
	}
	for u := range c.wanted {
		if !judge.IsTemplate(u) {
			set[u] = true
		}
	}
	return sortedKeys(set)
}

func unitDir(toplevel string) string { return path.Join(toplevel, "etc/systemd/system") }

var dependencyDirSuffixes = []string{".wants", ".requires", ".upholds"}

// readClosureUnits lists the units a toplevel owns and wants.
func readClosureUnits(lt localTree, toplevel string) (*closureUnits, error) {
	dir := unitDir(toplevel)
	entries, err := lt.readDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the closure's unit directory %s on the deployer: %w", dir, err)
	}
	c := &closureUnits{owned: map[string]bool{}, wanted: map[string]bool{}}
	for _, e := range entries {
		name := e.Name()
		if dependencyDir(name) {
			sub, err := lt.readDir(path.Join(dir, name))
			if err != nil {
				continue // a dangling dependency dir wants nothing we can name
			}
			for _, w := range sub {
				if judge.ValidUnitName(w.Name()) {
					c.wanted[w.Name()] = true
				} else {
					c.rejected = append(c.rejected, path.Join(name, w.Name()))
				}
			}
			continue
		}
		if strings.HasSuffix(name, ".d") {
			continue // drop-in directory (or a symlink to one)
		}
		if judge.ValidUnitName(name) {
			c.owned[name] = true
		} else {
			c.rejected = append(c.rejected, name)
		}
	}
	sort.Strings(c.rejected)
	return c, nil
}

func dependencyDir(name string) bool {
	for _, s := range dependencyDirSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// loopBudgetKey is the unit-file property a unit declares its loop budget with.
const loopBudgetKey = "X-LoopBudget"

// unitFileLoopBudget reads X-LoopBudget= from the unit's file and drop-ins in the
// closure (for an instance, its template's). found is false when none declares it.
func unitFileLoopBudget(lt localTree, toplevel, unit string) (budget int, found bool, err error) {
	names := []string{unit}
	if tmpl, ok := judge.TemplateOf(unit); ok {
		names = []string{tmpl, unit}
	}
	dir := unitDir(toplevel)
	var files []string
	for _, n := range names {
		files = append(files, path.Join(dir, n))
		dropIns, _ := lt.readDir(path.Join(dir, n+".d"))
		for _, d := range dropIns {
			if strings.HasSuffix(d.Name(), ".conf") {
				files = append(files, path.Join(dir, n+".d", d.Name()))
			}
		}
	}
	for _, f := range files {
		data, readErr := lt.readFile(f)
		if readErr != nil {
			continue
		}
		for _, kv := range iniValues(string(data), map[string]bool{"Unit": true, "Service": true}, loopBudgetKey) {
			n, convErr := strconv.Atoi(kv)
			if convErr != nil || n < 0 {
				err = fmt.Errorf("%s: %s=%q is not a non-negative number", f, loopBudgetKey, kv)
				continue
			}
			budget, found = n, true
		}
	}
	return budget, found, err
}

// iniValues returns, in order, the values of key inside the given sections of a
// systemd-style INI file.
func iniValues(text string, sections map[string]bool, key string) []string {
	var values []string
	inSection := false
	scanner := bufio.NewScanner(strings.NewReader(text))
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			inSection = sections[strings.TrimSpace(line[1:len(line)-1])]
			continue
		}
		if !inSection {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == key {
			values = append(values, strings.TrimSpace(v))
		}
	}
	return values
}

// linkRequirement is a network link file that matches permanent hardware addresses.
type linkRequirement struct {
	File string   // path in the closure
	MACs []string // lower-case; the file matches when the node has any of them
}

// readLinkRequirements lists the closure's etc/systemd/network/*.link files that set
// PermanentMACAddress= in [Match]. A closure without the directory has none.
func readLinkRequirements(lt localTree, toplevel string) ([]linkRequirement, error) {
	dir := path.Join(toplevel, "etc/systemd/network")
	entries, err := lt.readDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s on the deployer: %w", dir, err)
	}
	var reqs []linkRequirement
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".link") {
			continue
		}
		file := path.Join(dir, e.Name())
		data, err := lt.readFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading link file %s on the deployer: %w", file, err)
		}
		var macs []string
		for _, v := range iniValues(string(data), map[string]bool{"Match": true}, "PermanentMACAddress") {
			if v == "" {
				macs = nil // an empty assignment resets the list
				continue
			}
			for _, m := range strings.Fields(v) {
				if mac, ok := normalizeMAC(m); ok {
					macs = append(macs, mac)
				}
			}
		}
		if len(macs) > 0 {
			reqs = append(reqs, linkRequirement{File: file, MACs: macs})
		}
	}
	return reqs, nil
}

// normalizeMAC accepts a colon or dash separated 6-byte address.
func normalizeMAC(s string) (string, bool) {
	s = strings.ToLower(strings.ReplaceAll(s, "-", ":"))
	parts := strings.Split(s, ":")
	if len(parts) != 6 {
		return "", false
	}
	for _, p := range parts {
		if len(p) != 2 || strings.Trim(p, "0123456789abcdef") != "" {
			return "", false
		}
	}
	return s, true
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
