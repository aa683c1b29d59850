package deploybody

// The reboot rule: whether a new system needs a reboot rather than a switch. It is
// NixOS' own (docs/activation.md#activation), and one rule for the plan (reboot_plan.go)
// and the deploy (activation.go).
//
// NixOS writes what needs a reboot into <toplevel>/reboot-triggers, a JSON object of
// strings: kernel, firmware, kernel-params and the switch inhibitors
// (nixos/modules/tasks/auto-upgrade.nix, rebootTriggers; a container's holds only the
// inhibitors). nixos-upgrade.service reboots when a key present in both the booted
// system's file and the new system's has another value. A system built before NixOS
// wrote that file is compared the way auto-upgrade.nix compared it then: its kernel,
// initrd and kernel-modules links against the booted system's. A changed systemd needs
// no reboot: switch-to-configuration re-executes PID 1.
//
// <toplevel>/switch-inhibitors is the same kind of object
// (nixos/modules/system/activation/switchable-system.nix): a key present in both the
// running system's and the new system's with another value makes
// switch-to-configuration refuse `switch` and `test`, so only a reboot applies it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// legacyRebootParts are the links NixOS compared before reboot-triggers existed.
var legacyRebootParts = []string{"kernel", "initrd", "kernel-modules"}

// The files of a toplevel the rule reads.
const (
	rebootTriggersFile   = "reboot-triggers"
	switchInhibitorsFile = "switch-inhibitors"
)

// RebootFacts are what decides whether a system needs a reboot to replace another.
// Read from a node (RebootFactsScript) they describe its booted system (Parts and
// Triggers) and its running system (Inhibitors); read from a new toplevel
// (LocalRebootFacts, or on the node at the deploy), that toplevel's own.
type RebootFacts struct {
	// Parts are what legacyRebootParts resolve to, by name ("" when absent).
	Parts map[string]string
	// Triggers is the system's reboot-triggers (nil: the system has none).
	Triggers map[string]string
	// Inhibitors is the switch-inhibitors a switch compares (nil: none).
	Inhibitors map[string]string
}

// ComponentChange is a key of reboot-triggers or switch-inhibitors whose value
// differs between two systems.
type ComponentChange struct{ Name, Old, New string }

// String is the change as NixOS prints it: "<name> : <old> -> <new>".
func (c ComponentChange) String() string { return c.Name + " : " + c.Old + " -> " + c.New }

// changedComponents are the keys in both old and new whose values differ, sorted: the
// comparison of auto-upgrade.nix and of the switch-inhibitors check (a key only one
// side has changes nothing, so a component added or removed needs no reboot).
func changedComponents(old, new map[string]string) []ComponentChange {
	var out []ComponentChange
	for name, was := range old {
		if now, ok := new[name]; ok && now != was {
			out = append(out, ComponentChange{Name: name, Old: was, New: now})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// componentsWhy is the reason a list of changed components gives, in the words of the
// plan, the verdict and the error: "switch inhibitors changed: dbus : dbus -> broker".
// Changes are separated by "; " (kernel-params' value holds commas).
func componentsWhy(file string, changes []ComponentChange) string {
	lines := make([]string, len(changes))
	for i, c := range changes {
		lines[i] = c.String()
	}
	return file + " changed: " + strings.Join(lines, "; ")
}

// inhibitorsWhy is the reason of a reboot (or of a refused switch) for changed switch
// inhibitors.
func inhibitorsWhy(changes []ComponentChange) string {
	return componentsWhy("switch inhibitors", changes)
}

// parseComponents reads a reboot-triggers or switch-inhibitors file. Like NixOS' own
// check (`try fromjson catch {}`), a file that is not a JSON object counts as an empty
// one. NixOS writes only strings; any other value is compared as its JSON text.
func parseComponents(data []byte) map[string]string {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		return map[string]string{}
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			out[k] = s
			continue
		}
		var compact bytes.Buffer
		if json.Compact(&compact, v) == nil {
			out[k] = compact.String()
		}
	}
	return out
}

// rebootWhy says why a system with the planned facts needs a reboot on a node with the
// node's facts ("" when a switch applies it; also when the node booted no NixOS
// system: nothing to compare with, the switch decides). Reboot-triggers decide when
// both systems have them, else the legacy parts; a system whose switch the inhibitors
// would refuse needs a reboot too.
func rebootWhy(node, planned *RebootFacts) string {
	if node == nil || planned == nil {
		return ""
	}
	if node.Triggers != nil && planned.Triggers != nil {
		if c := changedComponents(node.Triggers, planned.Triggers); len(c) > 0 {
			return componentsWhy(rebootTriggersFile, c)
		}
	} else {
		var changed []string
		for _, p := range legacyRebootParts {
			if node.Parts[p] != planned.Parts[p] {
				changed = append(changed, p)
			}
		}
		if len(changed) > 0 {
			return strings.Join(changed, ", ") + " changed"
		}
	}
	if c := changedComponents(node.Inhibitors, planned.Inhibitors); len(c) > 0 {
		return inhibitorsWhy(c)
	}
	return ""
}

// rebootFactsFunctions are shell functions that print a system's RebootFacts on one
// line, fields split by tabs: `facts <system> <inhibitors' system>` prints each legacy
// part resolved ("" when absent: readlink -e's answer), then reboot-triggers=<JSON, or
// none>, then switch-inhibitors=<JSON, or none>. A JSON file's newlines and tabs become
// spaces (JSON allows neither inside a string, so its text is kept), by the shell
// itself. Only coreutils.
//
// The parts are resolved with linkFunctions: one readlink -m for the three.
var rebootFactsFunctions = linkFunctions + `tab='	'
json() { printf '%s=' "$1"; if [ -f "$2" ]; then while IFS= read -r l || [ -n "$l" ]; do
while :; do case $l in *"$tab"*) l=${l%%"$tab"*}' '${l#*"$tab"} ;; *) break ;; esac; done; printf '%s ' "$l"; done <"$2"
else printf none; fi; }
facts() { links "$1/` + strings.Join(legacyRebootParts, `" "$1/`) + `"
for x in ` + strings.Join(legacyRebootParts, " ") + `; do link "$1/$x"; printf '%s=%s\t' "$x" "$p"; done
json ` + rebootTriggersFile + ` "$1/` + rebootTriggersFile + `"; printf '\t'; json ` + switchInhibitorsFile + ` "$2/` + switchInhibitorsFile + `"; echo; }`

// RebootFactsScript prints the node's RebootFacts on one line: "none" without
// /run/booted-system, else its booted system's parts and reboot-triggers and its
// running system's switch-inhibitors. It ends without a newline, so that Read can
// follow it with "; " and more.
var RebootFactsScript = rebootFactsFunctions + `
if [ -e /run/booted-system ]; then facts /run/booted-system /run/current-system; else echo none; fi`

// ParseRebootFacts reads RebootFactsScript's line (and the line a plan kept in state,
// RebootFacts.String); ok is false when it is not one. nil is a node that booted no
// NixOS system. A line of the earlier form (space-separated parts, a systemd part) reads
// as its legacy parts.
func ParseRebootFacts(line string) (facts *RebootFacts, ok bool) {
	line = strings.TrimRight(line, "\r\n")
	if strings.TrimSpace(line) == "none" {
		return nil, true
	}
	fields := strings.Split(line, "\t")
	if len(fields) == 1 {
		fields = strings.Fields(line)
	}
	facts = &RebootFacts{Parts: map[string]string{}}
	for _, f := range fields {
		k, v, found := strings.Cut(strings.TrimSpace(f), "=")
		if !found {
			if strings.TrimSpace(f) == "" {
				continue
			}
			return nil, false
		}
		switch k {
		case rebootTriggersFile:
			facts.Triggers = componentsField(v)
		case switchInhibitorsFile:
			facts.Inhibitors = componentsField(v)
		default:
			facts.Parts[k] = v
		}
	}
	for _, p := range legacyRebootParts {
		if _, found := facts.Parts[p]; !found {
			return nil, false
		}
	}
	return facts, true
}

// componentsField reads reboot-triggers= or switch-inhibitors= ("none": no file).
func componentsField(v string) map[string]string {
	if strings.TrimSpace(v) == "none" {
		return nil
	}
	return parseComponents([]byte(v))
}

// String is the facts as RebootFactsScript prints them (for a record in state).
func (f *RebootFacts) String() string {
	if f == nil {
		return "none"
	}
	var out []string
	for _, p := range legacyRebootParts {
		out = append(out, p+"="+f.Parts[p])
	}
	field := func(name string, m map[string]string) string {
		if m == nil {
			return name + "=none"
		}
		b, _ := json.Marshal(m) // map[string]string always marshals
		return name + "=" + string(b)
	}
	out = append(out, field(rebootTriggersFile, f.Triggers), field(switchInhibitorsFile, f.Inhibitors))
	return strings.Join(out, "\t")
}

// LocalRebootFacts reads toplevel's facts in the deployer's store (its own
// switch-inhibitors). ok is false when the toplevel is not there (not built yet): the
// plan cannot know.
func LocalRebootFacts(toplevel string) (facts *RebootFacts, ok bool) {
	if _, err := os.Stat(toplevel); err != nil {
		return nil, false
	}
	facts = &RebootFacts{Parts: map[string]string{}}
	for _, p := range legacyRebootParts {
		resolved, err := filepath.EvalSymlinks(filepath.Join(toplevel, p))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			resolved = "" // as readlink -e: absent
		case err != nil:
			return nil, false
		}
		facts.Parts[p] = resolved
	}
	var err error
	if facts.Triggers, err = localComponents(filepath.Join(toplevel, rebootTriggersFile)); err != nil {
		return nil, false
	}
	if facts.Inhibitors, err = localComponents(filepath.Join(toplevel, switchInhibitorsFile)); err != nil {
		return nil, false
	}
	return facts, true
}

// localComponents reads a components file (nil, nil when the toplevel has none).
func localComponents(file string) (map[string]string, error) {
	data, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return parseComponents(data), nil
}
