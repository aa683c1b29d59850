terraform {
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}

provider "fediversity" {
  k8s_namespace = "tenant-a"
}

module "group" {
  source = "github.com/fediversity/terraform-provider-fediversity//modules/k8s?ref=main"

  method          = "k8s-operator"
  submission_file = "${path.root}/submission.json"
  baked_json      = file("${path.root}/baked.json")
  operator_root   = path.root

  nodes = {
    web01 = { build = { file = "${path.root}/nodes.nix", attribute = "web01" } }
    web02 = { build = { file = "${path.root}/nodes.nix", attribute = "web02" } }
  }

  # The DNS lane: per node, the addresses at which the cluster serves its pod (its load
  # balancer or ingress), as the operator's address management hands them out. They are
  # no part of a node plan. The module outputs one record per address, named
  # <node>.<domain>, with the submission's domain.
  addresses = {
    web01 = ["203.0.113.10", "2001:db8::10"]
    web02 = ["203.0.113.11"]
  }
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
