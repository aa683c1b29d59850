# One wave of modules/tf-incus's group: per node, the SPIRE registration (with
# tf-incus-operator), the deploy (fediversity_node_switch) and the verdict-only pass
# (fediversity_verdict), as the group had before rollouts were staged
# (docs/rollouts.md#staged-rollouts). modules/tf-incus instantiates it once per wave, each
# wave after the first behind a fediversity_rollout_gate, because Terraform orders blocks
# and not the instances of one for_each. The containers are not here: modules/tf-incus
# makes them up front, so that a node's container keeps its address whatever wave the
# node is in. Its variables are in generated_variables.tf.

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

locals {
  # The SPIRE lane of tf-incus-operator, or null: no registration.
  spire = var.settings.spire
}

resource "fediversity_spire_registration" "node" {
  for_each = { for n, v in var.nodes : n => v if local.spire != null }

  group        = local.spire.group
  node         = each.key
  trust_bundle = local.spire.trust_bundle
  agent_dir    = local.spire.agent_dir
  token_ttl    = local.spire.token_ttl

  spire_node {
    host     = local.spire.spire_node.host
    port     = local.spire.spire_node.port
    host_key = local.spire.spire_node.host_key
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
    confirm_timeout = var.settings.timings.confirm_timeout
    lock_wait       = var.settings.timings.lock_wait
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
    lock_wait       = var.settings.timings.lock_wait
  }
}
