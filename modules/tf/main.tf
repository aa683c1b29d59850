# Method `tf`: every node the submission enables is deployed with fediversity_node_switch
# over SSH (or, per node, over the provider's Incus connection). A node the submission
# turns off drops out of for_each, so its resource leaves the state; the node itself is
# not touched.

locals {
  method = "tf"
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
      error_message = "The submission enables nodes that var.nodes does not list: ${join(", ", setsubtract(self.enabled_nodes, keys(var.nodes)))}. Add how to reach and build each of them to var.nodes."
    }
  }
}

resource "fediversity_node_switch" "node" {
  for_each = local.nodes

  node              = each.key
  node_plan         = data.fediversity_submission.this.node_plans[each.key]
  submission_digest = local.digest
  submission_file   = var.submission_file
  toplevel          = each.value.toplevel
  strict            = var.strict
  secret_chain      = var.secret_chain
  loop_budgets      = var.loop_budgets

  dynamic "build" {
    for_each = each.value.toplevel == null ? [each.value.build != null ? each.value.build : var.build] : []
    content {
      installable = build.value.installable
      file        = build.value.file
      attribute   = build.value.attribute
      expression  = build.value.expression
      args        = build.value.args
    }
  }

  # The transport: SSH unless the roster entry names an Incus instance.
  dynamic "ssh" {
    for_each = each.value.incus == null ? [each.value] : []
    content {
      host                     = ssh.value.host
      port                     = ssh.value.port
      user                     = ssh.value.user
      host_key                 = ssh.value.host_key
      known_hosts_file         = ssh.value.known_hosts_file
      insecure_ignore_host_key = ssh.value.insecure_ignore_host_key

      dynamic "jump" {
        for_each = ssh.value.jump == null ? [] : [ssh.value.jump]
        content {
          host             = jump.value.host
          port             = jump.value.port
          user             = jump.value.user
          host_key         = jump.value.host_key
          known_hosts_file = jump.value.known_hosts_file
        }
      }
    }
  }

  dynamic "incus" {
    for_each = each.value.incus == null ? [] : [each.value.incus]
    content {
      instance = incus.value.instance
      project  = incus.value.project
    }
  }

  timings {
    node_wait       = var.timings.node_wait
    switch_timeout  = var.timings.switch_timeout
    settle          = var.timings.settle
    watch           = var.timings.watch
    sample_interval = var.timings.sample_interval
    stale_job       = var.timings.stale_job
    chain_wait      = var.timings.chain_wait
    no_progress     = var.timings.no_progress
  }
}
