package deploybody

// Changed units a switch leaves running: switch-to-configuration does not restart a
// changed unit whose new file says `X-RestartIfChanged=false` (NixOS'
// `restartIfChanged = false`), `RefuseManualStop=true` or `X-OnlyManualStart=true`
// (switch-to-configuration-ng's main.rs, handle_modified_unit), and it prints them:
// "NOT restarting the following changed units: a.service, b.service". Such a unit keeps
// running its old code, so the verdict and the summary of changes say "changed, not
// restarted", never that the change took.

import (
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// notRestartingLine is switch-to-configuration's line naming the changed units it did
// not restart (the system's; user units have their own line).
var notRestartingLine = regexp.MustCompile(`(?m)^NOT restarting the following changed units: (.*)$`)

// notRestartedBySwitch are the units a switch's output names as changed and not
// restarted, sorted.
func notRestartedBySwitch(sr SwitchResult) []string {
	set := map[string]bool{}
	for _, out := range []string{sr.Stderr, sr.Stdout} {
		for _, m := range notRestartingLine.FindAllStringSubmatch(out, -1) {
			for _, name := range strings.Split(m[1], ",") {
				if name = strings.TrimSpace(strings.TrimRight(name, "\r")); judge.ValidUnitName(name) {
					set[name] = true
				}
			}
		}
	}
	return sortedKeys(set)
}

// notRestartedNote is how the verdict and the summary of changes name a changed unit
// the switch did not restart, with the unit file's reason when it has one:
// "web.service: changed, not restarted (restartIfChanged = false)".
func notRestartedNote(unit, reason string) string {
	if reason == "" {
		return unit + ": changed, not restarted"
	}
	return unit + ": changed, not restarted (" + reason + ")"
}

// unitsNotRestarted names the changed units the switch did not restart, each with its
// reason (notRestartedNote). Only a switch leaves units running: after a reboot
// every unit runs its new file, and a boot-only activation changed nothing yet.
func (e *runEnv) unitsNotRestarted(toplevel string, sw switched) []string {
	if sw.reboot != nil || sw.bootOnly {
		return nil
	}
	names := notRestartedBySwitch(sw.result)
	if len(names) == 0 {
		return nil
	}
	out := make([]string, 0, len(names))
	for _, name := range names {
		out = append(out, notRestartedNote(name, noRestartReason(e.tree, toplevel, name)))
	}
	return out
}

// noRestartReason is why switch-to-configuration does not restart unit when it
// changed, read from its file and drop-ins in toplevel ("" when none of its settings
// says so: the switch had a reason of its own, such as / or /nix on a new device).
func noRestartReason(lt localTree, toplevel, unit string) string {
	settings := mergedUnitSettings(lt, toplevel, unit)
	switch {
	case !unitBool(settings["Service"]["X-RestartIfChanged"], true):
		return "restartIfChanged = false"
	case unitBool(settings["Unit"]["RefuseManualStop"], false):
		return "RefuseManualStop = true"
	case unitBool(settings["Unit"]["X-OnlyManualStart"], false):
		return "X-OnlyManualStart = true"
	}
	return ""
}

// unitFiles are the files that make up unit in toplevel, in the order systemd (and
// switch-to-configuration's parse_unit) reads them: the unit's file (an instance's
// template's when the instance has none), its drop-ins (<unit>.d/*.conf, sorted), and
// an instance's own drop-ins after its template's.
func unitFiles(lt localTree, toplevel, unit string) []string {
	dir := unitDir(toplevel)
	base := unit
	if tmpl, ok := judge.TemplateOf(unit); ok {
		if _, err := lt.readFile(path.Join(dir, unit)); err != nil {
			base = tmpl
		}
	}
	files := append([]string{path.Join(dir, base)}, dropInFiles(lt, dir, base)...)
	if base != unit {
		files = append(files, dropInFiles(lt, dir, unit)...)
	}
	return files
}

// dropInFiles are the drop-ins of unit (dir/<unit>.d/*.conf), sorted.
func dropInFiles(lt localTree, dir, unit string) []string {
	entries, err := lt.readDir(path.Join(dir, unit+".d"))
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range entries {
		if strings.HasSuffix(d.Name(), ".conf") {
			out = append(out, path.Join(dir, unit+".d", d.Name()))
		}
	}
	sort.Strings(out)
	return out
}

// mergedUnitSettings reads unit's settings by section and key, each key's values in
// order across its files; an empty assignment clears the values before it, as in
// switch-to-configuration's parse_systemd_ini. Unreadable files are skipped.
func mergedUnitSettings(lt localTree, toplevel, unit string) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	for _, f := range unitFiles(lt, toplevel, unit) {
		data, err := lt.readFile(f)
		if err != nil {
			continue
		}
		section := ""
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || line[0] == '#' || line[0] == ';' {
				continue
			}
			if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
				section = strings.TrimSpace(line[1 : len(line)-1])
				continue
			}
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				continue
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if out[section] == nil {
				out[section] = map[string][]string{}
			}
			if v == "" {
				out[section][k] = []string{}
				continue
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

// unitBool is switch-to-configuration's reading of a boolean setting
// (parse_systemd_bool): the last value, true only for "1", "yes", "true" or "on"
// (exactly: "True" is false); def when the key is unset or cleared.
func unitBool(values []string, def bool) bool {
	if len(values) == 0 {
		return def
	}
	switch values[len(values)-1] {
	case "1", "yes", "true", "on":
		return true
	}
	return false
}
