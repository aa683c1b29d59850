package node_test

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/config"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// A group module picks the transport from a variable with `dynamic` blocks. Terraform
// validates a configuration with its variables unknown, so the blocks are unknown then:
// that is not "neither block given". The plan (variables known) still refuses none or
// both, naming the node.
func TestAccNodeSwitchDynamicTransportBlocks(t *testing.T) {
	accOnly(t)
	cfg := `
variable "transport" { type = string }
resource "fediversity_node_switch" "n" {
  node     = "web01"
  toplevel = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-nixos-system-web01"
  dynamic "ssh" {
    for_each = contains(["ssh", "both"], var.transport) ? [1] : []
    content {
      host     = "127.0.0.1"
      port     = 22
      host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3Cj0aK1mO4vVq7bWJm7pS9xXcG2d0dTq0m4Q1fG7kD"
    }
  }
  dynamic "incus" {
    for_each = contains(["incus", "both"], var.transport) ? [1] : []
    content {
      instance = "web01"
    }
  }
}
`
	vars := func(v string) config.Variables { return config.Variables{"transport": config.StringVariable(v)} }
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: cfg, ConfigVariables: vars("ssh"), PlanOnly: true, ExpectNonEmptyPlan: true},
			{Config: cfg, ConfigVariables: vars("incus"), PlanOnly: true, ExpectNonEmptyPlan: true},
			{Config: cfg, ConfigVariables: vars("none"), PlanOnly: true,
				ExpectError: regexp.MustCompile(`(?s)No transport for web01.*exactly one of an ssh block or an incus block`)},
			{Config: cfg, ConfigVariables: vars("both"), PlanOnly: true,
				// The node spec's words, the command's roster's too.
				ExpectError: regexp.MustCompile(`(?s)Conflicting transports.*Node web01: incus: give exactly one transport`)},
		},
	})
}
