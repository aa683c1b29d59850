terraform {
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}

# SSH_PRIVATE_KEY_FILE reaches the spire node; K8S_SPIRE_API_SERVER gives the API server
# address as the spire node reaches it, when it is not the server of the kubeconfig.
provider "fediversity" {
  k8s_namespace = "tenant-a"
}

# The central SPIRE server's trust bundle, read at every plan.
data "fediversity_spire_trust_bundle" "central" {
  spire_node {
    host     = "spire.central.example.org"
    host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILEN8KFBXA4iE2RNE1fM4+7VYlxLY6cu3eE3UXD8qenv"
  }
}

# The namespace's hand-off, for the nodes the submission enables: a node it turns off
# loses its entries on the server with its Deployment.
resource "fediversity_spire_handoff" "group" {
  namespace    = module.group.namespace
  nodes        = module.group.enabled_nodes
  trust_bundle = data.fediversity_spire_trust_bundle.central.pem

  spire_node {
    host     = "spire.central.example.org"
    host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILEN8KFBXA4iE2RNE1fM4+7VYlxLY6cu3eE3UXD8qenv"
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

  # Every rollout gives the node's pod the projected token of node-<node> and the
  # ConfigMap spire-agent (the bundle), and comes after the hand-off.
  spire_handoff = fediversity_spire_handoff.group.id
}

output "summary" {
  value = module.group.summary
}
