# Method `k8s`: the target namespace (fediversity_k8s_namespace), then, for every node the
# submission enables, its node image pushed to the provider's registry (fediversity_image)
# and its Deployment and state claim rolled out (fediversity_k8s_rollout). A node the
# submission turns off drops out of for_each: its Deployment and its claim are deleted
# (the claim's data with it); the image stays in the registry.

locals {
  method = var.method
  baked  = jsondecode(var.baked_json)
  digest = coalesce(var.submission_digest, data.fediversity_submission.this.digest)
  nodes  = { for n in data.fediversity_submission.this.enabled_nodes : n => var.nodes[n] }
}

data "fediversity_submission" "this" {
  submission_file = var.submission_file
  baked_json      = var.baked_json
  method          = local.method
  identity_keys   = var.identity_keys
  identity        = var.identity
  operator_root   = var.operator_root

  lifecycle {
    postcondition {
      condition     = length(setsubtract(self.enabled_nodes, keys(var.nodes))) == 0
      error_message = "The submission enables nodes that var.nodes does not list: ${join(", ", setsubtract(self.enabled_nodes, keys(var.nodes)))}. Add each node's image to var.nodes."
    }
  }
}

resource "fediversity_k8s_namespace" "this" {
  app           = var.app
  runtime_class = var.runtime_class
}

resource "fediversity_image" "node" {
  for_each = local.nodes

  namespace = fediversity_k8s_namespace.this.name
  node      = each.key
  toplevel  = each.value.toplevel
  archive   = each.value.archive
  tag       = each.value.tag
  node_plan = each.value.build != null ? data.fediversity_submission.this.node_plans[each.key] : null

  dynamic "build" {
    for_each = each.value.build != null ? [each.value.build] : []
    content {
      flake       = build.value.flake
      installable = build.value.installable
      file        = build.value.file
      attribute   = build.value.attribute
      expression  = build.value.expression
      args        = build.value.args
    }
  }

  submission_digest = local.digest
  submission_file   = var.submission_file

  # A new toplevel replaces the push. The new image is pushed first: a push refused at
  # apply (a changed submission) then leaves the old one in the state, and the node's
  # rollout keeps its image.
  lifecycle {
    create_before_destroy = true
  }
}

resource "fediversity_k8s_rollout" "node" {
  for_each = local.nodes

  namespace     = fediversity_k8s_namespace.this.name
  node          = each.key
  image_ref     = fediversity_image.node[each.key].image_ref
  runtime_class = fediversity_k8s_namespace.this.runtime_class
  storage_class = var.storage_class
  storage_size  = each.value.storage_size != null ? each.value.storage_size : var.storage_size
  spire_handoff = var.spire_handoff

  submission_digest = local.digest
  submission_file   = var.submission_file

  timings {
    rollout_wait = var.timings.rollout_wait
    pull_grace   = var.timings.pull_grace
  }
}

# The DNS lane (docs/design.md, "The DNS lane"): the domain and the records a DNS
# provider needs.
module "dns" {
  source        = "../dns-records"
  merged        = data.fediversity_submission.this.merged
  enabled_nodes = data.fediversity_submission.this.enabled_nodes
  baked_nodes   = keys(local.baked.nodes)
  addresses     = var.addresses
}
