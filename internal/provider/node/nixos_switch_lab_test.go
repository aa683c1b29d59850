package node_test

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tfjson "github.com/hashicorp/terraform-json"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// bootDefaultScript prints what the node's boot loader boots by default (the stand-in
// boot loader's entry that `switch-to-configuration boot` writes), the system profile,
// /run/current-system and the toplevel of the node's verdict record, one a line.
const bootDefaultScript = `cat /nix/var/nix/fediversity-boot-entry 2>/dev/null || echo; ` +
	`readlink -e /nix/var/nix/profiles/system || echo; readlink -e /run/current-system || echo; ` +
	`sed -n 's/.*"toplevel": *"\([^"]*\)".*/\1/p' ` + records.VerdictRecordFile + ` 2>/dev/null | head -n 1; echo`

// nodeBootState is one look at a node: its boot default, profile, running system and
// the toplevel its verdict record names.
type nodeBootState struct {
	at                                    time.Time
	bootDefault, profile, running, record string
}

func readNodeBootState(t *testing.T, n labtest.Node) (nodeBootState, error) {
	return readNodeBootStateWith(n, bootDefaultScript)
}

// readNodeBootStateWith reads a node's boot state with script (bootDefaultScript or
// loaderStateScript), which prints the four lines nodeBootState holds.
func readNodeBootStateWith(n labtest.Node, script string) (nodeBootState, error) {
	out, err := labtest.IncusErr("exec", n.Instance, "--", "/bin/sh", "-c", script)
	if err != nil {
		return nodeBootState{}, err
	}
	l := strings.Split(out, "\n")
	for len(l) < 4 {
		l = append(l, "")
	}
	return nodeBootState{at: time.Now(), bootDefault: strings.TrimSpace(l[0]), profile: strings.TrimSpace(l[1]),
		running: strings.TrimSpace(l[2]), record: strings.TrimSpace(l[3])}, nil
}

// bootWatch samples a node's boot state every 200 ms while an apply runs.
type bootWatch struct {
	mu      sync.Mutex
	samples []nodeBootState
	stop    chan struct{}
	done    chan struct{}
}

func watchBoot(t *testing.T, n labtest.Node) *bootWatch {
	return watchBootWith(n, bootDefaultScript)
}

// watchBootWith samples with script (see readNodeBootStateWith).
func watchBootWith(n labtest.Node, script string) *bootWatch {
	w := &bootWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			if st, err := readNodeBootStateWith(n, script); err == nil {
				w.mu.Lock()
				w.samples = append(w.samples, st)
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *bootWatch) end() []nodeBootState {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.samples
}

// detachedRuns reads the node's journal since `since` for the detached
// switch-to-configuration units this provider started: their action, in start order,
// and when each started.
func detachedRuns(t *testing.T, n labtest.Node, since time.Time) (actions []string, started []time.Time) {
	t.Helper()
	out := nodeExec(t, n, fmt.Sprintf(`journalctl --no-pager -o short-unix --since=@%d -u 'fediversity-switch-*' | grep 'Started fediversity-switch-' || true`, since.Unix()-1))
	re := regexp.MustCompile(`^([0-9.]+) .*Started fediversity-switch-[0-9a-f]+\.service - fediversity switch-to-configuration (\S+?)\.?$`)
	for _, l := range strings.Split(out, "\n") {
		m := re.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		secs, _ := strconv.ParseFloat(m[1], 64)
		at := time.Unix(0, int64(secs*1e9))
		if at.Before(since) {
			continue
		}
		actions = append(actions, m[2])
		started = append(started, at)
	}
	return actions, started
}

// The deploy's order on the NixOS-shaped node: the new system is activated with
// `switch-to-configuration test`, the verdict is recorded, and only then do the system
// profile and the boot loader's default move (a detached `boot`). Observed from outside
// during the apply: no sample sees the new system as the boot default before the
// verdict record names it; the node's journal shows the detached units' actions (test,
// then boot) and that `boot` started after the record was written. Afterwards the
// node's running system, its boot default, its profile and the state agree.
func TestAccNodeSwitchNixOSBootOrder(t *testing.T) {
	acctest.Lab(t)
	node := labtest.NewInstance(t, "acc-nixos-order")
	var watch *bootWatch
	var since time.Time
	var first string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: nixosConfig(node, `{ seed = "acc-nixos-order-1" }`, ""),
				Check: func(s *terraform.State) error {
					first = s.RootModule().Resources[addr].Primary.Attributes["toplevel"]
					return nodeAgreesWithState(t, node, s, first)
				},
			},
			{
				PreConfig: func() {
					since = time.Now()
					watch = watchBoot(t, node)
				},
				Config: nixosConfig(node, `{ seed = "acc-nixos-order-2" }`, ""),
				Check: func(s *terraform.State) error {
					samples := watch.end()
					second := s.RootModule().Resources[addr].Primary.Attributes["toplevel"]
					if second == first || second == "" {
						return fmt.Errorf("the second deploy's toplevel %q is not a new system", second)
					}
					recordedAt := time.Time{}
					for _, st := range samples {
						if st.record == second && recordedAt.IsZero() {
							recordedAt = st.at
						}
						if st.record != second && (st.bootDefault == second || st.profile == second) {
							return fmt.Errorf("at %s the boot default was %s and the profile %s before the verdict record named the new system (it named %q)",
								st.at.Format(time.RFC3339Nano), st.bootDefault, st.profile, st.record)
						}
					}
					t.Logf("%d samples during the apply; the verdict record named the new system from %s", len(samples), recordedAt.Format(time.RFC3339Nano))
					actions, started := detachedRuns(t, node, since)
					if strings.Join(actions, " ") != "test boot" {
						return fmt.Errorf("the detached switch-to-configuration runs were %v, want [test boot]", actions)
					}
					mtime := nodeExec(t, node, "stat -c %.9Y "+records.VerdictRecordFile)
					recSecs, err := strconv.ParseFloat(strings.TrimSpace(mtime), 64)
					if err != nil {
						return fmt.Errorf("verdict record mtime %q: %v", mtime, err)
					}
					if rec := time.Unix(0, int64(recSecs*1e9)); started[1].Before(rec) {
						return fmt.Errorf("the boot unit started at %s, before the verdict record was written at %s", started[1].Format(time.RFC3339Nano), rec.Format(time.RFC3339Nano))
					}
					return nodeAgreesWithState(t, node, s, second)
				},
			},
		},
	})
}

// nixosConfig deploys testdata/node.nix built with args (whose unit names its tools by
// absolute path, so it runs under a NixOS unit's PATH), over SSH, with the short
// timings and lockWait ("" for the default).
func nixosConfig(node labtest.Node, args, lockWait string, extra ...string) string {
	timings := accTimings
	if lockWait != "" {
		timings = strings.Replace(accTimings, "timings {", fmt.Sprintf("timings {\n    lock_wait       = %q", lockWait), 1)
	}
	return acctest.Config(acctest.LabProvider() + fmt.Sprintf(`
resource "fediversity_node_switch" "n" {
  node = %q
  build {
    file = %q
    args = %s
  }
%s
%s
%s
}
`, node.Name, testdataFile("node.nix"), args, sshBlock(node), timings, strings.Join(extra, "\n")))
}

// nodeAgreesWithState checks that the node runs, boots and has as its profile the
// toplevel the state records.
func nodeAgreesWithState(t *testing.T, node labtest.Node, s *terraform.State, want string) error {
	st, err := readNodeBootState(t, node)
	if err != nil {
		return err
	}
	recorded := s.RootModule().Resources[addr].Primary.Attributes["toplevel"]
	got := []string{st.running, st.bootDefault, st.profile, recorded}
	sort.Strings(got)
	if got[0] != want || got[3] != want {
		return fmt.Errorf("node runs %s, boots %s, profile %s; state records %s; want all %s", st.running, st.bootDefault, st.profile, recorded, want)
	}
	return nil
}

// holdSwitchLock makes a unit named unit hold switch-to-configuration's lock on the
// node for secs seconds, as nixos-upgrade.service or comin does while it switches
// (flock, the lock switch-to-configuration-ng takes; Debian's flock by absolute path:
// lab machinery, not the product).
func holdSwitchLock(t *testing.T, n labtest.Node, unit string, secs int) {
	t.Helper()
	nodeExec(t, n, fmt.Sprintf(`mkdir -p /run/nixos && systemd-run --unit=%s --collect --quiet /usr/bin/flock %s /bin/sleep %d && `+
		`i=0; while ! grep -q FLOCK /proc/locks || [ "$(systemctl is-active %s)" != active ]; do i=$((i+1)); [ $i -lt 50 ] || exit 1; sleep 0.1; done`,
		unit, deploybody.SwitchLockFile, secs, unit))
}

// Exit 11 on the NixOS-shaped node: while another switch holds
// switch-to-configuration's lock, the deploy changes nothing and reverts nothing,
// waits for it within lock_wait and then switches (the node's journal shows the
// turned-away test, the test after the wait, then the boot); past lock_wait it fails
// naming the unit that holds the lock, with node, boot default and state unchanged.
func TestAccNodeSwitchNixOSOtherSwitchHoldsLock(t *testing.T) {
	acctest.Lab(t)
	node := labtest.NewInstance(t, "acc-nixos-lock")
	var since time.Time
	var second string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: nixosConfig(node, `{ seed = "acc-nixos-lock-1" }`, "")},
			{
				PreConfig: func() {
					since = time.Now()
					holdSwitchLock(t, node, "nixos-upgrade", 45)
				},
				Config: nixosConfig(node, `{ seed = "acc-nixos-lock-2" }`, ""),
				Check: func(s *terraform.State) error {
					second = s.RootModule().Resources[addr].Primary.Attributes["toplevel"]
					actions, _ := detachedRuns(t, node, since)
					if len(actions) < 3 || actions[0] != "test" || actions[len(actions)-1] != "boot" || actions[len(actions)-2] != "test" {
						return fmt.Errorf("detached runs %v: want a test turned away by the lock, a test after the wait, then the boot", actions)
					}
					if out := nodeExec(t, node, "cat /run/fediversity/fediversity-switch-*.err 2>/dev/null | grep -c 'Could not acquire lock' || true"); strings.TrimSpace(out) == "0" {
						return fmt.Errorf("no switch on the node was turned away by the lock")
					}
					return nodeAgreesWithState(t, node, s, second)
				},
			},
			{
				PreConfig:   func() { holdSwitchLock(t, node, "nixos-upgrade-long", 300) },
				Config:      nixosConfig(node, `{ seed = "acc-nixos-lock-3" }`, "5s"),
				ExpectError: regexp.MustCompile(`(?s)nixos-upgrade-long\.service.*PID\s+\d+.*holds\s+it.*nothing\s+was\s+changed`),
			},
			{
				PreConfig: func() {
					st, err := readNodeBootState(t, node)
					if err != nil || st.running != second || st.bootDefault != second || st.profile != second {
						t.Errorf("after the deploy the lock turned away: %+v (%v), want all %s", st, err, second)
					}
					nodeExec(t, node, "systemctl stop nixos-upgrade-long.service")
				},
				Config: nixosConfig(node, `{ seed = "acc-nixos-lock-3" }`, ""),
				Check: func(s *terraform.State) error {
					return nodeAgreesWithState(t, node, s, s.RootModule().Resources[addr].Primary.Attributes["toplevel"])
				},
			},
		},
	})
}

// Exit 2 on the NixOS-shaped node: the activation script fails while the switch goes
// on (/run/current-system is the new system). A strict deploy fails naming the
// activation's error lines, and writes the boot entry as for a failed unit (the node
// runs the new system); a lenient one passes with it as a reason, and node and state
// agree.
func TestAccNodeSwitchNixOSActivationFails(t *testing.T) {
	acctest.Lab(t)
	node := labtest.NewInstance(t, "acc-nixos-exit2")
	var failedTop string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: nixosConfig(node, `{ seed = "acc-nixos-exit2-1" }`, "")},
			{
				Config:      nixosConfig(node, `{ seed = "acc-nixos-exit2-2", activateFails = "1" }`, ""),
				ExpectError: regexp.MustCompile(`(?s)activation\s+script\s+failed.*Activation\s+script\s+snippet\s+'fediSecrets'\s+failed\s+\(1\).*fedi-age\.key`),
			},
			{
				PreConfig: func() {
					st, err := readNodeBootState(t, node)
					if err != nil || st.running == "" || st.running != st.bootDefault || st.running != st.profile || st.record != st.running {
						t.Errorf("after the failed activation: %+v (%v): want the node running, booting and recording the new system", st, err)
					}
					failedTop = st.running
				},
				Config: nixosConfig(node, `{ seed = "acc-nixos-exit2-2", activateFails = "1" }`, "", "  strict = false"),
				Check: func(s *terraform.State) error {
					reasons := s.RootModule().Resources[addr].Primary.Attributes
					found := false
					for k, v := range reasons {
						if strings.HasPrefix(k, "verdict.reasons.") && strings.Contains(v, "fediSecrets") {
							found = true
						}
					}
					if !found || reasons["verdict.ok"] != "true" || reasons["verdict.switch_result"] != "activation-failed" {
						return fmt.Errorf("lenient verdict: ok=%s switch_result=%s, reasons naming fediSecrets: %v", reasons["verdict.ok"], reasons["verdict.switch_result"], found)
					}
					return nodeAgreesWithState(t, node, s, failedTop)
				},
			},
		},
	})
}

// Exit 100 on the NixOS-shaped node: the new system's init-interface-version differs,
// so nothing is activated; with activation = "switch" the apply fails saying a reboot is
// needed, and the node runs, boots and has as profile what the state records.
func TestAccNodeSwitchNixOSInitInterfaceChange(t *testing.T) {
	acctest.Lab(t)
	node := labtest.NewInstance(t, "acc-nixos-exit100")
	var first string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: nixosConfig(node, `{ seed = "acc-nixos-exit100-1" }`, ""),
				Check: func(s *terraform.State) error {
					first = s.RootModule().Resources[addr].Primary.Attributes["toplevel"]
					return nil
				},
			},
			{
				Config:      nixosConfig(node, `{ seed = "acc-nixos-exit100-2", initInterface = "-2" }`, ""),
				ExpectError: regexp.MustCompile(`(?s)needs\s+a\s+reboot:\s+init-interface-version\s+changed.*boot\s+entry\s+is\s+untouched.*reboot-if-needed`),
			},
			{
				// Nothing changed on the node: it still runs, boots and has as profile the
				// first system, which the state records once the first config is applied.
				PreConfig: func() {
					st, err := readNodeBootState(t, node)
					if err != nil || st.running != first || st.bootDefault != first || st.profile != first {
						t.Errorf("after exit 100: %+v (%v), want all %s", st, err, first)
					}
				},
				Config: nixosConfig(node, `{ seed = "acc-nixos-exit100-1" }`, ""),
				Check:  func(s *terraform.State) error { return nodeAgreesWithState(t, node, s, first) },
			},
		},
	})
}

// A switch that never activated, on the NixOS-shaped node: the new system's
// switch-to-configuration stops before it changes anything (/run/current-system stays
// the previous system), once exiting 0 as if all went well and once exiting 1. Each
// apply fails saying the switch never activated, naming what the node runs, the exit
// and the switch's own line, and that the boot entry is untouched; the node's journal
// shows the `test` and no `boot` (the stand-in's `switch` would have made the new
// system the boot default at once, as GRUB does). After each, the node runs, boots and
// has as its profile and verdict record the previous system, and the state still
// records it.
func TestAccNodeSwitchNixOSNeverActivated(t *testing.T) {
	acctest.Lab(t)
	node := labtest.NewInstance(t, "acc-nixos-never")
	var first string
	var since time.Time
	mark := func() { since = time.Now() }
	untouched := func(what string) func() {
		return func() {
			st, err := readNodeBootState(t, node)
			if err != nil || st.running != first || st.bootDefault != first || st.profile != first || st.record != first {
				t.Errorf("after %s: node runs %q, boots %q, profile %q, verdict record %q (%v); want all the previous system %s",
					what, st.running, st.bootDefault, st.profile, st.record, err, first)
			}
			if actions, _ := detachedRuns(t, node, since); strings.Join(actions, " ") != "test" {
				t.Errorf("after %s the detached switch-to-configuration runs were %v, want [test] alone", what, actions)
			}
		}
	}
	neverActivated := func(code int) *regexp.Regexp {
		return regexp.MustCompile(fmt.Sprintf(`(?s)the\s+switch\s+never\s+activated:\s+node\s+runs\s+/nix/store/\S+-nixos-system-fedi-acc,\s+not\s+/nix/store/\S+-nixos-system-fedi-acc\s+`+
			`\(switch-to-configuration\s+test\s+exited\s+%d:\s+fedi-acc:\s+stopping\s+before\s+the\s+activation.*\);\s+its\s+boot\s+entry\s+is\s+untouched`, code))
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: nixosConfig(node, `{ seed = "acc-nixos-never-1" }`, ""),
				Check: func(s *terraform.State) error {
					first = s.RootModule().Resources[addr].Primary.Attributes["toplevel"]
					return nodeAgreesWithState(t, node, s, first)
				},
			},
			{
				PreConfig:   mark,
				Config:      nixosConfig(node, `{ seed = "acc-nixos-never-2", neverActivates = "0" }`, ""),
				ExpectError: neverActivated(0),
			},
			{
				PreConfig:   func() { untouched("a switch that exited 0")(); mark() },
				Config:      nixosConfig(node, `{ seed = "acc-nixos-never-3", neverActivates = "1" }`, ""),
				ExpectError: neverActivated(1),
			},
			{
				// The state kept the previous system through both failures: the plan
				// starts from it.
				PreConfig: untouched("a switch that exited 1"),
				Config:    nixosConfig(node, `{ seed = "acc-nixos-never-1" }`, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{planCheckFunc(func(p *tfjson.Plan) error {
					for _, rc := range p.ResourceChanges {
						if rc.Address != addr {
							continue
						}
						before, _ := rc.Change.Before.(map[string]any)
						if got, _ := before["toplevel"].(string); got != first {
							return fmt.Errorf("after the failed applies the state records %q, want the previous system %s", got, first)
						}
						return nil
					}
					return fmt.Errorf("%s is not in the plan", addr)
				})}},
				Check: func(s *terraform.State) error { return nodeAgreesWithState(t, node, s, first) },
			},
		},
	})
}

// planCheckFunc is a plan check written as a function.
type planCheckFunc func(*tfjson.Plan) error

func (f planCheckFunc) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	resp.Error = f(req.Plan)
}

// loaderStateScript is bootDefaultScript with the boot default read from the stand-in
// firmware's boot loader (labtest.BootDefault: systemd-boot's default entry, or GRUB's
// default), not from a record the stand-in installer keeps.
const loaderStateScript = `/usr/lib/fediversity-standin/firmware default || echo; ` +
	`readlink -e /nix/var/nix/profiles/system || echo; readlink -e /run/current-system || echo; ` +
	`sed -n 's/.*"toplevel": *"\([^"]*\)".*/\1/p' ` + records.VerdictRecordFile + ` 2>/dev/null | head -n 1; echo`

// The deploy's order on each boot loader the lab's stand-in firmware has, with the lab's
// stand-in systems (lab/closures good, then good-v2, whose switch-to-configuration keeps
// switch-to-configuration-ng's contract): on GRUB a `switch` would make its argument
// the default at once, on systemd-boot the default follows the system profile's
// generations. On both, sampled every 200 ms during the second apply, neither the boot
// loader's default nor the system profile names the new system before the verdict
// record does; the journal shows `test`, then `boot`; afterwards the boot loader's
// default, the profile, the running system and the state agree.
func TestAccNodeSwitchNixOSBootOrderOnEachLoader(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	v2 := labtest.BuildClosure(t, labtest.ClosureGoodV2)
	for _, loader := range []string{labtest.BootLoaderSystemdBoot, labtest.BootLoaderGRUB} {
		t.Run(loader, func(t *testing.T) {
			node := labtest.NewInstance(t, "acc-order-"+strings.ReplaceAll(loader, "-", ""))
			labtest.SetBootLoader(t, node, loader)
			agree := func(want string) error {
				st, err := readNodeBootStateWith(node, loaderStateScript)
				if err != nil {
					return err
				}
				if st.bootDefault != want || st.profile != want || st.running != want || st.record != want {
					return fmt.Errorf("%s: boot loader default %s, profile %s, running %s, verdict record %s; want all %s",
						loader, st.bootDefault, st.profile, st.running, st.record, want)
				}
				return nil
			}
			var (
				watch *bootWatch
				since time.Time
			)
			resource.Test(t, resource.TestCase{
				PreCheck:                 func() { acctest.PreCheck(t) },
				ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
				Steps: []resource.TestStep{
					{
						Config: activationConfig(node, good, "switch"),
						Check:  func(*terraform.State) error { return agree(good) },
					},
					{
						PreConfig: func() {
							since = time.Now()
							watch = watchBootWith(node, loaderStateScript)
						},
						Config: activationConfig(node, v2, "switch"),
						Check: func(s *terraform.State) error {
							samples := watch.end()
							if len(samples) < 3 {
								return fmt.Errorf("%s: only %d samples during the apply", loader, len(samples))
							}
							sawRecord := false
							for _, st := range samples {
								sawRecord = sawRecord || st.record == v2
								if st.record != v2 && (st.bootDefault == v2 || st.profile == v2) {
									return fmt.Errorf("%s: at %s the boot loader's default was %s and the profile %s before the verdict record named the new system (it named %q)",
										loader, st.at.Format(time.RFC3339Nano), st.bootDefault, st.profile, st.record)
								}
							}
							t.Logf("%s: %d samples during the apply; the verdict record named the new system during it: %v", loader, len(samples), sawRecord)
							if actions, _ := detachedRuns(t, node, since); strings.Join(actions, " ") != "test boot" {
								return fmt.Errorf("%s: the detached switch-to-configuration runs were %v, want [test boot]", loader, actions)
							}
							if got := s.RootModule().Resources[addr].Primary.Attributes["toplevel"]; got != v2 {
								return fmt.Errorf("%s: the state records %s, want %s", loader, got, v2)
							}
							return agree(v2)
						},
					},
				},
			})
		})
	}
}

// Exit 100 under reboot-if-needed, with the lab's stand-in systems (lab/closures good,
// then good-init-v3, whose init-interface-version differs and whose kernel does not, so
// the reboot rule alone would switch): switch-to-configuration refuses to activate it
// (exit 100), the deploy reboots the node into it instead, and judges the booted system.
// The verdict says it rebooted because init-interface-version changed; afterwards the
// node runs and booted the new system, its boot loader boots it next, its profile names
// it, and the state records it.
func TestAccNodeSwitchNixOSInitInterfaceChangeRebootsIfNeeded(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	initV3 := labtest.BuildClosure(t, labtest.ClosureGoodInitV3)
	node := labtest.NewInstance(t, "acc-exit100-reboot")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: activationConfig(node, good, "reboot"), Check: nodeAgrees(t, node, good, good)},
			{
				Config: activationConfig(node, initV3, "reboot-if-needed"),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
					verdictBool("rebooted", true),
					verdictString("activation", knownvalue.StringRegexp(regexp.MustCompile(`^rebooted \(init-interface-version changed \(switch-to-configuration exit 100\)\)`))),
					stateToplevel(initV3),
				},
				Check: nodeAgrees(t, node, initV3, initV3),
			},
		},
	})
}
