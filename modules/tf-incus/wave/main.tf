# One wave of modules/tf-incus's group: per node, the SPIRE registration (with
# tf-incus-operator), the deploy (fediversity_node_switch) and the verdict-only pass
# (fediversity_verdict), as the group had before rollouts were staged
# (docs/design.md#staged-rollouts). modules/tf-incus instantiates it once per wave, each
# wave after the first behind a fediversity_rollout_gate, because Terraform orders blocks
# and not the instances of one for_each. The containers are not here: modules/tf-incus
# makes them up front, so that a node's container keeps its address whatever wave the
# node is in. Not meant to be called on its own: its inputs are modules/tf-incus's,
# already checked there.
#
# modules/tf/wave holds the same idea for the tf method; nothing is shared, because a
# module called by a local path may not reach outside its own package ("../").

variable "nodes" {
  description = "The wave's nodes: modules/tf-incus's var.nodes entries of the nodes in this wave, each with `target` (the Incus instance and project it is reached at)."
  type        = any
}

variable "node_plans" {
  description = "The node plan of every enabled node (fediversity_submission.node_plans)."
  type        = map(string)
}

variable "submission_file" {
  description = "modules/tf-incus's var.submission_file."
  type        = string
}

variable "submission_digest" {
  description = "The digest every node checks at apply."
  type        = string
}

variable "settings" {
  description = "modules/tf-incus's group-wide settings: build, deploy, strict, activation, secret_chain, loop_budgets, snapshot_keep, interrupted_restore, timings."
  type        = any
}

variable "spire" {
  description = "The SPIRE lane of tf-incus-operator (modules/tf-incus's var.spire, its trust bundle resolved), or null: no registration."
  type        = any
  default     = null
}

output "verdicts" {
  description = "Per node of the wave: the entry of modules/tf-incus's verdicts output."
  value = {
    for n, r in fediversity_node_switch.node : n => {
      ok           = length(r.verdict.reasons) == 0 && length(fediversity_verdict.node[n].verdict.reasons) == 0
      reasons      = concat(r.verdict.reasons, fediversity_verdict.node[n].verdict.reasons)
      toplevel     = r.toplevel
      generation   = r.generation
      report       = r.verdict.report
      verdict_only = fediversity_verdict.node[n].verdict.report
    }
  }
}

resource "fediversity_spire_registration" "node" {
  for_each = { for n, v in var.nodes : n => v if var.spire != null }

  group        = var.spire.group
  node         = each.key
  trust_bundle = var.spire.trust_bundle
  agent_dir    = var.spire.agent_dir
  token_ttl    = var.spire.token_ttl

  spire_node {
    host     = var.spire.spire_node.host
    port     = var.spire.spire_node.port
    host_key = var.spire.spire_node.host_key
  }

  incus {
    instance = each.value.target.instance
    project  = each.value.target.project
  }
}

resource "fediversity_node_switch" "node" {
  for_each = var.nodes

  # tf-incus-operator: each node's token and trust bundle are on it before its new
  # system starts its agent (no registration with tf-incus).
  depends_on = [fediversity_spire_registration.node]

  node              = each.key
  node_plan         = var.node_plans[each.key]
  submission_digest = var.submission_digest
  submission_file   = var.submission_file
  # The last good system replaces the configured toplevel (the plan sets it).
  toplevel     = var.settings.deploy == "last-good" ? null : each.value.toplevel
  deploy       = var.settings.deploy
  strict       = var.settings.strict
  activation   = var.settings.activation
  secret_chain = var.settings.secret_chain
  loop_budgets = var.settings.loop_budgets

  dynamic "build" {
    for_each = each.value.toplevel == null ? [each.value.build != null ? each.value.build : var.settings.build] : []
    content {
      flake       = build.value.flake
      installable = build.value.installable
      file        = build.value.file
      attribute   = build.value.attribute
      expression  = build.value.expression
      args        = build.value.args
    }
  }

  incus {
    instance = each.value.target.instance
    project  = each.value.target.project
  }

  dynamic "snapshot" {
    for_each = var.settings.snapshot_keep > 0 ? [var.settings.snapshot_keep] : []
    content {
      keep                = snapshot.value
      interrupted_restore = var.settings.interrupted_restore
    }
  }

  timings {
    node_wait       = var.settings.timings.node_wait
    switch_timeout  = var.settings.timings.switch_timeout
    settle          = var.settings.timings.settle
    watch           = var.settings.timings.watch
    sample_interval = var.settings.timings.sample_interval
    stale_job       = var.settings.timings.stale_job
    chain_wait      = var.settings.timings.chain_wait
    no_progress     = var.settings.timings.no_progress
  }
}

# The verdict-only pass after the deploy: it runs again whenever the node gets a new
# generation or a new node plan, and judges the toplevel the deploy put in place.
resource "fediversity_verdict" "node" {
  for_each = var.nodes

  node              = fediversity_node_switch.node[each.key].node
  toplevel          = fediversity_node_switch.node[each.key].toplevel
  submission_digest = var.submission_digest
  submission_file   = var.submission_file
  strict            = var.settings.strict
  secret_chain      = var.settings.secret_chain
  loop_budgets      = var.settings.loop_budgets

  incus {
    instance = each.value.target.instance
    project  = each.value.target.project
  }

  # The node plan's hash is known at plan: when it changes, the plan shows the pass
  # running again, with the new submission digest, even before the new generation is
  # known.
  triggers = {
    generation = tostring(fediversity_node_switch.node[each.key].generation)
    node_plan  = sha256(var.node_plans[each.key])
  }

  timings {
    node_wait       = var.settings.timings.node_wait
    settle          = var.settings.timings.verdict_settle != null ? var.settings.timings.verdict_settle : var.settings.timings.settle
    watch           = var.settings.timings.verdict_watch != null ? var.settings.timings.verdict_watch : var.settings.timings.watch
    sample_interval = var.settings.timings.sample_interval
    stale_job       = var.settings.timings.stale_job
    chain_wait      = var.settings.timings.chain_wait
    no_progress     = var.settings.timings.no_progress
  }
}
