terraform {
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}

# The Incus daemon: the local unix socket here. The SSH key that reaches the spire node
# comes from SSH_PRIVATE_KEY_FILE, per run: never from the configuration or the state.
provider "fediversity" {}

module "group" {
  source = "github.com/fediversity/terraform-provider-fediversity//modules/tf-incus?ref=main"

  method          = "tf-incus-operator"
  submission_file = "${path.root}/submission.json"
  baked_json      = file("${path.root}/baked.json")
  operator_root   = path.root

  image = "nixos/25.05"
  nodes = {
    web01 = {}
    web02 = {}
    db01  = {}
  }
  build = { file = "${path.root}/nodes.nix", attribute = "system" }

  # Each node is registered on the SPIRE server before its deploy: its host entry, and a
  # one-time join token (valid for token_ttl: it must outlast the node's build, copy and
  # switch) and the trust bundle written into the container.
  spire = {
    group      = "social"
    spire_node = { host = "spire.example.org", host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILEN8KFBXA4iE2RNE1fM4+7VYlxLY6cu3eE3UXD8qenv" }
    token_ttl  = "30m"
  }

  # The units that bring a node's secrets up, in order: the verdict-only pass waits for
  # them and names the one that fails or stops making progress.
  secret_chain = ["spire-agent.service", "fediversity-secrets.service"]
  timings      = { settle = "5s", watch = "10s", node_wait = "2m", chain_wait = "5m", no_progress = "1m" }

  # The DNS lane: per node, its public addresses, as the operator's address management
  # (e.g. NetBox) hands them out. They are no part of a node plan. The module outputs
  # one record per address of each enabled node, named <node>.<domain>, with the
  # submission's domain.
  addresses = {
    web01 = ["203.0.113.10", "2001:db8::10"]
    web02 = ["203.0.113.11"]
    db01  = ["203.0.113.12"]
  }
}

output "summary" {
  value = module.group.summary
}

# Creating the records is the job of the operator's DNS provider, one record set per
# name and type. With hashicorp/dns (RFC 2136 updates to the zone of the domain), e.g.:
#
#   resource "dns_a_record_set" "node" {
#     for_each  = { for r in module.group.dns_records : r.node => r.value... if r.type == "A" }
#     zone      = "${module.group.domain}."
#     name      = each.key
#     addresses = each.value
#   }
#
# and dns_aaaa_record_set the same way for type "AAAA". It is a comment here because
# the examples are validated offline, where no provider but this one can be installed.

output "dns_records" {
  value = module.group.dns_records
}

output "domain" {
  value = module.group.domain
}
