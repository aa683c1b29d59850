package test

// Acceptance test of modules/tf-incus's tenant resources and DNS lane on the lab's real
// incusd and a real DNS server (knot, on 127.0.0.1): the module makes the tenant's
// project (with its limits) and writes its profile once, makes every container in it,
// and deletes it with the tenant's last node; while the project still holds a data
// volume kept on destroy, it is kept for it instead, and the tenant takes it back, with
// the volume's data, when its node comes back; a project of its name that is not the
// tenant's is refused. The records of its dns_records output are
// loaded into knot and each resolves as written.

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// dnsOutputCheck hands a step's root outputs domain and dns_records to check.
type dnsOutputCheck func(domain string, records []dnsRecord) error

func (f dnsOutputCheck) CheckState(_ context.Context, req statecheck.CheckStateRequest, resp *statecheck.CheckStateResponse) {
	if req.State == nil || req.State.Values == nil || req.State.Values.Outputs["dns_records"] == nil || req.State.Values.Outputs["domain"] == nil {
		resp.Error = fmt.Errorf("the state has no domain and dns_records outputs")
		return
	}
	records, err := dnsRecordsOf(req.State.Values.Outputs["dns_records"].Value)
	if err != nil {
		resp.Error = err
		return
	}
	resp.Error = f(fmt.Sprint(req.State.Values.Outputs["domain"].Value), records)
}

func TestAccModuleTFIncusTenant(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	tenant := labtest.Prefix() + "-t-tenant"
	var names []string
	for _, s := range []string{"a", "b"} {
		names = append(names, labtest.Prefix()+"-t-mtt-"+s)
	}
	a, b := names[0], names[1]
	removeTenant := func() {
		for _, n := range names {
			_, _ = labtest.IncusErr("delete", "--force", "--project", tenant, n)
			_, _ = labtest.IncusErr("storage", "volume", "delete", "--project", tenant, "lab", n+"-data")
		}
		_, _ = labtest.IncusErr("project", "delete", tenant)
	}
	removeTenant()
	t.Cleanup(removeTenant)
	g := newGroupSample(t, "tf-incus", names)
	// a's data volume goes with its container; b's is kept (data_volume's default) until
	// b comes back, and then goes with it, so that the project can go at the end.
	roster := func(bDeletes bool) map[string]any {
		return map[string]any{
			a: map[string]any{"data_volume": map[string]any{"delete_on_destroy": true}},
			b: map[string]any{"data_volume": map[string]any{"delete_on_destroy": bDeletes}},
		}
	}
	addresses := map[string][]string{a: {"192.0.2.21", "2001:DB8::21"}, b: {"192.0.2.22"}}
	dns := startDNSServer(t, groupDomain)
	configWith := func(roster map[string]any) string {
		return acctest.Config(`provider "fediversity" {}` + fmt.Sprintf(`
module "group" {
  source          = %q
  submission_file = %q
  baked_json      = %s
  nodes           = %s
  image           = %q
  build           = { file = %q, attribute = %q }
  timings         = { node_wait = "90s", settle = "1s", watch = "3s", sample_interval = "1s", verdict_watch = "2s" }
  addresses       = %s
  tenant = {
    name             = %q
    limits           = { instances = "4", memory = "2GiB" }
    container_limits = { memory = "512MiB" }
  }
}

output "summary" {
  value = module.group.summary
}
`+dnsOutputs, modulePath(t, "tf-incus"), g.file, hcl(g.baked()), hcl(roster), labtest.Image,
			labtest.RepoRoot(t)+"/lab/closures/default.nix", labtest.ClosureGood, hcl(addresses), tenant))
	}
	config := configWith(roster(false))
	bVolume := b + "-data"
	// keptVolume: b's data volume is in the tenant's project, and holds the marker
	// written on it while b ran.
	keptVolume := func() error {
		if out, err := labtest.IncusErr("storage", "volume", "show", "--project", tenant, "lab", bVolume); err != nil {
			return fmt.Errorf("b's kept data volume %s should be in project %s (%v):\n%s", bVolume, tenant, err, out)
		}
		return nil
	}
	const marker = "written while b ran"

	const (
		tenantRes = "module.group.fediversity_incus_tenant.this[0]"
		container = "module.group.fediversity_incus_node.node"
	)
	inTenant := func(nodes ...string) labCheck {
		return func() error {
			conf, err := labtest.IncusErr("project", "get", tenant, "limits.memory")
			if err != nil || strings.TrimSpace(conf) != "2GiB" {
				return fmt.Errorf("project %s: limits.memory %q (%v), want 2GiB", tenant, conf, err)
			}
			for k, want := range map[string]string{"features.images": "false", "features.profiles": "true", "features.storage.volumes": "true", "limits.instances": "4"} {
				if got, _ := labtest.IncusErr("project", "get", tenant, k); strings.TrimSpace(got) != want {
					return fmt.Errorf("project %s: %s = %q, want %s", tenant, k, strings.TrimSpace(got), want)
				}
			}
			prof, err := labtest.IncusErr("profile", "show", "--project", tenant, "default")
			if err != nil || !strings.Contains(prof, "limits.memory: 512MiB") || !strings.Contains(prof, "pool: lab") {
				return fmt.Errorf("the tenant's profile (%v):\n%s", err, prof)
			}
			for _, n := range nodes {
				if cur, err := labtest.IncusErr("exec", "--project", tenant, n, "--", "readlink", "-f", "/run/current-system"); err != nil || strings.TrimSpace(cur) != good {
					return fmt.Errorf("%s in project %s runs %q (%v), want %s", n, tenant, cur, err, good)
				}
				if mem, _ := labtest.IncusErr("config", "get", "--project", tenant, "--expanded", n, "limits.memory"); strings.TrimSpace(mem) != "512MiB" {
					return fmt.Errorf("%s: limits.memory %q from the tenant's profile, want 512MiB", n, mem)
				}
				if _, err := labtest.IncusErr("info", n); err == nil {
					return fmt.Errorf("container %s is in the default project too", n)
				}
			}
			return nil
		}
	}
	served := func(gone ...string) dnsOutputCheck {
		return func(domain string, records []dnsRecord) error {
			if domain != groupDomain {
				return fmt.Errorf("domain %q, want %s", domain, groupDomain)
			}
			return dns.load(records, gone...)
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck: func() { acctest.PreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				// A project of the tenant's name that is not the tenant's (no mark) is
				// refused, naming it, and left as it is.
				PreConfig: func() {
					g.submit(names, nil)
					labtest.Incus(t, "project", "create", tenant, "-c", "features.images=false")
				},
				Config:      config,
				ExpectError: regexp.MustCompile(`(?s)already\s+has\s+a\s+project\s+` + regexp.QuoteMeta(tenant) + `.*not\s+this\s+tenant's`),
			},
			resource.TestStep{
				PreConfig: func() {
					if out, err := labtest.IncusErr("project", "get", tenant, "features.images"); err != nil || strings.TrimSpace(out) != "false" {
						t.Fatalf("the refused tenant changed the foreign project %s: features.images %q (%v)", tenant, out, err)
					}
					labtest.Incus(t, "project", "delete", tenant)
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(tenantRes, plancheck.ResourceActionCreate),
				},
					// Then the same submission again: nothing to do.
					PostApplyPostRefresh: nothingToDo},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)),
					inTenant(a, b),
					served(),
					labCheck(func() error {
						_, err := labtest.IncusErr("exec", "--project", tenant, b, "--", "sh", "-c", "printf '"+marker+"' > /var/lib/fediversity/marker && sync")
						return err
					}),
				},
			},
			resource.TestStep{
				// b is turned off: its container and its records go, its data volume is
				// kept, the tenant stays.
				PreConfig: func() { g.submit([]string{a}, nil) },
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(
					actions(container, names, map[string]plancheck.ResourceActionType{b: plancheck.ResourceActionDestroy}),
					plancheck.ExpectResourceAction(tenantRes, plancheck.ResourceActionNoop))},
				ConfigStateChecks: []statecheck.StateCheck{
					inTenant(a),
					labCheck(func() error {
						if _, err := labtest.IncusErr("info", "--project", tenant, b); err == nil {
							return fmt.Errorf("container %s should be gone with its node", b)
						}
						return keptVolume()
					}),
					served(b + "." + groupDomain),
				},
			},
			resource.TestStep{
				// The last node is turned off: the tenant leaves the state, but its project
				// still holds b's kept volume, and is kept for it (with a warning naming
				// the volume and the commands that delete it).
				PreConfig: func() { g.submit(nil, nil) },
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(
					actions(container, []string{a}, map[string]plancheck.ResourceActionType{a: plancheck.ResourceActionDestroy}),
					plancheck.ExpectResourceAction(tenantRes, plancheck.ResourceActionDestroy))},
				ConfigStateChecks: []statecheck.StateCheck{
					labCheck(func() error {
						if _, err := labtest.IncusErr("info", "--project", tenant, a); err == nil {
							return fmt.Errorf("container %s should be gone with its node", a)
						}
						if out, err := labtest.IncusErr("storage", "volume", "show", "--project", tenant, "lab", a+"-data"); err == nil {
							return fmt.Errorf("a's data volume should go with it (delete_on_destroy):\n%s", out)
						}
						return keptVolume()
					}),
					served(a+"."+groupDomain, b+"."+groupDomain),
				},
			},
			resource.TestStep{
				// b comes back: the tenant is made again and takes its kept project back,
				// and b's new container its volume, with the data b wrote. (b's volume now
				// goes with it, so the project can go with the module.)
				PreConfig: func() { g.submit([]string{b}, nil) },
				Config:    configWith(roster(true)),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(
					actions(container, []string{b}, map[string]plancheck.ResourceActionType{b: plancheck.ResourceActionCreate}),
					plancheck.ExpectResourceAction(tenantRes, plancheck.ResourceActionCreate))},
				ConfigStateChecks: []statecheck.StateCheck{
					inTenant(b),
					labCheck(func() error {
						out, err := labtest.IncusErr("exec", "--project", tenant, b, "--", "cat", "/var/lib/fediversity/marker")
						if err != nil || out != marker {
							return fmt.Errorf("b's new container should see the data on its kept volume: %q (%v), want %q", out, err, marker)
						}
						return nil
					}),
				},
			},
			resource.TestStep{
				// Without the module, nothing of the tenant is left: no volume is kept.
				Config: emptyRoot(),
				ConfigStateChecks: []statecheck.StateCheck{
					labCheck(func() error {
						if out, err := labtest.IncusErr("project", "show", tenant); err == nil {
							return fmt.Errorf("project %s should be gone with the tenant's last node and its volume:\n%s", tenant, out)
						}
						return nil
					}),
				},
			},
		),
	})
}
