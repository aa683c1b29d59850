package test

// Acceptance test of modules/tf-incus from the nodes' source on the lab's real incusd:
// no image is prepared by hand. The roster's `build` is the lab's bootable-switchable
// stand-in system (lab/closures/default.nix: the host's systemd, busybox and nix in the
// store, a stage-2 init, a switch-to-configuration); the module builds each node's
// system, makes an Incus image of it (fediversity_incus_image), creates the node's
// container from it (fediversity_incus_node), deploys (fediversity_node_switch) and
// judges it (fediversity_verdict), all in one apply.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// incusBooted is what a test saw of a node's container booted from its own image.
type incusBooted struct {
	pid1Start string // PID 1's start time (field 22 of /proc/1/stat): the same while the container runs
	current   string // /run/current-system
	booted    string // /run/booted-system
	init      string // where /sbin/init points: the container's boot entry
}

// observeBooted reads a container booted from a system image: PID 1 must be the store's
// systemd, running; /run/fedi-hello shows that the system's one unit ran.
func observeBooted(instance string) (incusBooted, error) {
	const script = `PATH=/run/current-system/sw/bin
set -e
[ "$(cat /proc/1/comm)" = systemd ] || { echo "PID 1 is $(cat /proc/1/comm)"; exit 1; }
exe=$(readlink /proc/1/exe)
case $exe in /nix/store/*-fedi-systemd/lib/systemd/systemd) ;; *) echo "PID 1 runs $exe, not the store's systemd"; exit 1 ;; esac
state=$(systemctl is-system-running || true)
[ "$state" = running ] || { echo "systemd is $state"; exit 1; }
[ -e /run/fedi-hello ] || { echo "fedi-hello.service did not run"; exit 1; }
echo "$(cut -d' ' -f22 /proc/1/stat) $(readlink /run/current-system) $(readlink /run/booted-system) $(readlink /sbin/init)"`
	out, err := labtest.IncusErr("exec", instance, "--", "/bin/sh", "-c", script)
	if err != nil {
		return incusBooted{}, fmt.Errorf("%s: %v: %s", instance, err, out)
	}
	f := strings.Fields(out)
	if len(f) != 4 {
		return incusBooted{}, fmt.Errorf("%s: read %q", instance, out)
	}
	return incusBooted{pid1Start: f[0], current: f[1], booted: f[2], init: f[3]}, nil
}

// incusConfig is one configuration key of a lab container.
func incusConfig(instance, key string) string {
	out, _ := labtest.IncusErr("config", "get", instance, key)
	return strings.TrimSpace(out)
}

// One apply builds each node's system, imports an image of it, creates the node's
// container from that image, deploys and judges it: each container's PID 1 is the
// store's systemd of its own system. An unchanged source plans nothing. A changed source
// of one node makes a new image of it and switches its running container (not a new
// one) to the new system; the other node is untouched. Destroying the module deletes
// the containers and the images it made.
func TestAccModuleTFIncusFromSource(t *testing.T) {
	acctest.Lab(t)
	var names []string
	for _, s := range []string{"a", "b"} {
		n := labtest.Prefix() + "-t-mts-" + s
		names = append(names, n)
		// Before as well as after: a run killed before its cleanup leaves the node's
		// container and images, and the destroy step below would take those images for
		// ones this run's module failed to delete (a CI run after a killed one did).
		removeContainerAndDataVolume(n)
		removeImagesOf(n)
		t.Cleanup(func() { removeContainerAndDataVolume(n); removeImagesOf(n) })
	}
	a, b := names[0], names[1]
	g := newGroupSample(t, "tf-incus", names)

	// The nodes' Nix source, lab/closures, in a directory of the operator's own.
	src := filepath.Join(t.TempDir(), "closures")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"default.nix", "switch-to-configuration.sh", "switch-to-configuration-bootable.sh"} {
		body, err := os.ReadFile(filepath.Join(labtest.RepoRoot(t), "lab", "closures", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A seed of this run: systems no earlier run imported or booted.
	seed := fmt.Sprintf("mtis-%d", time.Now().UnixNano())
	config := func(seeds map[string]string) string {
		roster := map[string]any{}
		for _, n := range names {
			roster[n] = map[string]any{"build": map[string]any{"file": src, "attribute": labtest.ClosureBootableSwitchable, "args": map[string]string{"seed": seeds[n]}}}
		}
		return acctest.Config(`provider "fediversity" {}` + fmt.Sprintf(`
module "group" {
  source          = %q
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  timings         = { node_wait = "90s", settle = "1s", watch = "3s", sample_interval = "1s", verdict_watch = "2s" }
}

output "summary" {
  value = module.group.summary
}

output "node_plans" {
  value = module.group.node_plans
}
`, modulePath(t, "tf-incus"), g.file, hcl(g.baked()), hcl(roster)))
	}
	first := config(map[string]string{a: seed, b: seed})
	changed := config(map[string]string{a: seed, b: seed + "-v2"})

	const (
		img       = "module.group.fediversity_incus_image.node"
		container = "module.group.fediversity_incus_node.node"
		sw        = "module.group.module.wave_1.fediversity_node_switch.node"
		verdict   = "module.group.module.wave_1.fediversity_verdict.node"
	)
	images := map[string]map[string]any{} // node -> its image's state after the first apply
	seen := map[string]incusBooted{}
	imageOf := func(n string) stateAttrs { return stateAttrs(fmt.Sprintf("%s[%q]", img, n)) }
	every := func(action plancheck.ResourceActionType) map[string]plancheck.ResourceActionType {
		return map[string]plancheck.ResourceActionType{a: action, b: action}
	}
	var start time.Time
	resource.Test(t, resource.TestCase{
		PreCheck: func() { acctest.PreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				PreConfig: func() { g.submit(names, nil); start = time.Now() },
				Config:    first,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: concatChecks(
					actions(img, names, every(plancheck.ResourceActionCreate)),
					actions(container, names, every(plancheck.ResourceActionCreate)),
					actions(sw, names, every(plancheck.ResourceActionCreate)),
					actions(verdict, names, every(plancheck.ResourceActionCreate))),
					// Then the same sources again: nothing to do.
					PostApplyPostRefresh: nothingToDo},
				ConfigStateChecks: []statecheck.StateCheck{
					labCheck(func() error {
						t.Logf("figure: plan and apply of 2 nodes from their source (evaluate, build, image, import, create, deploy, judge): %s", time.Since(start).Round(100*time.Millisecond))
						return nil
					}),
					statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)),
					imageOf(a).check(func(attrs map[string]any) error { images[a] = attrs; return nil }),
					imageOf(b).check(func(attrs map[string]any) error { images[b] = attrs; return nil }),
					nodePlansCheck(func(plans map[string]string) error {
						for _, n := range names {
							im := images[n]
							system, fp, alias := fmt.Sprint(im["system"]), fmt.Sprint(im["fingerprint"]), fmt.Sprint(im["alias"])
							if !strings.HasPrefix(alias, "fediversity/"+n+"/") {
								return fmt.Errorf("%s: image alias %q", n, alias)
							}
							if got := incusConfig(n, "volatile.base_image"); got != fp {
								return fmt.Errorf("container %s was made from image %q, want its own system's image %s", n, got, fp)
							}
							if out, err := labtest.IncusErr("image", "alias", "list", "--format", "csv", alias); err != nil || !strings.Contains(out, fp[:12]) {
								return fmt.Errorf("alias %s on the daemon: %v: %s", alias, err, out)
							}
							booted, err := observeBooted(n)
							if err != nil {
								return err
							}
							if booted.booted != system || booted.current != system || booted.init != system+"/init" {
								return fmt.Errorf("%s booted %s, runs %s, boots %s next; want all the system of its image, %s", n, booted.booted, booted.current, booted.init, system)
							}
							carried, err := labtest.IncusErr("exec", n, "--", "/bin/sh", "-c", "cat /run/current-system/etc/fediversity/node-plan.json")
							if err != nil || carried != plans[n] {
								return fmt.Errorf("%s carries the node plan %q (%v), want the module's %q", n, carried, err, plans[n])
							}
							seen[n] = booted
						}
						if seen[a].current == seen[b].current {
							return fmt.Errorf("%s and %s run one system; want each its own (their node plans differ)", a, b)
						}
						return nil
					}),
				},
			},
			resource.TestStep{
				// b's source changes (another seed, so every store path of its system): a new
				// image of it, the container kept (the image only seeds it), its deploy and
				// verdict again; nothing of a.
				PreConfig: func() { start = time.Now() },
				Config:    changed,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: concatChecks(
					actions(img, names, map[string]plancheck.ResourceActionType{b: plancheck.ResourceActionReplace}),
					actions(container, names, map[string]plancheck.ResourceActionType{b: plancheck.ResourceActionUpdate}),
					actions(sw, names, map[string]plancheck.ResourceActionType{b: plancheck.ResourceActionUpdate}),
					actions(verdict, names, map[string]plancheck.ResourceActionType{b: plancheck.ResourceActionUpdate}))},
				ConfigStateChecks: []statecheck.StateCheck{
					labCheck(func() error {
						t.Logf("figure: plan and apply of one node's changed source: %s", time.Since(start).Round(100*time.Millisecond))
						return nil
					}),
					statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)),
					imageOf(b).check(func(attrs map[string]any) error {
						old, now := images[b], attrs
						if now["fingerprint"] == old["fingerprint"] || now["alias"] == old["alias"] || now["system"] == old["system"] {
							return fmt.Errorf("%s's image after its source changed: %v, before: %v; want a new system, alias and fingerprint", b, now, old)
						}
						if out, err := labtest.IncusErr("image", "info", fmt.Sprint(old["fingerprint"])); err == nil {
							return fmt.Errorf("%s's old image %s is still on the daemon:\n%s", b, old["fingerprint"], out)
						}
						// The running container was switched, not made again from the new image.
						if got := incusConfig(b, "volatile.base_image"); got != old["fingerprint"] {
							return fmt.Errorf("container %s is now from image %q; want the one it was made from, %s (kept, not replaced)", b, got, old["fingerprint"])
						}
						booted, err := observeBooted(b)
						if err != nil {
							return err
						}
						system := fmt.Sprint(now["system"])
						if booted.pid1Start != seen[b].pid1Start || booted.booted != seen[b].booted {
							return fmt.Errorf("%s's container started again (PID 1 started at %s, was %s; booted %s, was %s); want it switched in place",
								b, booted.pid1Start, seen[b].pid1Start, booted.booted, seen[b].booted)
						}
						if booted.current != system || booted.init != system+"/init" {
							return fmt.Errorf("%s runs %s and boots %s next; want the new system %s", b, booted.current, booted.init, system)
						}
						untouched, err := observeBooted(a)
						if err != nil {
							return err
						}
						if untouched != seen[a] {
							return fmt.Errorf("%s changed (%+v, was %+v); its source did not", a, untouched, seen[a])
						}
						return nil
					}),
				},
			},
			resource.TestStep{
				// The module goes: so do the containers and the images it made.
				Config: emptyRoot(),
				ConfigStateChecks: []statecheck.StateCheck{labCheck(func() error {
					for _, n := range names {
						if _, err := labtest.IncusErr("info", n); err == nil {
							return fmt.Errorf("container %s should be gone with the module", n)
						}
						if left := imagesOf(n); len(left) > 0 {
							return fmt.Errorf("images of %s are left on the daemon: %v", n, left)
						}
					}
					return nil
				})},
			},
		),
	})
}

// imagesOf lists the aliases of the images fediversity_incus_image made for node.
func imagesOf(node string) []string {
	out, _ := labtest.IncusErr("image", "alias", "list", "--format", "csv", "fediversity/"+node+"/")
	var aliases []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if name, _, _ := strings.Cut(line, ","); strings.HasPrefix(name, "fediversity/"+node+"/") {
			aliases = append(aliases, name)
		}
	}
	return aliases
}

// removeImagesOf deletes the images a killed run left for node.
func removeImagesOf(node string) {
	for _, alias := range imagesOf(node) {
		_, _ = labtest.IncusErr("image", "delete", alias)
	}
}
