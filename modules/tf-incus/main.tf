# Method `tf-incus`: every node the submission enables gets its Incus container
# (fediversity_incus_node, unless the roster names an existing instance), is deployed
# through the Incus API (fediversity_node_switch), and judged again by the verdict-only
# pass (fediversity_verdict). A node the submission turns off drops out of for_each:
# its deploy and verdict leave the state, and the container this module made for it is
# deleted.
#
# A rollout may be staged (docs/rollouts.md#staged-rollouts): the nodes are then deployed
# wave by wave, each wave behind a fediversity_rollout_gate that halts the apply past
# the failure budget. The containers are made up front, for every enabled node, and only
# the registration, deploy and verdict-only pass go in waves (see local.wave_entries below).
#
# Method `tf-incus-operator` adds the SPIRE lane: each enabled node is registered on
# the SPIRE server (fediversity_spire_registration: its host entry, and a one-time join
# token and the trust bundle written into the container) after its container exists
# and before its deploy, so the agent of the new system finds its token when the switch
# starts it, and the verdict-only pass, which follows the deploy, judges the secret
# chain of a node whose agent could attest. The token is minted as late as that order
# allows: right before the node's deploy (its build, copy and switch), which
# `spire.token_ttl` must cover. A node the submission turns off loses its entries and
# its agent is evicted.
#
# The parts every group module shares are in generated_*.tf (`make generate`, from the
# node spec and the timing table): the submission, var.nodes and var.timings, the staged
# rollout's waves and gates, the DNS lane and the summary. This module's own parts are
# here: the containers, the SPIRE lane, what each wave is handed, and the wave (./wave).

locals {
  method = var.method
  # Settings that do not go together, refused before the submission is read.
  setting_problems = (var.method == "tf-incus-operator") == (var.spire != null) ? [] : [
    var.spire == null ? "method = \"tf-incus-operator\" needs var.spire (the group and the spire node that registers the nodes)." : "var.spire is set but method is \"${var.method}\": the SPIRE lane is the tf-incus-operator method's. Set method = \"tf-incus-operator\", or drop var.spire."
  ]
  # Nodes whose container this module makes.
  containers = { for n, v in local.nodes : n => v if v.instance == null }
  # How each node is reached: the container made here, or the existing instance.
  target = {
    for n, v in local.nodes : n => {
      instance = try(fediversity_incus_node.node[n].instance, v.instance)
      project  = try(fediversity_incus_node.node[n].project, v.project)
    }
  }
}

data "fediversity_spire_trust_bundle" "this" {
  count = local.method == "tf-incus-operator" && try(var.spire.trust_bundle, null) == null ? 1 : 0

  spire_node {
    host     = var.spire.spire_node.host
    port     = var.spire.spire_node.port
    host_key = var.spire.spire_node.host_key
  }
}

resource "fediversity_incus_node" "node" {
  for_each = local.containers

  name  = coalesce(each.value.container, each.key)
  image = try(coalesce(each.value.image, var.image), fediversity_incus_image.node[each.key].fingerprint)
  # An image of the node's own system only seeds its container (image.tf).
  replace_on_image_change = !contains(keys(local.built_images), each.key)
  project                 = local.container_project[each.key]
  profiles                = each.value.profiles
  config                  = each.value.config
  limits                  = each.value.limits
  node_wait               = var.timings.node_wait

  dynamic "device" {
    for_each = each.value.devices
    content {
      name       = device.value.name
      type       = device.value.type
      properties = device.value.properties
    }
  }

  # The node's data on a custom volume of its own (by default), so that it is in the
  # node's snapshot sets; a host path disk is in none.
  dynamic "data_volume" {
    for_each = each.value.data_volume.enabled ? [each.value.data_volume] : []
    content {
      path              = data_volume.value.path
      pool              = data_volume.value.pool
      size              = data_volume.value.size
      delete_on_destroy = data_volume.value.delete_on_destroy
    }
  }
}

# The rollout's waves (generated_waves.tf) deploy the nodes; every wave's containers
# (fediversity_incus_node above) are made up front, before the first wave: a
# container's address must not depend on the wave its node is in, or turning a rollout
# on, or changing its layout, would move a node's container to another wave's module,
# which Terraform plans as a delete of the container (and of everything on it) and a new
# one. The container of a node in a wave behind a halted gate is the image as created:
# nothing is registered, copied or switched on it.
locals {
  # What a wave is handed of each of its nodes: its roster entry and how it is reached.
  wave_entries = { for n, v in local.nodes : n => merge(v, { target = local.target[n] }) }
  settings = {
    build         = var.build
    deploy        = var.deploy
    strict        = var.strict
    activation    = var.activation
    secret_chain  = var.secret_chain
    loop_budgets  = var.loop_budgets
    snapshot_keep = var.snapshot_keep
    # What a deploy does with an earlier run's cut-off restore.
    interrupted_restore = var.interrupted_restore
    timings             = var.timings
    # The SPIRE lane every wave registers its nodes with (tf-incus-operator), its trust
    # bundle read once for the group; null: no registration.
    spire = local.method != "tf-incus-operator" ? null : {
      group        = var.spire.group
      spire_node   = var.spire.spire_node
      trust_bundle = coalesce(var.spire.trust_bundle, try(data.fediversity_spire_trust_bundle.this[0].pem, null))
      agent_dir    = var.spire.agent_dir
      token_ttl    = var.spire.token_ttl
    }
  }
}

# Today's single block of nodes is the first wave: a state from before rollouts keeps
# every node's registration, deploy and verdict, and an unstaged group (every node in
# wave 1) plans no change.
moved {
  from = fediversity_spire_registration.node
  to   = module.wave_1.fediversity_spire_registration.node
}

moved {
  from = fediversity_node_switch.node
  to   = module.wave_1.fediversity_node_switch.node
}

moved {
  from = fediversity_verdict.node
  to   = module.wave_1.fediversity_verdict.node
}
