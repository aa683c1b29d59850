package test

// Acceptance test of modules/tf-incus with the operator variant (method
// tf-incus-operator) and a tenant, on the lab's real incusd and real SPIRE server: one
// apply makes the tenant's project, makes both nodes' containers in it, registers each
// node and deploys a system whose SPIRE agent is its own (the agent in the system's
// closure, as a NixOS module puts it there: nothing is pushed onto a node by hand), and
// which reaches the server through the tenant's profile (a proxy device given in
// tenant.devices). Each agent attests and holds its own X.509 SVID; turning the group
// off deletes the entries, the containers and the project. A tenant device under the
// name of the profile's own root disk is refused at plan. Named TestAccSpire… so that
// CI runs it in the suite that has a spire node.

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

func TestAccSpireModuleTFIncusOperatorTenant(t *testing.T) {
	acctest.Lab(t)
	sn := labtest.Spire(t)
	agent := labtest.SpireAgentBinary(t)
	system := labtest.BuildSpireChainStore(t) // built once here; the module builds it again from the file (a no-op)
	t.Setenv("SSH_PRIVATE_KEY_FILE", labtest.KeyFile())

	tenant := labtest.Prefix() + "-t-spire"
	group := "ot" + strings.ReplaceAll(labtest.Prefix(), "-", "")
	names := []string{labtest.Prefix() + "-t-mots-a", labtest.Prefix() + "-t-mots-b"}
	removeTenant := func() {
		for _, n := range names {
			_, _ = labtest.IncusErr("delete", "--force", "--project", tenant, n)
			_, _ = labtest.IncusErr("storage", "volume", "delete", "--project", tenant, "lab", n+"-data")
		}
		_, _ = labtest.IncusErr("project", "delete", tenant)
	}
	removeTenant()
	t.Cleanup(removeTenant)
	deleteEntriesAround(t, sn, group, names)

	// The data volumes go with their containers, so that the project can go with the
	// group (a kept one keeps it: TestAccModuleTFIncusTenant).
	roster := map[string]any{}
	for _, n := range names {
		roster[n] = map[string]any{"data_volume": map[string]any{"delete_on_destroy": true}}
	}
	// The agent's configuration names the server at the node's own 127.0.0.1:8081; the
	// tenant's profile gives every container of the tenant that address, a proxy device
	// whose host side connects to the spire node (docs/incus-nodes.md#incus-tenant).
	serverProxy := map[string]any{"spire": map[string]string{
		"type": "proxy", "listen": "tcp:127.0.0.1:8081", "connect": fmt.Sprintf("tcp:127.0.0.1:%d", sn.ServerPort), "bind": "instance",
	}}
	g := newGroupSample(t, "tf-incus-operator", names)
	config := acctest.Config(`provider "fediversity" {}` + fmt.Sprintf(`
module "group" {
  source          = %q
  method          = "tf-incus-operator"
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  image           = %q
  build           = { file = %q, attribute = %q, args = { spireAgent = %q } }
  secret_chain    = ["secret-chain-fetch.service", "secret-chain-install.service"]
  timings         = { node_wait = "90s", settle = "1s", watch = "3s", sample_interval = "1s", verdict_watch = "2s", chain_wait = "120s", no_progress = "60s" }
  tenant = {
    name             = %q
    limits           = { instances = "4" }
    devices          = %s
  }
  spire = {
    group      = %q
    spire_node = { host = %q, port = %d, host_key = %q }
  }
}

output "summary" {
  value = module.group.summary
}
`, modulePath(t, "tf-incus"), g.file, hcl(g.baked()), hcl(roster), labtest.Image,
		labtest.RepoRoot(t)+"/lab/closures/default.nix", labtest.ClosureSpireChainStore, agent,
		tenant, hcl(serverProxy), group, sn.SSHHost, sn.SSHPort, sn.HostKey))

	const (
		tenantRes    = "module.group.fediversity_incus_tenant.this[0]"
		container    = "module.group.fediversity_incus_node.node"
		registration = "module.group.module.wave_1.fediversity_spire_registration.node"
		verdict      = "module.group.module.wave_1.fediversity_verdict.node"
	)
	every := func(action plancheck.ResourceActionType) map[string]plancheck.ResourceActionType {
		return map[string]plancheck.ResourceActionType{names[0]: action, names[1]: action}
	}
	// attestedInTenant: each node runs the system, in the tenant's project only; its
	// agent is the system's (the unit runs it from the store, and no spire-agent was put
	// in /usr/local/bin); it reaches the server by the tenant profile's device, not one
	// of its own; it holds the SVID of the node's host entry, which the server has; and
	// the secret chain's product is there.
	attestedInTenant := labCheck(func() error {
		for _, n := range names {
			exec := func(args ...string) (string, error) {
				return labtest.IncusErr(append([]string{"exec", "--project", tenant, n, "--"}, args...)...)
			}
			if cur, err := exec("readlink", "-f", "/run/current-system"); err != nil || strings.TrimSpace(cur) != system {
				return fmt.Errorf("%s in project %s runs %q (%v), want %s", n, tenant, cur, err, system)
			}
			if _, err := labtest.IncusErr("info", n); err == nil {
				return fmt.Errorf("container %s is in the default project too", n)
			}
			if start, err := exec("systemctl", "show", "-p", "ExecStart", "--value", "fedi-spire-agent.service"); err != nil || !strings.Contains(start, "path=/nix/store/") {
				return fmt.Errorf("%s: fedi-spire-agent does not run the agent from the store (%v):\n%s", n, err, start)
			}
			if _, err := exec("test", "-e", "/usr/local/bin/spire-agent"); err == nil {
				return fmt.Errorf("%s: a spire-agent is in /usr/local/bin; the agent must come from the system only", n)
			}
			if own, _ := labtest.IncusErr("config", "device", "show", "--project", tenant, n); strings.Contains(own, "8081") {
				return fmt.Errorf("%s has a device of its own to the SPIRE server; it should come from the tenant's profile:\n%s", n, own)
			}
			if exp, _ := labtest.IncusErr("config", "show", "--expanded", "--project", tenant, n); !strings.Contains(exp, fmt.Sprintf("connect: tcp:127.0.0.1:%d", sn.ServerPort)) {
				return fmt.Errorf("%s lacks the tenant profile's proxy to the SPIRE server:\n%s", n, exp)
			}
			out, err := exec("/run/current-system/sw/bin/spire-agent", "api", "fetch", "x509", "-socketPath", "/run/spire-agent/api.sock")
			if err != nil || !strings.Contains(out, spire.HostID(group, n)) {
				journal, _ := exec("journalctl", "-u", "fedi-spire-agent", "--no-pager", "-n", "20")
				return fmt.Errorf("the agent of %s holds no SVID of %s (%v):\n%s\n%s", n, spire.HostID(group, n), err, out, journal)
			}
			if _, err := exec("test", "-e", "/run/secret"); err != nil {
				return fmt.Errorf("%s: the secret chain's product /run/secret is missing", n)
			}
			if !strings.Contains(hostEntry(sn, group, n), spire.HostID(group, n)) {
				return fmt.Errorf("%s: no host entry on the server", n)
			}
		}
		return nil
	})
	// gone: no entry of the group's nodes is left on the server, and no project.
	gone := labCheck(func() error {
		for _, n := range names {
			if strings.Contains(hostEntry(sn, group, n), spire.HostID(group, n)) {
				return fmt.Errorf("the host entry of %s is left after the group went", n)
			}
		}
		if out, err := labtest.IncusErr("project", "show", tenant); err == nil {
			return fmt.Errorf("project %s should be gone with the tenant's last node:\n%s", tenant, out)
		}
		return nil
	})

	resource.Test(t, resource.TestCase{
		PreCheck: func() { acctest.PreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				// A device of the tenant's profile under the name of the profile's own root
				// disk is refused at plan, naming it; nothing is made.
				PreConfig:   func() { g.submit(names, nil) },
				Config:      strings.Replace(config, `{"spire":{`, `{"root":{`, 1),
				ExpectError: regexp.MustCompile(`(?s)Invalid\s+tenant\s+device.*"root"\s+is\s+the\s+tenant\s+profile's\s+own\s+device`),
				PlanOnly:    true,
			},
			resource.TestStep{
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(append(append(
					[]plancheck.PlanCheck{plancheck.ExpectResourceAction(tenantRes, plancheck.ResourceActionCreate)},
					actions(container, names, every(plancheck.ResourceActionCreate))...),
					actions(registration, names, every(plancheck.ResourceActionCreate))...),
					actions(verdict, names, every(plancheck.ResourceActionCreate))...),
					// Then the same submission again: nothing to do.
					PostApplyPostRefresh: nothingToDo},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)),
					attestedInTenant,
				},
			},
			resource.TestStep{
				// The group is turned off: the registrations go (entries deleted), then the
				// containers, then the tenant's project.
				PreConfig: func() { g.submit(nil, nil) },
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(append(
					[]plancheck.PlanCheck{plancheck.ExpectResourceAction(tenantRes, plancheck.ResourceActionDestroy)},
					actions(container, names, every(plancheck.ResourceActionDestroy))...),
					actions(registration, names, every(plancheck.ResourceActionDestroy))...)},
				ConfigStateChecks: []statecheck.StateCheck{gone},
			},
			resource.TestStep{
				Config:            emptyRoot(),
				ConfigStateChecks: []statecheck.StateCheck{gone},
			},
		),
	})
}
