package deploybody

// The planned reboot: what a plan (the provider's) or a run's preamble (the command's)
// says before anything changes, when it can know that a deploy will reboot the node
// (docs/design.md#activation). The rule is the one the switch phase applies on the node
// (rebootNeedScript): the booted system's kernel, initrd, kernel modules and systemd,
// each resolved, against the new toplevel's. Before the deploy the new toplevel is not
// on the node yet, so its side is read from the deployer's store (LocalBootParts), and
// the booted side from the node (BootedPartsScript), where Read recorded it.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// rebootParts are a system's parts a switch cannot change: NixOS' own rule (kernel,
// initrd, kernel modules) and systemd.
var rebootParts = []string{"kernel", "initrd", "kernel-modules", "systemd"}

// BootParts are what a system's rebootParts resolve to, by part ("" when the system has
// none). Nil is a node without /run/booted-system: nothing to compare with, a switch
// decides (as on the node).
type BootParts map[string]string

// BootedPartsScript prints the node's booted system's parts on one line: "none"
// without /run/booted-system, else "kernel=<path> initrd=<path> …" (empty when absent).
var BootedPartsScript = `if [ -e /run/booted-system ]; then for x in ` + strings.Join(rebootParts, " ") +
	`; do printf '%s=%s ' "$x" "$(readlink -e /run/booted-system/$x 2>/dev/null)"; done; echo; else echo none; fi`

// ParseBootedParts reads BootedPartsScript's line; ok is false when it is not one.
func ParseBootedParts(line string) (parts BootParts, ok bool) {
	line = strings.TrimSpace(line)
	if line == "none" {
		return nil, true
	}
	parts = BootParts{}
	for _, f := range strings.Fields(line) {
		k, v, found := strings.Cut(f, "=")
		if !found {
			return nil, false
		}
		parts[k] = v
	}
	for _, p := range rebootParts {
		if _, found := parts[p]; !found {
			return nil, false
		}
	}
	return parts, true
}

// String is the parts as BootedPartsScript prints them (for a record in state).
func (b BootParts) String() string {
	if b == nil {
		return "none"
	}
	var out []string
	for _, p := range rebootParts {
		out = append(out, p+"="+b[p])
	}
	return strings.Join(out, " ")
}

// LocalBootParts resolves toplevel's parts in the deployer's store. ok is false when
// the toplevel is not there (not built yet): the plan cannot know.
func LocalBootParts(toplevel string) (parts BootParts, ok bool) {
	if _, err := os.Stat(toplevel); err != nil {
		return nil, false
	}
	parts = BootParts{}
	for _, p := range rebootParts {
		resolved, err := filepath.EvalSymlinks(filepath.Join(toplevel, p))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			resolved = "" // as readlink -e: absent
		case err != nil:
			return nil, false
		}
		parts[p] = resolved
	}
	return parts, true
}

// PlannedReboot says why a deploy of a system with the planned parts to a node that
// booted the booted parts reboots it ("" when it switches): always for reboot, never
// for switch or boot, and for reboot-if-needed by NixOS' rule. A switch refused by a
// pre-switch check (an inhibitor) reboots too, but only the switch can tell.
func PlannedReboot(a Activation, booted, planned BootParts) string {
	switch a {
	case ActivationReboot:
		return "asked to"
	case ActivationRebootIfNeeded:
	default:
		return ""
	}
	if booted == nil {
		return ""
	}
	var changed []string
	for _, p := range rebootParts {
		if booted[p] != planned[p] {
			changed = append(changed, p)
		}
	}
	return changedWhy(changed)
}

// changedWhy is the reason of a reboot for changed parts, in rebootParts' order:
// "kernel, initrd changed" ("" for none), as the plan and the verdict both say it.
func changedWhy(changed []string) string {
	if len(changed) == 0 {
		return ""
	}
	return strings.Join(changed, ", ") + " changed"
}

// RebootNotice is what the plan and the command say of a node a deploy will reboot:
// "node web01 will reboot: kernel changed".
func RebootNotice(node, why string) string {
	return fmt.Sprintf("node %s will reboot: %s", node, why)
}

// foreseeLimit bounds ForeseeReboot's question to the node.
const foreseeLimit = 15 * time.Second

// ForeseeReboot is what a front end without a plan (the command) says before it
// deploys toplevel to the node: the RebootNotice of a deploy that will reboot it, ""
// when it will switch or cannot tell yet (the toplevel not in the deployer's store,
// the node not answering: the deploy itself then decides, and its verdict says why).
// It asks the node for its booted system only when the activation needs it.
func ForeseeReboot(ctx context.Context, t Transport, a Activation, toplevel string) string {
	why := PlannedReboot(a, nil, nil)
	if a == ActivationRebootIfNeeded {
		planned, ok := LocalBootParts(toplevel)
		if !ok {
			return ""
		}
		// Bounded: a node that does not answer yet is the wait-for-node phase's to wait for.
		askCtx, cancel := context.WithTimeout(ctx, foreseeLimit)
		defer cancel()
		res, err := t.Run(askCtx, []string{"sh", "-c", BootedPartsScript}, RunOptions{Path: lockPath})
		if err != nil || res.ExitCode != 0 {
			return ""
		}
		booted, ok := ParseBootedParts(string(res.Stdout))
		if !ok {
			return ""
		}
		why = PlannedReboot(a, booted, planned)
	}
	if why == "" {
		return ""
	}
	return RebootNotice(t.Node(), why)
}
