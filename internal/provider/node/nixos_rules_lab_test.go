package node_test

// Acceptance tests of what switch-to-configuration does on NixOS that the deploy must
// say as it is (internal/deploybody/reboot_rule.go, not_restarted.go, changes.go,
// boot_once.go), on the NixOS-shaped lab node through the binary in
// TF_ACC_TERRAFORM_PATH: NixOS' reboot rule (reboot-triggers; a new systemd re-executes),
// a changed unit marked restartIfChanged = false, a change made only in a drop-in, and
// the one-shot boot entry on a boot loader that counts tries. Each ends with the node's
// running system, its boot default and the state in agreement.

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// nextBootScript prints the system the node's boot loader boots next (the stand-in's:
// the one-shot entry, else the pinned default, else loader.conf's; an entry found by its
// ID, its file name without a boot-counting counter), then the system profile, the
// running system and the booted system, one a line.
const nextBootScript = `efi=/var/lib/fediversity-standin-efi
id=$(cat $efi/LoaderEntryOneShot 2>/dev/null); [ -n "$id" ] || id=$(cat $efi/LoaderEntryDefault 2>/dev/null)
[ -n "$id" ] || id=$(sed -n 's/^default //p' /boot/loader/loader.conf 2>/dev/null)
next=""
for x in /boot/loader/entries/*.conf; do
  [ -f "$x" ] || continue
  [ "$(basename "$x" | sed 's/+[0-9][0-9]*\(-[0-9][0-9]*\)\{0,1\}\.conf$/.conf/')" = "$id" ] && next=$(sed -n 's|^options init=\(/nix/store/[^ ]*\)/init.*|\1|p' "$x")
done
printf '%s\n' "$next" "$(readlink -e /nix/var/nix/profiles/system)" "$(readlink -e /run/current-system)" "$(readlink -e /run/booted-system)"`

// nodeAgrees checks that the node runs running, boots it next (its boot loader's
// default and its system profile), and booted the system booted; the state's toplevel is
// checked beside it (stateToplevel).
func nodeAgrees(t *testing.T, node labtest.Node, running, booted string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		f := strings.Split(nodeExec(t, node, nextBootScript), "\n")
		for len(f) < 4 {
			f = append(f, "")
		}
		got := map[string]string{"boot loader's next boot": f[0], "system profile": f[1], "/run/current-system": f[2], "/run/booted-system": f[3]}
		want := map[string]string{"boot loader's next boot": running, "system profile": running, "/run/current-system": running, "/run/booted-system": booted}
		for k, w := range want {
			if strings.TrimSpace(got[k]) != w {
				return fmt.Errorf("%s on the node = %q, want %s", k, got[k], w)
			}
		}
		return nil
	}
}

func stateToplevel(toplevel string) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New("toplevel"), knownvalue.StringExact(toplevel))
}

func changesList(name string, want ...string) statecheck.StateCheck {
	var checks []knownvalue.Check
	for _, w := range want {
		checks = append(checks, knownvalue.StringExact(w))
	}
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New("changes").AtMapKey(name), knownvalue.ListExact(checks))
}

// plannedReboot is a plan-only step's check: the deploy it plans says `reboots = want`.
func plannedReboot(want string) resource.ConfigPlanChecks {
	return resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{
		plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
		plancheck.ExpectKnownValue(addr, tfjsonpath.New("reboots"), knownvalue.StringExact(want)),
	}}
}

// NixOS' reboot rule with reboot-triggers: the node boots triggers-a (reboot-triggers:
// kernel 6.12, firmware, kernel-params "quiet", one inhibitor). triggers-systemd (the
// same triggers, a new systemd) under reboot-if-needed: the plan says no reboot, the
// apply switches, and the verdict says the switch re-executed systemd; the node still
// runs the boot it had. triggers-params (kernel-params "quiet,console=ttyS0", nothing
// else) under reboot-if-needed: the plan says the node will reboot and why, old -> new,
// and the apply reboots it into triggers-params. Then the plan is empty.
func TestAccNodeSwitchNixOSRebootTriggers(t *testing.T) {
	acctest.Lab(t)
	a := labtest.BuildClosure(t, "triggers-a")
	sysd := labtest.BuildClosure(t, "triggers-systemd")
	params := labtest.BuildClosure(t, "triggers-params")
	node := labtest.NewInstance(t, "acc-triggers")
	const why = "reboot-triggers changed: kernel-params : quiet -> quiet,console=ttyS0"
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				// The node boots triggers-a: the booted system the rule compares with.
				Config:            activationConfig(node, a, "reboot"),
				ConfigStateChecks: []statecheck.StateCheck{verdictBool("rebooted", true), stateToplevel(a)},
				Check:             nodeAgrees(t, node, a, a),
			},
			{
				Config:             activationConfig(node, sysd, "reboot-if-needed"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks:   plannedReboot(""),
			},
			{
				Config: activationConfig(node, sysd, "reboot-if-needed"),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
					verdictBool("rebooted", false),
					verdictString("activation", knownvalue.StringExact("switched; systemd re-executed by the switch (a new systemd needs no reboot)")),
					stateToplevel(sysd),
				},
				Check: nodeAgrees(t, node, sysd, a),
			},
			{
				Config:             activationConfig(node, params, "reboot-if-needed"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks:   plannedReboot(why),
			},
			{
				Config: activationConfig(node, params, "reboot-if-needed"),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
					verdictBool("rebooted", true),
					verdictString("activation", knownvalue.StringRegexp(regexp.MustCompile(`^rebooted \(`+regexp.QuoteMeta(why)+`\); boot took \d`))),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("reboots"), knownvalue.StringExact(why)),
					stateToplevel(params),
				},
				Check: nodeAgrees(t, node, params, params),
			},
			{
				Config:           activationConfig(node, params, "reboot-if-needed"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
		},
	})
}

// A changed unit marked restartIfChanged = false (fedi-keep.service, keep-a to keep-b):
// the switch leaves it running its old code, and the verdict and the summary of changes
// say "changed, not restarted (restartIfChanged = false)" while the unit is listed as
// changed; its process is the one keep-a started.
func TestAccNodeSwitchNixOSRestartIfChangedFalse(t *testing.T) {
	acctest.Lab(t)
	keepA := labtest.BuildClosure(t, "keep-a")
	keepB := labtest.BuildClosure(t, "keep-b")
	node := labtest.NewInstance(t, "acc-keep")
	booted := strings.TrimSpace(nodeExec(t, node, "readlink -e /run/booted-system"))
	const said = "fedi-keep.service: changed, not restarted (restartIfChanged = false)"
	var invocation string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:            activationConfig(node, keepA, "switch"),
				ConfigStateChecks: []statecheck.StateCheck{verdictList("not_restarted"), stateToplevel(keepA)},
				Check: func(*terraform.State) error {
					invocation = strings.TrimSpace(nodeExec(t, node, "systemctl show -p InvocationID --value fedi-keep.service"))
					if invocation == "" {
						return fmt.Errorf("fedi-keep.service does not run after keep-a")
					}
					return nil
				},
			},
			{
				Config: activationConfig(node, keepB, "switch"),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
					verdictList("not_restarted", said),
					changesList("units_not_restarted", said),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("changes").AtMapKey("units_changed"),
						knownvalue.ListPartial(map[int]knownvalue.Check{0: knownvalue.StringExact("fedi-keep.service")})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("verdict").AtMapKey("report"), knownvalue.StringRegexp(regexp.MustCompile(regexp.QuoteMeta(said)))),
					stateToplevel(keepB),
				},
				Check: resource.ComposeTestCheckFunc(nodeAgrees(t, node, keepB, booted), func(*terraform.State) error {
					if got := strings.TrimSpace(nodeExec(t, node, "systemctl show -p InvocationID --value fedi-keep.service")); got != invocation {
						return fmt.Errorf("fedi-keep.service was restarted (invocation %s, was %s); restartIfChanged = false keeps it", got, invocation)
					}
					return nil
				}),
			},
		},
	})
}

// A change made only in a drop-in (fedi-plain.service.d/overrides.conf, dropin-a to
// dropin-b) lists the unit as changed, and the switch gives the unit its new setting.
func TestAccNodeSwitchNixOSDropInChange(t *testing.T) {
	acctest.Lab(t)
	dropA := labtest.BuildClosure(t, "dropin-a")
	dropB := labtest.BuildClosure(t, "dropin-b")
	node := labtest.NewInstance(t, "acc-dropin")
	booted := strings.TrimSpace(nodeExec(t, node, "readlink -e /run/booted-system"))
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: activationConfig(node, dropA, "switch"), ConfigStateChecks: []statecheck.StateCheck{stateToplevel(dropA)}},
			{
				Config: activationConfig(node, dropB, "switch"),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
					// fedi-plain changed in its drop-in only; no other unit changed (the
					// stand-in's units name their tools by store path, not their toplevel).
					changesList("units_changed", "fedi-plain.service"),
					stateToplevel(dropB),
				},
				Check: resource.ComposeTestCheckFunc(nodeAgrees(t, node, dropB, booted), func(*terraform.State) error {
					if got := nodeExec(t, node, "systemctl show -p Environment --value fedi-plain.service"); !strings.Contains(got, "FEDI_MODE=b") {
						return fmt.Errorf("fedi-plain.service's environment is %q, want its new drop-in's FEDI_MODE=b", got)
					}
					return nil
				}),
			},
		},
	})
}

// The one-shot boot entry on a boot loader that counts tries (boot.loader.systemd-boot.
// bootCounting, turned on for the node): counting-a, then counting-b with activation
// reboot. The entries' file names carry their counters; bootctl is given the entries' IDs, so the node boots
// counting-b once (the boot loader counted that try in its entry's name), its verdict is
// ok, and counting-b becomes the default with nothing left pinned.
func TestAccNodeSwitchNixOSBootCountingOneShot(t *testing.T) {
	acctest.Lab(t)
	countA := labtest.BuildClosure(t, "counting-a")
	countB := labtest.BuildClosure(t, "counting-b")
	node := labtest.NewInstance(t, "acc-counting")
	labtest.EnableBootCounting(t, node, 3)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: activationConfig(node, countA, "reboot"), Check: nodeAgrees(t, node, countA, countA)},
			{
				Config: activationConfig(node, countB, "reboot"),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
					verdictBool("rebooted", true),
					verdictString("activation", knownvalue.StringRegexp(regexp.MustCompile(`^rebooted \(asked to\); boot took \d.*; booted once from a one-shot boot entry; the new system is the default entry now that the verdict is ok$`))),
					stateToplevel(countB),
				},
				Check: resource.ComposeTestCheckFunc(nodeAgrees(t, node, countB, countB), func(*terraform.State) error {
					// The stand-in's entries are named by generation (systemd-boot-builder.py):
					// counting-b's is the one whose options boot it. It was made with three
					// tries (+3); the boot that came up blessed it, which drops the counter
					// (systemd-bless-boot), so it is counted no more.
					entry := strings.TrimSpace(nodeExec(t, node, "grep -l 'init="+countB+"/init' /boot/loader/entries/*.conf; true"))
					if !regexp.MustCompile(`^/boot/loader/entries/nixos-generation-\d+\.conf$`).MatchString(entry) {
						return fmt.Errorf("counting-b's entry is not blessed after a boot that came up (want nixos-generation-N.conf): %q", entry)
					}
					if left := strings.TrimSpace(nodeExec(t, node, "cat /var/lib/fediversity-standin-efi/LoaderEntryOneShot /var/lib/fediversity-standin-efi/LoaderEntryDefault 2>/dev/null; true")); left != "" {
						return fmt.Errorf("the boot loader keeps a one-shot or pinned entry after an ok verdict: %q", left)
					}
					return nil
				}),
			},
		},
	})
}
