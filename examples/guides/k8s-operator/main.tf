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

variable "spire_node" {
  description = "The machine that runs the central spire-server, reached over SSH as root: its host, its sshd's port and its host key (authorized_keys form), which is pinned."
  type = object({
    host     = string
    port     = optional(number, 22)
    host_key = string
  })
  default = {
    host     = "spire.central.example.org"
    host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILEN8KFBXA4iE2RNE1fM4+7VYlxLY6cu3eE3UXD8qenv"
  }
}

variable "runtime_class" {
  description = "The cluster's RuntimeClass that runs a node's systemd as PID 1 (checked at every plan)."
  type        = string
  default     = "fediversity"
}

variable "storage_class" {
  description = "The cluster's StorageClass of each node's state claim. null: the cluster's default class."
  type        = string
  default     = null
}

# Cluster and registry as for k8s (KUBE_CONFIG_PATH, K8S_REGISTRY, REGISTRY_AUTH_FILE);
# SSH_PRIVATE_KEY_FILE reaches the spire node; K8S_SPIRE_API_SERVER gives the API server
# address as the spire node reaches it, when it is not the server of the kubeconfig.
provider "fediversity" {
  k8s_namespace = var.namespace
}

# The central SPIRE server's trust bundle, read at every plan.
data "fediversity_spire_trust_bundle" "central" {
  spire_node {
    host     = var.spire_node.host
    port     = var.spire_node.port
    host_key = var.spire_node.host_key
  }
}

# The namespace's hand-off, for the nodes the submission enables: a node it turns off
# loses its entries on the server with its Deployment.
resource "fediversity_spire_handoff" "group" {
  namespace    = module.group.namespace
  nodes        = module.group.enabled_nodes
  trust_bundle = data.fediversity_spire_trust_bundle.central.pem

  spire_node {
    host     = var.spire_node.host
    port     = var.spire_node.port
    host_key = var.spire_node.host_key
  }
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

  runtime_class = var.runtime_class
  storage_class = var.storage_class

  # Every rollout gives the node's pod the projected token of node-<node> and the
  # ConfigMap spire-agent (the bundle), and comes after the hand-off.
  spire_handoff = fediversity_spire_handoff.group.id
}

output "summary" {
  value = module.group.summary
}

output "verdicts" {
  value = module.group.verdicts
}
