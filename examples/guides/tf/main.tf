terraform {
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}

# The SSH key comes from SSH_PRIVATE_KEY_FILE or SSH_AUTH_SOCK, never from here.
provider "fediversity" {}

# The operator's own files (set them in terraform.tfvars; paths are taken from the
# working directory).
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

variable "roster_file" {
  description = "The roster: how to reach each node (host, port, user, a pinned host_key or known_hosts_file). The fediversity command reads the same file."
  type        = string
  default     = "roster.json"
}

variable "nodes_nix" {
  description = "The Nix file whose attribute `system` builds a node's system from its node plan (handed as --argstr planFile)."
  type        = string
  default     = "nodes.nix"
}

module "group" {
  source = "github.com/fediversity/terraform-provider-fediversity//modules/tf?ref=main"

  # What the api wrote, and the configuration it is merged into.
  submission_file = var.submission_file
  baked_json      = file(var.baked_file)
  operator_root   = path.root

  # How to reach each node (the fediversity command's roster file fits as it is).
  nodes = jsondecode(file(var.roster_file)).nodes

  # How each node's system is built: nodes.nix takes the node plan as planFile.
  build = { file = var.nodes_nix, attribute = "system" }

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
