package node_test

// Acceptance test of fediversity_incus_image on the lab's real incusd: two nodes of one
// system share one image under two aliases; an alias deleted outside Terraform is made
// again by the next apply, without a second upload being needed; destroying one node's
// image keeps the image the other still names, destroying both deletes it. The
// plan-time check of a toplevel needs no daemon.

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

func incusImageConfig(toplevel string, nodes ...string) string {
	var b strings.Builder
	b.WriteString("provider \"fediversity\" {}\n")
	for _, n := range nodes {
		fmt.Fprintf(&b, "resource \"fediversity_incus_image\" %q {\n  node     = %q\n  toplevel = %q\n}\n", n, n, toplevel)
	}
	return acctest.Config(b.String())
}

func TestAccIncusImage(t *testing.T) {
	acctest.Lab(t)
	top := labtest.BuildClosureSeed(t, labtest.ClosureBootableSwitchable, labtest.Prefix()+"-acc-image")
	a, b := labtest.Prefix()+"-t-img-a", labtest.Prefix()+"-t-img-b"
	key := strings.SplitN(strings.TrimPrefix(top, "/nix/store/"), "-", 2)[0]
	aliasA, aliasB := "fediversity/"+a+"/"+key, "fediversity/"+b+"/"+key
	fingerprint := func(alias string) string {
		out, err := labtest.IncusErr("image", "alias", "list", "--format", "csv", alias)
		if err != nil {
			return ""
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Split(line, ","); len(f) > 1 && f[0] == alias {
				return f[1]
			}
		}
		return ""
	}
	cleanup := func() {
		for _, alias := range []string{aliasA, aliasB} {
			_, _ = labtest.IncusErr("image", "delete", alias)
		}
	}
	cleanup()
	t.Cleanup(cleanup)
	var fp string
	same := func(s *terraform.State) error {
		fa, fb := s.RootModule().Resources["fediversity_incus_image."+a], s.RootModule().Resources["fediversity_incus_image."+b]
		if fa == nil || fb == nil {
			return fmt.Errorf("both images must be in the state")
		}
		fp = fa.Primary.Attributes["fingerprint"]
		if fp == "" || fb.Primary.Attributes["fingerprint"] != fp {
			return fmt.Errorf("two nodes of one system have images %q and %q; want one", fp, fb.Primary.Attributes["fingerprint"])
		}
		if got := fa.Primary.Attributes["alias"]; got != aliasA {
			return fmt.Errorf("alias %q, want %q", got, aliasA)
		}
		if fa.Primary.Attributes["system"] != top {
			return fmt.Errorf("system %q, want %s", fa.Primary.Attributes["system"], top)
		}
		for _, alias := range []string{aliasA, aliasB} {
			if got := fingerprint(alias); !strings.HasPrefix(fp, got) || got == "" {
				return fmt.Errorf("alias %s names %q on the daemon, want %s", alias, got, fp)
			}
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      incusImageConfig("/tmp/not-a-store-path", a),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Invalid toplevel.*not a store path`),
			},
			{
				Config: incusImageConfig(top, a, b),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectKnownValue("fediversity_incus_image."+a, tfjsonpath.New("alias"), knownvalue.StringExact(aliasA)),
				}},
				Check: same,
			},
			{
				Config:           incusImageConfig(top, a, b),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				// b's alias is deleted outside Terraform: the next plan makes it again, and
				// names the image a still holds (the daemon refuses a second copy of it).
				PreConfig: func() { _, _ = labtest.IncusErr("image", "alias", "delete", aliasB) },
				Config:    incusImageConfig(top, a, b),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("fediversity_incus_image."+b, plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("fediversity_incus_image."+a, plancheck.ResourceActionNoop),
				}},
				Check: same,
			},
			{
				// b goes: a's alias keeps the image.
				Config: incusImageConfig(top, a),
				Check: func(*terraform.State) error {
					if got := fingerprint(aliasA); got == "" || !strings.HasPrefix(fp, got) {
						return fmt.Errorf("after b's image went, alias %s names %q; want the image kept, %s", aliasA, got, fp)
					}
					if got := fingerprint(aliasB); got != "" {
						return fmt.Errorf("alias %s is still there", aliasB)
					}
					return nil
				},
			},
			{
				// The last node goes: the image with it.
				Config: acctest.Config(`provider "fediversity" {}`),
				Check: func(*terraform.State) error {
					if out, err := labtest.IncusErr("image", "info", fp); err == nil {
						return fmt.Errorf("image %s is still on the daemon:\n%s", fp, out)
					}
					return nil
				},
			},
		},
	})
}
