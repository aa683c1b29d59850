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
  # The DNS lane: the group's domain (every node plan carries it) and, per enabled node,
  # one record per address the operator gives (var.addresses), in the address's
  # canonical form (cidrhost of its single-address prefix). The dns_records output's
  # preconditions refuse what cannot make a record.
  domain = try(tostring(jsondecode(data.fediversity_submission.this.merged).domain), null)
  ip_canonical = { for a in distinct(flatten(values(var.addresses))) :
    a => try(cidrhost("${a}/${length(regexall(":", a)) > 0 ? 128 : 32}", 0), null)
  }
  not_ip = flatten([for n, addrs in var.addresses : [for a in addrs : "${n}: ${jsonencode(a)}" if local.ip_canonical[a] == null]])
  dns_records = flatten([
    for n in data.fediversity_submission.this.enabled_nodes : [
      for a in lookup(var.addresses, n, []) : {
        node  = n
        name  = local.domain == null ? null : "${n}.${local.domain}"
        type  = length(regexall(":", a)) > 0 ? "AAAA" : "A"
        value = local.ip_canonical[a]
      }
    ]
  ])
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
