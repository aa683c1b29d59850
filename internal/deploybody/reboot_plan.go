package deploybody

// The planned reboot: what a plan (the provider's) or a run's preamble (the command's)
// says before anything changes, when it can know that a deploy will reboot the node
// (docs/activation.md#activation). The rule is the one the switch phase applies on the node
// (reboot_rule.go). Before the deploy the new toplevel is not on the node yet, so its
// side is read from the deployer's store (LocalRebootFacts), and the node's side from
// the node (RebootFactsScript), where Read recorded it.

import (
	"context"
	"fmt"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// PlannedReboot says why a deploy of a system with the planned facts to a node with
// the node's facts reboots it ("" when it switches): always for reboot, never for
// switch or boot, and for reboot-if-needed by NixOS' rule (rebootWhy). A switch refused
// by another pre-switch check reboots too, but only the switch can tell.
func PlannedReboot(a Activation, node, planned *RebootFacts) string {
	switch a {
	case ActivationReboot:
		return "asked to"
	case ActivationRebootIfNeeded:
		return rebootWhy(node, planned)
	}
	return ""
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
// It asks the node for its facts only when the activation needs them.
func ForeseeReboot(ctx context.Context, t Transport, a Activation, toplevel string) string {
	why := PlannedReboot(a, nil, nil)
	if a == ActivationRebootIfNeeded {
		planned, ok := LocalRebootFacts(toplevel)
		if !ok {
			return ""
		}
		// Bounded: a node that does not answer yet is the wait-for-node phase's to wait for.
		askCtx, cancel := context.WithTimeout(ctx, foreseeLimit)
		defer cancel()
		res, err := t.Run(askCtx, []string{"sh", "-c", RebootFactsScript}, RunOptions{Path: records.ToolPath})
		if err != nil || res.ExitCode != 0 {
			return ""
		}
		node, ok := ParseRebootFacts(string(res.Stdout))
		if !ok {
			return ""
		}
		why = PlannedReboot(a, node, planned)
	}
	if why == "" {
		return ""
	}
	return RebootNotice(t.Node(), why)
}
