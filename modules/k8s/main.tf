# Method `k8s`: the target namespace (fediversity_k8s_namespace), then, for every node the
# submission enables, its node image pushed to the provider's registry (fediversity_image)
# and its Deployment and state claim rolled out (fediversity_k8s_rollout). A node the
# submission turns off drops out of for_each: its Deployment and its claim are deleted
# (the claim's data with it); the image stays in the registry.
#
# A rollout may be staged (docs/rollouts.md#staged-rollouts): the nodes are then rolled out
# wave by wave (modules/k8s/wave), each wave behind a fediversity_rollout_gate that
# halts the apply past the failure budget; see the comment above local.wave_entries.
#
# The parts every group module shares are in generated_*.tf (`make generate`, from the
# node spec and the timing table): the submission, var.nodes and var.timings, the staged
# rollout's waves and gates, the DNS lane and the summary. This module's own parts are
# here: the namespace, what each wave is handed, and the wave (./wave).

locals {
  method = var.method
}

resource "fediversity_k8s_namespace" "this" {
  app           = var.app
  runtime_class = var.runtime_class
}

# Each node's image and rollout are in its wave's module: a node behind a halted gate
# has no image built or pushed and no Deployment or claim. The namespace stays up
# front: it is the group's, its address must not depend on any layout, and every wave
# needs it. A node's rollout does move with its wave: changing the layout of a group
# that is already rolled out (turning a rollout on, or changing canary, wave_size or
# waves so that a node changes wave) gives the node's rollout a new address, which
# Terraform plans as a destroy (its Deployment and claim deleted) and a create; move
# each such node's state first (`terraform state mv`, docs/guides/k8s.md#staged-rollouts).
# Its image may move freely: destroying one leaves the registry as it is.
locals {
  # What a wave is handed of each of its nodes: its roster entry.
  wave_entries = local.nodes
  settings = {
    # The target namespace and its RuntimeClass.
    namespace = {
      name          = fediversity_k8s_namespace.this.name
      runtime_class = fediversity_k8s_namespace.this.runtime_class
    }
    storage_class = var.storage_class
    storage_size  = var.storage_size
    spire_handoff = var.spire_handoff
    strict        = var.strict
    deploy        = var.deploy
    timings       = var.timings
  }
}

# Today's single block of nodes is the first wave: a state from before rollouts keeps
# every node's image and rollout, and an unstaged group (every node in wave 1) plans no
# change.
moved {
  from = fediversity_image.node
  to   = module.wave_1.fediversity_image.node
}

moved {
  from = fediversity_k8s_rollout.node
  to   = module.wave_1.fediversity_k8s_rollout.node
}
