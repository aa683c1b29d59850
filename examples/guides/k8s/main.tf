terraform {
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}

# What differs from one cluster to another: set them in terraform.tfvars.
variable "namespace" {
  description = "The namespace the group runs in. The apply makes it; a destroy deletes it, with everything in it."
  type        = string
  default     = "tenant-a"
}

variable "runtime_class" {
  description = "The cluster's RuntimeClass that runs a node's systemd as PID 1 (checked at every plan)."
  type        = string
  default     = "fediversity"
}

variable "storage_class" {
  description = "The cluster's StorageClass of each node's state claim; one with a provisioner, which makes a volume for each claim."
  type        = string
  default     = "local-path"
}

# Cluster and registry: kube_config_path or KUBE_CONFIG_PATH, k8s_registry or
# K8S_REGISTRY, registry credentials from REGISTRY_AUTH_FILE. None of them is stored.
provider "fediversity" {
  k8s_namespace = var.namespace
}

module "group" {
  source = "github.com/fediversity/terraform-provider-fediversity//modules/k8s?ref=main"

  submission_file = "${path.root}/submission.json"
  baked_json      = file("${path.root}/baked.json")
  operator_root   = path.root

  # Each node's system is built in the same apply, from its Nix source and its node
  # plan (handed to the build as `--argstr planFile`): the image is built from the
  # toplevel (one reproducible layer holding the closure) and tagged with the hash of its
  # derivation, so an unchanged source pushes nothing. A prebuilt system works too
  # ({ toplevel = "/nix/store/…" }), and a docker-archive ({ archive = "…", tag = "…" }).
  nodes = {
    web01 = { build = { file = "${path.root}/nodes.nix", attribute = "web01" } }
    web02 = { build = { file = "${path.root}/nodes.nix", attribute = "web02" }, storage_size = "20Gi" }
  }

  runtime_class = var.runtime_class
  storage_class = var.storage_class
  storage_size  = "10Gi"
  timings       = { rollout_wait = "5m", pull_grace = "20s" }

  # A staged rollout: the canary (web01, the first by name) first. If its pod does not
  # become ready, it goes back to its previous image and the rollout halts after it:
  # web02 gets no new image and keeps what it runs.
  canary         = 1
  failure_budget = "0"
}

output "summary" {
  value = module.group.summary
}

output "verdicts" {
  value = module.group.verdicts
}
