package node_test

// Acceptance test of `activation` on the lab (the binary in TF_ACC_TERRAFORM_PATH): a
// reboot of a throwaway Incus container through fediversity_node_switch, judged on the
// booted system, and a boot-only deploy that the next plan does not take for drift.

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// activationConfig is switchConfig with an activation and a node_wait long enough for
// a container's reboot on a loaded machine.
func activationConfig(node labtest.Node, toplevel, activation string) string {
	return rebootConfig(node, sshBlock(node), toplevel, activation, "150s")
}

// rebootConfig is one fediversity_node_switch "n" with an activation, reaching the node
// through transport (a block, with any extra blocks), and the given node_wait.
func rebootConfig(node labtest.Node, transport, toplevel, activation, nodeWait string) string {
	return acctest.Config(acctest.LabProvider() + fmt.Sprintf(`
resource "fediversity_node_switch" "n" {
  node       = %q
  toplevel   = %q
  activation = %q
%s
  timings {
    node_wait       = %q
    settle          = "1s"
    watch           = "4s"
    sample_interval = "1s"
  }
}
`, node.Name, toplevel, activation, transport, nodeWait))
}

func verdictString(name string, want knownvalue.Check) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New("verdict").AtMapKey(name), want)
}

// kernel-a, booted (a lab node first boots its base system, whose kernel is not
// kernel-a's); kernel-a-v2 (the same kernel) with reboot-if-needed: a switch, no
// reboot; kernel-b (a new kernel) with reboot-if-needed: the node reboots
// into it (booted once, from the stand-in boot loader's one-shot entry), /run/booted-system
// is kernel-b, the verdict says why, how long the boot took and that the new system is
// the default entry now, and the next plan is empty; then kernel-a-v2 with activation boot: the boot
// entry only, the node keeps running kernel-b, and the next plan is empty too.
func TestAccNodeSwitchActivationReboot(t *testing.T) {
	acctest.Lab(t)
	kernelA := labtest.BuildClosure(t, "kernel-a")
	kernelB := labtest.BuildClosure(t, "kernel-b")
	kernelAv2 := labtest.BuildClosure(t, "kernel-a-v2")
	node := labtest.NewInstance(t, "acc-reboot")
	nodeLinkIs := func(link, want string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			if got := strings.TrimSpace(nodeExec(t, node, "readlink -f "+link)); got != want {
				return fmt.Errorf("%s on the node = %s, want %s", link, got, want)
			}
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:            activationConfig(node, kernelA, "reboot"),
				ConfigStateChecks: []statecheck.StateCheck{verdictBool("rebooted", true)},
				Check:             nodeLinkIs("/run/booted-system", kernelA),
			},
			{
				// The same kernel: reboot-if-needed switches, no reboot.
				Config: activationConfig(node, kernelAv2, "reboot-if-needed"),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictString("activation", knownvalue.StringExact("switched")),
					verdictBool("rebooted", false),
				},
				Check: nodeLinkIs("/run/booted-system", kernelA),
			},
			{
				Config: activationConfig(node, kernelB, "reboot-if-needed"),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
					verdictBool("rebooted", true),
					verdictString("activation", knownvalue.StringRegexp(regexp.MustCompile(`^rebooted \(`+regexp.QuoteMeta(labtest.KernelTriggerWhy(t, kernelA, kernelB))+`\); boot took \d.*; booted once from a one-shot boot entry; the new system is the default entry now that the verdict is ok$`))),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("toplevel"), knownvalue.StringExact(kernelB)),
				},
				Check: resource.ComposeTestCheckFunc(nodeLinkIs("/run/booted-system", kernelB), nodeLinkIs("/run/current-system", kernelB)),
			},
			{
				Config: activationConfig(node, kernelAv2, "boot"),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("rebooted", false),
					verdictString("activation", knownvalue.StringRegexp(regexp.MustCompile(`^boot entry set only`))),
				},
				Check: resource.ComposeTestCheckFunc(nodeLinkIs("/run/current-system", kernelB), nodeLinkIs("/nix/var/nix/profiles/system", kernelAv2)),
			},
		},
	})
}

// Switch inhibitors (<toplevel>/switch-inhibitors, JSON): inhibitor-a, booted;
// inhibitor-b (fedi-driver 570 -> 575, the same kernel) with activation switch: the
// switch is refused, and the apply fails naming the change, old -> new, with the hint
// to use reboot-if-needed; the node keeps running and booting inhibitor-a, and the state
// keeps it; with reboot-if-needed the plan and the verdict say the inhibitor is why, and
// the node reboots into inhibitor-b.
func TestAccNodeSwitchActivationInhibitor(t *testing.T) {
	acctest.Lab(t)
	inhibitorA := labtest.BuildClosure(t, "inhibitor-a")
	inhibitorB := labtest.BuildClosure(t, "inhibitor-b")
	node := labtest.NewInstance(t, "acc-inhibitor")
	// The reboot rule's why: both systems carry reboot-triggers (they have a kernel), and
	// NixOS writes the inhibitors into them, so the rule names the trigger that changed.
	// The switch's own refusal names the inhibitor in switch-to-configuration's words.
	const why = "reboot-triggers changed: fedi-driver : 570 -> 575"
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: activationConfig(node, inhibitorA, "reboot"), Check: nodeAgrees(t, node, inhibitorA, inhibitorA)},
			{
				Config:      activationConfig(node, inhibitorB, "switch"),
				ExpectError: regexp.MustCompile(`(?s)needs\s+a\s+reboot:\s+switch\s+inhibitors\s+changed:\s+fedi-driver\s+:\s+570\s+->\s+575.*reboot-if-needed`),
			},
			{
				// The refused switch changed nothing: node, boot default and state agree.
				PreConfig: func() {
					if err := nodeAgrees(t, node, inhibitorA, inhibitorA)(nil); err != nil {
						t.Errorf("after the refused switch: %v", err)
					}
				},
				Config:           activationConfig(node, inhibitorA, "reboot"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				Config:             activationConfig(node, inhibitorB, "reboot-if-needed"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks:   plannedReboot(why),
			},
			{
				Config: activationConfig(node, inhibitorB, "reboot-if-needed"),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
					verdictBool("rebooted", true),
					verdictString("activation", knownvalue.StringRegexp(regexp.MustCompile(`^rebooted \(`+regexp.QuoteMeta(why)+`\); boot took \d`))),
					stateToplevel(inhibitorB),
				},
				Check: nodeAgrees(t, node, inhibitorB, inhibitorB),
			},
		},
	})
}

// The plan says a reboot before approval: the node booted kernel-a; a plan of kernel-b
// with reboot-if-needed shows
// `reboots` naming the changed parts, read from the deployer's store against the
// booted system Read recorded; kernel-a-v2 (the same kernel) shows none; activation
// reboot shows "asked to". Plans only after the first boot: nothing else reboots.
func TestAccNodeSwitchPlanSaysReboot(t *testing.T) {
	acctest.Lab(t)
	kernelA := labtest.BuildClosure(t, "kernel-a")
	kernelB := labtest.BuildClosure(t, "kernel-b")
	kernelAv2 := labtest.BuildClosure(t, "kernel-a-v2")
	node := labtest.NewInstance(t, "acc-plan-reboot")
	plannedReboots := func(want string) resource.ConfigPlanChecks {
		return resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{
			plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
			plancheck.ExpectKnownValue(addr, tfjsonpath.New("reboots"), knownvalue.StringExact(want)),
		}}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:            activationConfig(node, kernelA, "reboot"),
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownValue(addr, tfjsonpath.New("reboots"), knownvalue.StringExact("asked to"))},
			},
			{
				Config:             activationConfig(node, kernelB, "reboot-if-needed"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks:   plannedReboots(labtest.KernelTriggerWhy(t, kernelA, kernelB)),
			},
			{
				Config:             activationConfig(node, kernelAv2, "reboot-if-needed"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks:   plannedReboots(""),
			},
			{
				Config:             activationConfig(node, kernelAv2, "reboot"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks:   plannedReboots("asked to"),
			},
		},
	})
}

// incusRebootConfig is activationConfig over the Incus API, with a snapshot rollback
// point, and a node_wait of its own.
func incusRebootConfig(node labtest.Node, toplevel, activation, nodeWait string) string {
	return rebootConfig(node, incusBlock(node)+"\n  snapshot {\n    keep = 3\n  }", toplevel, activation, nodeWait)
}

// Over Incus, a system whose boot never comes up (boot-bricks: the stand-in stage 2
// powers the node off before the boot ends): the run waits node_wait, restores the rollback point taken before the boot
// entry was set, keeps the bricked state aside as a snapshot, and the apply fails
// saying so, after the reboot. The node then runs and boots its previous system, and
// the next plan deploys the bricked system again (nothing claims it took).
func TestAccNodeSwitchIncusRebootNeverBackRestoresSnapshot(t *testing.T) {
	acctest.Lab(t)
	kernelA := labtest.BuildClosure(t, "kernel-a")
	bricks := labtest.BuildClosure(t, "boot-bricks")
	node := labtest.NewInstance(t, "acc-incus-reboot-brick")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: incusRebootConfig(node, kernelA, "switch", "60s")},
			{
				Config: incusRebootConfig(node, bricks, "reboot", "40s"),
				// The restored system, booted by the stand-in stage 2, is judged on its own.
				ExpectError: regexp.MustCompile(`(?s)unreachable\s+after\s+the\s+reboot:\s+snapshot\s+fediversity-gen-\d+\s+restored.*restored\s+system\s+\(` + regexp.QuoteMeta(kernelA) + `\)\s+was\s+judged\s+after\s+the\s+restore:\s+ok.*kept\s+as\s+snapshot\s+fediversity-bricked-`),
			},
			{
				PreConfig: func() {
					// The restore started the instance; its boot runs the stand-in stage 2
					// (bounded wait: 90 tries a second apart).
					for i := 0; i < 90 && strings.TrimSpace(nodeExec(t, node, "test -e /run/current-system && echo up || true")) != "up"; i++ {
						time.Sleep(time.Second)
					}
					got := strings.Fields(nodeExec(t, node, "readlink -f /run/current-system /run/booted-system /nix/var/nix/profiles/system"))
					if len(got) != 3 || got[0] != kernelA || got[1] != kernelA || got[2] != kernelA {
						t.Errorf("after the restore the node runs, booted and boots %q, want %s", got, kernelA)
					}
					snaps := labtest.Incus(t, "snapshot", "list", node.Instance, "--format", "csv", "-c", "n")
					if !strings.Contains(snaps, "fediversity-bricked-") {
						t.Errorf("no fediversity-bricked-* snapshot kept aside; snapshots: %s", snaps)
					}
				},
				Config:             incusRebootConfig(node, bricks, "reboot", "40s"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
		},
	})
}
