package node_test

// Acceptance tests of health checks and of `changes` on the lab: a node check and a
// deployer probe against a real HTTP service (systemd socket activation in the lab
// closure `http`) reached through an Incus proxy device on 127.0.0.1.

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// checkBlocksHCL are a node check that passes once the service has warmed up (about 3 s
// after the switch), and never at its first attempt, so that its retries show however
// long a loaded machine took to reach the checks (the closure's activation removes the
// marker); and a probe of the service from the deployer.
func checkBlocksHCL(httpPort int, strict bool) string {
	return fmt.Sprintf(`
  strict = %t
  check {
    name     = "warm"
    argv     = ["sh", "-c", "test -e /run/fedi-warm-seen && test -e /run/fedi-http-ready || { touch /run/fedi-warm-seen; exit 1; }"]
    interval = "1s"
    timeout  = "20s"
  }
  probe {
    name        = "web"
    url         = "http://127.0.0.1:%d/health"
    body_regexp = "fedi\\s+ok"
    interval    = "1s"
    timeout     = "8s"
  }`, strict, httpPort)
}

func checkResult(i int, key string, want knownvalue.Check) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New("verdict").AtMapKey("checks").AtSliceIndex(i).AtMapKey(key), want)
}

// One throwaway node: good, then good-v2 (`changes` names the changed unit and path),
// then the HTTP closure with a check and a probe that pass after a delay (attempts
// recorded), then a closure whose service is active but answers 500: the strict apply
// fails naming the probe, the lenient one warns. Changing only the checks redeploys
// nothing.
func TestAccNodeSwitchHealthChecksAndChanges(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	goodV2 := labtest.BuildClosure(t, labtest.ClosureGoodV2)
	httpOK := labtest.BuildClosure(t, labtest.ClosureHTTP)
	httpBroken := labtest.BuildClosure(t, labtest.ClosureHTTPBroken)
	node := labtest.NewInstance(t, "acc-checks")
	httpPort := labtest.FreePort(t)
	labtest.Incus(t, "config", "device", "add", node.Instance, "http", "proxy",
		"listen=tcp:127.0.0.1:"+strconv.Itoa(httpPort), "connect=tcp:127.0.0.1:8080", "bind=host")

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: switchConfig(node, sshBlock(node), good, "")},
			{
				Config: switchConfig(node, sshBlock(node), goodV2, ""),
				ConfigStateChecks: []statecheck.StateCheck{
					// fedi-web.service's file changed (FEDI_VERSION=2); fedi-setup.service's did
					// not (the stand-in's units name their tools by store path, not their
					// toplevel, as a NixOS unit does), so it is not listed.
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("changes").AtMapKey("units_changed"),
						knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("fedi-web.service")})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("changes").AtMapKey("units_added"), knownvalue.ListSizeExact(0)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("changes").AtMapKey("packages_changed"),
						knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("nixos-system-fedi-good: 1 → 2")})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("changes").AtMapKey("paths_added"),
						knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact(goodV2)})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("changes").AtMapKey("previous_closure_known"), knownvalue.Bool(true)),
				},
			},
			{
				Config: switchConfig(node, sshBlock(node), httpOK, checkBlocksHCL(httpPort, true)),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
					checkResult(0, "name", knownvalue.StringExact("warm")),
					checkResult(0, "kind", knownvalue.StringExact("node")),
					checkResult(0, "ok", knownvalue.Bool(true)),
					checkResult(0, "attempts", knownvalue.Int64Func(atLeast(2))),
					checkResult(1, "name", knownvalue.StringExact("web")),
					checkResult(1, "kind", knownvalue.StringExact("probe")),
					checkResult(1, "ok", knownvalue.Bool(true)),
					checkResult(1, "time_to_pass", knownvalue.NotNull()),
					checkResult(1, "output", knownvalue.StringRegexp(regexp.MustCompile(`^status 200: fedi ok`))),
				},
			},
			{
				// Only a check changes: nothing is redeployed (the verdict is kept).
				Config: switchConfig(node, sshBlock(node), httpOK, checkBlocksHCL(httpPort, true)+`
  check {
    name = "extra"
    argv = ["true"]
  }`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("verdict").AtMapKey("checks"), knownvalue.ListSizeExact(2)),
				},
			},
			{
				// The service is active but answers 500: the strict apply fails naming the probe.
				Config:      switchConfig(node, sshBlock(node), httpBroken, checkBlocksHCL(httpPort, true)),
				ExpectError: regexp.MustCompile(`(?s)Check web failed on ` + regexp.QuoteMeta(node.Name) + `.*probe web failed after \d+ attempts.*status 500.*this check is the cause`),
			},
			{
				// Lenient: the same failure is a warning; the verdict keeps it.
				Config: switchConfig(node, sshBlock(node), httpBroken, checkBlocksHCL(httpPort, false)),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
					checkResult(1, "name", knownvalue.StringExact("web")),
					checkResult(1, "ok", knownvalue.Bool(false)),
					checkResult(1, "attempts", knownvalue.Int64Func(atLeast(2))),
					checkResult(1, "time_to_pass", knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("verdict").AtMapKey("reasons"),
						knownvalue.ListExact([]knownvalue.Check{knownvalue.StringRegexp(regexp.MustCompile(`^probe web failed after \d+ attempts \(status 500`))})),
				},
			},
		},
	})
}

func atLeast(n int64) func(int64) error {
	return func(v int64) error {
		if v < n {
			return fmt.Errorf("%d < %d", v, n)
		}
		return nil
	}
}

// Bad checks are refused at plan time, naming the field, before any node is touched.
func TestAccNodeSwitchChecksValidation(t *testing.T) {
	accOnly(t)
	node := labtest.Node{Name: "web01", SSHHost: "127.0.0.1", SSHPort: 22, HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3Cj0aK1mO4vVq7bWJm7pS9xXcG2d0dTq0m4Q1fG7kD"}
	top := "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-nixos-system-web01"
	step := func(extra, want string) resource.TestStep {
		return resource.TestStep{Config: switchConfig(node, sshBlock(node), top, extra), PlanOnly: true, ExpectError: regexp.MustCompile(want)}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			step("check {\n name = \"a\"\n argv = [\"true\"]\n}\nprobe {\n name = \"a\"\n tcp = \"127.0.0.1:80\"\n}", `(?s)Invalid health checks.*probe "a": the name is used twice`),
			step("probe {\n name = \"p\"\n url = \"http://x/\"\n tcp = \"127.0.0.1:80\"\n}", `(?i)invalid\s+attribute\s+combination`),
			step("probe {\n name = \"p\"\n url = \"http://x/\"\n body_regexp = \"(\"\n}", `(?s)Invalid regular expression.*body_regexp = "\(".*missing closing \)`),
			step("check {\n name = \"c\"\n argv = [\"true\"]\n interval = \"soon\"\n}", `(?s)Invalid duration.*interval = "soon".*not a positive Go duration`),
			step("probe {\n name = \"p\"\n tcp = \"127.0.0.1\"\n}", `(?s)Invalid address.*tcp = "127.0.0.1".*not host:port`),
		},
	})
}
