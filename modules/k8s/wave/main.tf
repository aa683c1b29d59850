# One wave of modules/k8s's group: per node, its image pushed to the provider's registry
# (fediversity_image) and its Deployment and state claim rolled out to it
# (fediversity_k8s_rollout), as the group had before rollouts were staged
# (docs/rollouts.md#staged-rollouts). modules/k8s instantiates it once per wave, each wave
# after the first behind a fediversity_rollout_gate, because Terraform orders blocks and
# not the instances of one for_each. The namespace is not here: modules/k8s makes it up
# front, for every wave. Not meant to be called on its own: its inputs are modules/k8s's,
# already checked there. Its variables are in generated_variables.tf.

output "verdicts" {
  description = "Per node of the wave: the entry of modules/k8s's verdicts output (a node is ok when its rollout ended ready)."
  value = {
    for n, r in fediversity_k8s_rollout.node : n => {
      ok                = r.status == "ready"
      reasons           = r.status == "ready" ? [] : ["rollout ${r.status}"]
      status            = r.status
      running_image_ref = r.running_image_ref
      machine_id        = r.machine_id
    }
  }
}

resource "fediversity_image" "node" {
  for_each = var.nodes

  namespace = var.settings.namespace.name
  node      = each.key
  toplevel  = each.value.toplevel
  archive   = each.value.archive
  tag       = each.value.tag
  node_plan = each.value.build != null ? var.node_plans[each.key] : null

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

  submission_digest = var.submission_digest
  submission_file   = var.submission_file

  # A new toplevel replaces the push. The new image is pushed first: a push refused at
  # apply (a changed submission) then leaves the old one in the state, and the node's
  # rollout keeps its image.
  lifecycle {
    create_before_destroy = true
  }
}

resource "fediversity_k8s_rollout" "node" {
  for_each = var.nodes

  namespace = var.settings.namespace.name
  node      = each.key
  # deploy = "last-good": the plan sets image_ref to the node's last good template's
  # image, so it must be unset here. Unset too when configured, so a state from before
  # this setting plans no change.
  image_ref     = var.settings.deploy == "last-good" ? null : fediversity_image.node[each.key].image_ref
  deploy        = var.settings.deploy == "last-good" ? "last-good" : null
  runtime_class = var.settings.namespace.runtime_class
  storage_class = var.settings.storage_class
  storage_size  = each.value.storage_size != null ? each.value.storage_size : var.settings.storage_size
  spire_handoff = var.settings.spire_handoff
  # Lenient (strict = false): a pod that does not become ready is recorded (status
  # rolled_back or failed) with a warning instead of failing the apply, so the gate
  # after this wave counts it against the failure budget. Unset when strict, so a
  # state from before this setting plans no change.
  fail_when_not_ready = var.settings.strict ? null : false

  submission_digest = var.submission_digest
  submission_file   = var.submission_file

  timings {
    rollout_wait   = var.settings.timings.rollout_wait
    pull_grace     = var.settings.timings.pull_grace
    degraded_grace = var.settings.timings.degraded_grace
    rollback_wait  = var.settings.timings.rollback_wait
  }
}
