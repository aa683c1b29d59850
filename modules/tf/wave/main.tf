# One wave of modules/tf's group: one fediversity_node_switch per node, as the group had
# before rollouts were staged (docs/design.md#staged-rollouts). modules/tf instantiates
# it once per wave, each wave after the first behind a fediversity_rollout_gate, because
# Terraform orders blocks and not the instances of one for_each. Not meant to be called
# on its own: its inputs are modules/tf's, already checked there.

variable "nodes" {
  description = "The wave's nodes: modules/tf's var.nodes entries of the nodes in this wave."
  type        = any
}

variable "node_plans" {
  description = "The node plan of every enabled node (fediversity_submission.node_plans)."
  type        = map(string)
}

variable "submission_file" {
  description = "modules/tf's var.submission_file."
  type        = string
}

variable "submission_digest" {
  description = "The digest every node checks at apply."
  type        = string
}

variable "defaults" {
  description = "modules/tf's group-wide settings a node entry may override: build, deploy (group-wide), strict, activation, secret_chain, loop_budgets, timings."
  type        = any
}

output "switches" {
  description = "The wave's fediversity_node_switch resources, by node."
  value       = fediversity_node_switch.node
}

resource "fediversity_node_switch" "node" {
  for_each = var.nodes

  node              = each.key
  node_plan         = var.node_plans[each.key]
  submission_digest = var.submission_digest
  submission_file   = var.submission_file
  # The last good system replaces the configured toplevel (the plan sets it).
  toplevel     = var.defaults.deploy == "last-good" ? null : each.value.toplevel
  deploy       = var.defaults.deploy
  strict       = coalesce(each.value.strict, var.defaults.strict)
  activation   = coalesce(each.value.activation, var.defaults.activation)
  secret_chain = each.value.secret_chain != null ? each.value.secret_chain : var.defaults.secret_chain
  loop_budgets = each.value.loop_budgets != null ? each.value.loop_budgets : var.defaults.loop_budgets

  dynamic "build" {
    for_each = each.value.toplevel == null ? [each.value.build != null ? each.value.build : var.defaults.build] : []
    content {
      flake       = build.value.flake
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

  # The node's own timings (the roster's per-node `timings`) over var.defaults.timings.
  timings {
    node_wait       = try(each.value.timings["node_wait"], var.defaults.timings.node_wait)
    switch_timeout  = try(each.value.timings["switch_timeout"], var.defaults.timings.switch_timeout)
    settle          = try(each.value.timings["settle"], var.defaults.timings.settle)
    watch           = try(each.value.timings["watch"], var.defaults.timings.watch)
    sample_interval = try(each.value.timings["sample_interval"], var.defaults.timings.sample_interval)
    stale_job       = try(each.value.timings["stale_job"], var.defaults.timings.stale_job)
    chain_wait      = try(each.value.timings["chain_wait"], var.defaults.timings.chain_wait)
    no_progress     = try(each.value.timings["no_progress"], var.defaults.timings.no_progress)
    confirm_timeout = try(each.value.timings["confirm_timeout"], var.defaults.timings.confirm_timeout)
    lock_wait       = try(each.value.timings["lock_wait"], var.defaults.timings.lock_wait)
  }
}
