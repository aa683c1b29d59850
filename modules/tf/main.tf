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
  strict            = coalesce(each.value.strict, var.strict)
  activation        = coalesce(each.value.activation, var.activation)
  secret_chain      = each.value.secret_chain != null ? each.value.secret_chain : var.secret_chain
  loop_budgets      = each.value.loop_budgets != null ? each.value.loop_budgets : var.loop_budgets

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
      sudo                     = ssh.value.sudo
      host_key                 = ssh.value.host_key
      known_hosts_file         = ssh.value.known_hosts_file
      insecure_ignore_host_key = ssh.value.insecure_ignore_host_key
      keepalive                = ssh.value.keepalive
      revert_on_lockout        = ssh.value.revert_on_lockout

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
      remote   = incus.value.remote
    }
  }

  dynamic "snapshot" {
    for_each = each.value.snapshot == null ? [] : [each.value.snapshot]
    content {
      enabled = snapshot.value.enabled
      keep    = snapshot.value.keep
    }
  }

  dynamic "check" {
    for_each = each.value.checks
    content {
      name        = check.value.name
      argv        = check.value.argv
      expect_exit = check.value.expect_exit
      interval    = check.value.interval
      timeout     = check.value.timeout
    }
  }

  dynamic "probe" {
    for_each = each.value.probes
    content {
      name          = probe.value.name
      url           = probe.value.url
      tcp           = probe.value.tcp
      expect_status = probe.value.expect_status
      body_regexp   = probe.value.body_regexp
      insecure      = probe.value.insecure
      interval      = probe.value.interval
      timeout       = probe.value.timeout
    }
  }

  # The node's own timings (the roster's per-node `timings`) over var.timings.
  timings {
    node_wait       = try(each.value.timings["node_wait"], var.timings.node_wait)
    switch_timeout  = try(each.value.timings["switch_timeout"], var.timings.switch_timeout)
    settle          = try(each.value.timings["settle"], var.timings.settle)
    watch           = try(each.value.timings["watch"], var.timings.watch)
    sample_interval = try(each.value.timings["sample_interval"], var.timings.sample_interval)
    stale_job       = try(each.value.timings["stale_job"], var.timings.stale_job)
    chain_wait      = try(each.value.timings["chain_wait"], var.timings.chain_wait)
    no_progress     = try(each.value.timings["no_progress"], var.timings.no_progress)
    confirm_timeout = try(each.value.timings["confirm_timeout"], var.timings.confirm_timeout)
    lock_wait       = try(each.value.timings["lock_wait"], var.timings.lock_wait)
  }
}
