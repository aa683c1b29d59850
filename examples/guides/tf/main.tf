terraform {
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}

# The SSH key comes from SSH_PRIVATE_KEY_FILE or SSH_AUTH_SOCK, never from here.
provider "fediversity" {}

module "group" {
  source = "github.com/fediversity/terraform-provider-fediversity//modules/tf?ref=main"

  # What the api wrote, and the configuration it is merged into.
  submission_file = "${path.root}/submission.json"
  baked_json      = file("${path.root}/baked.json")
  operator_root   = path.root

  # How to reach each node (the fediversity command's roster file fits as it is).
  nodes = jsondecode(file("${path.root}/roster.json")).nodes

  # How each node's system is built: nodes.nix takes the node plan as planFile.
  build = { file = "${path.root}/nodes.nix", attribute = "system" }

  strict  = true
  timings = { settle = "5s", watch = "10s", node_wait = "2m" }

  # A staged rollout: one canary node, then waves of half the group. A failed node
  # halts the rollout after its wave; the nodes of later waves are not touched.
  canary         = 1
  wave_size      = "50%"
  failure_budget = "0"
}

output "summary" {
  value = module.group.summary
}

output "verdicts" {
  value = { for n, v in module.group.verdicts : n => v.ok }
}
