terraform {
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}

# The Incus daemon: the local unix socket here (INCUS_SOCKET, else
# /var/lib/incus/unix.socket). The SSH key that reaches the spire node comes from
# SSH_PRIVATE_KEY_FILE, per run: never from the configuration or the state.
provider "fediversity" {}

# The operator's own files and names (set them in terraform.tfvars; paths are taken
# from the working directory).
variable "submission_file" {
  description = "The submission the api writes: which applications are on, with their settings."
  type        = string
  default     = "submission.json"
}

variable "baked_file" {
  description = "The baked configuration the submission is merged into: the nodes, their applications and the defaults."
  type        = string
  default     = "baked.json"
}

variable "nodes_nix" {
  description = "The Nix file whose attribute `system` builds a node's system from its node plan (handed as --argstr planFile): a system whose SPIRE agent attests with the join token the registration writes, and whose units bring the secrets up (secret_chain)."
  type        = string
  default     = "nodes.nix"
}

variable "image" {
  description = "The image the containers are made from, an alias or fingerprint on the Incus daemon (the deploy then switches each container to its node's system). Null: each container is made from an image of its own system, built by the module."
  type        = string
  default     = "nixos/25.05"
}

variable "project" {
  description = "The Incus project the module makes the containers (and their data volumes) in. It must exist, and its default profile gives each container its root disk and the way to the SPIRE server; `default` is every daemon's own."
  type        = string
  default     = "default"
}

variable "spire_node" {
  description = "The node that runs spire-server, reached over SSH with SSH_PRIVATE_KEY_FILE: its host, port (default 22) and pinned host key."
  type        = object({ host = string, port = optional(number), host_key = string })
  default     = { host = "spire.example.org", host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILEN8KFBXA4iE2RNE1fM4+7VYlxLY6cu3eE3UXD8qenv" }
}

variable "secret_chain" {
  description = "The units of the nodes' systems that bring a node's secrets up, in order: the verdict-only pass waits for them and names the one that fails or stops making progress."
  type        = list(string)
  default     = ["spire-agent.service", "fediversity-secrets.service"]
}

module "group" {
  source = "github.com/fediversity/terraform-provider-fediversity//modules/tf-incus?ref=main"

  method          = "tf-incus-operator"
  submission_file = var.submission_file
  baked_json      = file(var.baked_file)
  operator_root   = path.root

  image = var.image
  nodes = {
    web01 = { project = var.project }
    web02 = { project = var.project }
    db01  = { project = var.project }
  }
  build = { file = var.nodes_nix, attribute = "system" }

  # Each node is registered on the SPIRE server before its deploy: its host entry, and a
  # one-time join token (valid for token_ttl: it must outlast the node's build, copy and
  # switch) and the trust bundle written into the container.
  spire = {
    group      = "social"
    spire_node = var.spire_node
    token_ttl  = "30m"
  }

  secret_chain = var.secret_chain
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

output "verdicts" {
  value = { for n, v in module.group.verdicts : n => v.ok }
}

output "dns_records" {
  value = module.group.dns_records
}

output "domain" {
  value = module.group.domain
}
