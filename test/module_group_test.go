package test

// Shared pieces of the acceptance tests of the group modules (modules/tf, modules/tf-incus,
// modules/k8s). Each test takes its module by a local path, as an operator's root module
// takes it by its GitHub address, and runs it on a 3-node group from a sample submission.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/config"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/submission"
)

// groupSample is a 3-node group: each node runs one application; the submission enables
// the applications of the nodes listed in enabled, and settings (any JSON object) for
// the application of one node.
type groupSample struct {
	t      *testing.T
	method string
	nodes  []string          // node names
	apps   map[string]string // node -> application
	file   string            // the submission file
}

func newGroupSample(t *testing.T, method string, nodes []string) *groupSample {
	g := &groupSample{t: t, method: method, nodes: nodes, apps: map[string]string{}, file: filepath.Join(t.TempDir(), "submission.json")}
	for i, n := range nodes {
		g.apps[n] = []string{"mastodon", "pixelfed", "peertube"}[i]
	}
	return g
}

// baked is the baked configuration: every application off by default.
func (g *groupSample) baked() string {
	nodes, apps := map[string]any{}, map[string]any{}
	for n, a := range g.apps {
		nodes[n] = map[string]any{"applications": []string{a}}
		apps[a] = map[string]any{"enable": false}
	}
	b, _ := json.Marshal(map[string]any{"nodes": nodes, "applications": apps, "domain": groupDomain})
	return string(b)
}

// submit writes the submission: the applications of enabled nodes on, with extra
// settings for some applications; it returns the submission's digest.
func (g *groupSample) submit(enabled []string, settings map[string]map[string]any) string {
	g.t.Helper()
	apps := map[string]any{}
	for _, n := range enabled {
		a := map[string]any{"enable": true}
		for k, v := range settings[g.apps[n]] {
			a[k] = v
		}
		apps[g.apps[n]] = a
	}
	b, _ := json.Marshal(map[string]any{g.method: map[string]any{"applications": apps}})
	if err := os.WriteFile(g.file, b, 0o600); err != nil {
		g.t.Fatal(err)
	}
	d, err := submission.ReadAndDigest(g.file)
	if err != nil {
		g.t.Fatal(err)
	}
	return d
}

// modulePath is the absolute path of modules/<method> in this checkout.
func modulePath(t *testing.T, method string) string {
	return filepath.Join(labtest.RepoRoot(t), "modules", method)
}

// hcl renders v (maps, lists, strings, numbers, booleans) as an HCL expression: JSON
// is valid HCL for these, except that object keys are quoted, which HCL accepts.
func hcl(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// actions expects the given action for the module resource addr[node] of each node
// listed, and no change for every other node of the group.
func actions(addr string, nodes []string, want map[string]plancheck.ResourceActionType) []plancheck.PlanCheck {
	var checks []plancheck.PlanCheck
	for _, n := range nodes {
		a, ok := want[n]
		if !ok {
			a = plancheck.ResourceActionNoop
		}
		checks = append(checks, plancheck.ExpectResourceAction(fmt.Sprintf("%s[%q]", addr, n), a))
	}
	return checks
}

// summaryCheck is the group summary output: ok nodes, no failing node, disabled nodes.
func summaryCheck(ok, disabled []string) knownvalue.Check {
	list := func(xs []string) knownvalue.Check {
		var cs []knownvalue.Check
		for _, x := range xs {
			cs = append(cs, knownvalue.StringExact(x))
		}
		return knownvalue.ListExact(cs)
	}
	return knownvalue.ObjectExact(map[string]knownvalue.Check{
		"ok":       list(ok),
		"failing":  knownvalue.MapExact(map[string]knownvalue.Check{}),
		"disabled": list(disabled),
	})
}

// groupAddresses are the addresses the operator hands a group module for its DNS
// records (documentation ranges; web01's IPv6 address in upper case, which the module
// writes in canonical form). groupAddressesHCL is the module argument.
func groupAddresses(nodes []string) map[string][]string {
	return map[string][]string{
		nodes[0]: {"192.0.2.11", "2001:DB8::11"},
		nodes[1]: {"192.0.2.12"},
		nodes[2]: {"192.0.2.13"},
	}
}

// groupDomain is the domain of the sample's baked configuration.
const groupDomain = "group.fediversity.test"

// dnsRecordsCheck is the dns_records output of a group module for the enabled nodes
// given (sorted), with the addresses of groupAddresses.
func dnsRecordsCheck(all, enabled []string) knownvalue.Check {
	addrs := groupAddresses(all)
	canonical := map[string]string{"2001:DB8::11": "2001:db8::11"}
	var recs []knownvalue.Check
	for _, n := range enabled {
		for _, a := range addrs[n] {
			typ, value := "A", a
			if strings.Contains(a, ":") {
				typ, value = "AAAA", canonical[a]
			}
			recs = append(recs, knownvalue.ObjectExact(map[string]knownvalue.Check{
				"node":  knownvalue.StringExact(n),
				"name":  knownvalue.StringExact(n + "." + groupDomain),
				"type":  knownvalue.StringExact(typ),
				"value": knownvalue.StringExact(value),
			}))
		}
	}
	return knownvalue.ListExact(recs)
}

// dnsOutputs are the root outputs of a group module's DNS lane.
const dnsOutputs = `
output "dns_records" {
  value = module.group.dns_records
}

output "domain" {
  value = module.group.domain
}
`

// refusedAll matches an apply error that refuses every one of nodes (in any order).
func refusedAll(verb string, nodes []string) *regexp.Regexp {
	var ahead []string
	for _, n := range nodes {
		ahead = append(ahead, "Refusing to "+regexp.QuoteMeta(verb)+" "+regexp.QuoteMeta(n)+": the submission changed")
	}
	// Go's regexp has no lookahead: accept the refusals in either of the two orders
	// a 2-node group can give (the tests refuse two nodes).
	if len(ahead) == 2 {
		return regexp.MustCompile(`(?s)(` + ahead[0] + `.*` + ahead[1] + `|` + ahead[1] + `.*` + ahead[0] + `)`)
	}
	return regexp.MustCompile(`(?s)` + strings.Join(ahead, ".*"))
}

// moduleSteps gives every step the provider under test and puts its configuration in a
// directory of its own. terraform-plugin-testing runs `init` only for steps that name
// their providers, and then with the step's configuration only when it comes from a
// directory (a Config string is set after init): otherwise the module the configuration
// calls is never installed ("Module not installed").
func moduleSteps(t *testing.T, steps ...resource.TestStep) []resource.TestStep {
	for i := range steps {
		steps[i].ProtoV6ProviderFactories = acctest.ProtoV6ProviderFactories
		if steps[i].Config != "" {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(steps[i].Config), 0o600); err != nil {
				t.Fatal(err)
			}
			steps[i].ConfigDirectory, steps[i].Config = config.StaticDirectory(dir), ""
		}
	}
	return steps
}

// nothingToDo is the check, after a step's apply, that the same configuration again has
// nothing to do: the plan after the apply, with a refresh of every node, is empty. That
// plan is the step's own (the harness plans once without and once with a refresh after
// every apply, and fails the step when either is not empty), so it costs nothing; a step
// of its own that planned the same configuration again would run init, plan, apply and
// both plans once more (a refresh of every node in two of them) to prove the same.
var nothingToDo = []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}

// backToApproved is the step after a refused apply, back at the approved submission
// (written by submit): the refused apply changed nothing, on any node or in the state.
// A plan proves it (PlanOnly: the plans without and with a refresh of every node are
// both empty); an apply of an empty plan would prove nothing more. What the nodes run
// is checked before it (nodes; a plan changes no node).
func backToApproved(t *testing.T, submit func(), nodes func() error, config string) resource.TestStep {
	return resource.TestStep{
		PreConfig: func() {
			submit()
			if err := nodes(); err != nil {
				t.Fatal(err)
			}
		},
		Config:           config,
		PlanOnly:         true,
		ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: nothingToDo},
	}
}

// labCheck is a check of the lab or the cluster after a step. A module test cannot use
// a step's Check: terraform-plugin-testing hands Check the state in its legacy form,
// which has no room for child modules ("Modules are not supported").
type labCheck func() error

func (f labCheck) CheckState(_ context.Context, _ statecheck.CheckStateRequest, resp *statecheck.CheckStateResponse) {
	resp.Error = f()
}

// emptyRoot is the last step of a module test: a configuration without the module, so
// its apply destroys every resource the module made. The harness' own destroy after the
// last step reads the state in the legacy form too, and would fail on a child module.
func emptyRoot() string {
	return acctest.Config(`provider "fediversity" {}`)
}

// currentSystem is what /run/current-system points at in a lab container. The incus CLI
// now and then returns an empty output for a command that printed a line (seen on this
// shared machine under load): an empty answer is asked again, at most three times.
func currentSystem(instance string) (string, error) {
	var out string
	var err error
	for range 3 {
		out, err = labtest.IncusErr("exec", instance, "--", "readlink", "-f", "/run/current-system")
		if out = strings.TrimSpace(out); err == nil && out != "" {
			return out, nil
		}
		time.Sleep(time.Second)
	}
	return out, err
}

// timingIs checks the timings block of the node resource at addr (in a child module):
// its timing name is want.
func timingIs(addr, name, want string) statecheck.StateCheck {
	return stateAttrs(addr).check(func(attrs map[string]any) error {
		timings, _ := attrs["timings"].(map[string]any)
		if got := timings[name]; got != want {
			return fmt.Errorf("%s: timings.%s is %v, want %q", addr, name, got, want)
		}
		return nil
	})
}
