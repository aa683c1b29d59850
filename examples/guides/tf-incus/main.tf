terraform {
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}

# The Incus daemon: the local unix socket here (INCUS_SOCKET, else
# /var/lib/incus/unix.socket); see the provider's incus block for HTTPS.
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
  description = "The Nix file whose attribute `system` builds a node's system from its node plan (handed as --argstr planFile). A container is made from an image of its node's system, so the system must boot as a container's /sbin/init (a NixOS system with boot.isContainer)."
  type        = string
  default     = "nodes.nix"
}

variable "project" {
  description = "The Incus project the module makes web01's and web02's containers (and their images and data volumes) in. It must exist, with the profiles web02 names; `default` is every daemon's own."
  type        = string
  default     = "default"
}

variable "db01_instance" {
  description = "db01's Incus instance, made elsewhere (e.g. by another Incus provider): its name and project. The module deploys to it and judges it, and neither makes nor deletes it."
  type        = object({ name = string, project = string })
  default     = { name = "db01", project = "tenant-a" }
}

module "group" {
  source = "github.com/fediversity/terraform-provider-fediversity//modules/tf-incus?ref=main"

  # What the api wrote, and the configuration it is merged into.
  submission_file = var.submission_file
  baked_json      = file(var.baked_file)
  operator_root   = path.root

  # The containers this module makes, and one instance made elsewhere, which it only
  # deploys to. No image is named: each container is made from an image of its node's
  # own system (built from `build` below), which the module imports into the daemon.
  nodes = {
    web01 = {
      project = var.project
      limits  = { cpu = "2", memory = "2GiB" }
      # Each container gets a data volume (web01-data at /var/lib/fediversity) by
      # default, so its data is in its snapshot sets; here it gets a quota.
      data_volume = { size = "20GiB" }
    }
    web02 = {
      project  = var.project
      profiles = ["default", "fediversity"]
    }
    db01 = {
      instance = var.db01_instance.name
      project  = var.db01_instance.project
    }
  }

  # How each node's system is built: nodes.nix takes the node plan as planFile.
  build         = { file = var.nodes_nix, attribute = "system" }
  snapshot_keep = 3
  timings       = { settle = "5s", watch = "10s", node_wait = "2m", verdict_watch = "5s" }

  # A staged rollout: the canary (db01, the first by name) first. If it fails, the
  # rollout halts after it: web01 and web02 are not copied to or switched.
  canary         = 1
  failure_budget = "0"
}

output "summary" {
  value = module.group.summary
}

output "verdicts" {
  value = { for n, v in module.group.verdicts : n => v.ok }
}
