# Method `tf-incus`: every node the submission enables gets its Incus container
# (fediversity_incus_node, unless the roster names an existing instance), is deployed
# through the Incus API (fediversity_node_switch), and judged again by the verdict-only
# pass (fediversity_verdict). A node the submission turns off drops out of for_each:
# its deploy and verdict leave the state, and the container this module made for it is
# deleted.
#
# A rollout may be staged (docs/design.md#staged-rollouts): the nodes are then deployed
# wave by wave, each wave behind a fediversity_rollout_gate that halts the apply past
# the failure budget. The containers are made up front, for every enabled node, and only
# the registration, deploy and verdict-only pass go in waves; see "The rollout" below.
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

data "fediversity_submission" "this" {
  submission_file = var.submission_file
  baked_json      = var.baked_json
  method          = local.method
  identity_keys   = var.identity_keys
  identity        = var.identity
  operator_root   = var.operator_root

  lifecycle {
    precondition {
      condition     = (var.method == "tf-incus-operator") == (var.spire != null)
      error_message = var.spire == null ? "method = \"tf-incus-operator\" needs var.spire (the group and the spire node that registers the nodes)." : "var.spire is set but method is \"${var.method}\": the SPIRE lane is the tf-incus-operator method's. Set method = \"tf-incus-operator\", or drop var.spire."
    }
    postcondition {
      condition     = length(setsubtract(self.enabled_nodes, keys(var.nodes))) == 0
      error_message = "The submission enables nodes that var.nodes does not list: ${join(", ", setsubtract(self.enabled_nodes, keys(var.nodes)))}. Add each of them to var.nodes (a container to create, or an existing instance)."
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

# The rollout (docs/design.md#staged-rollouts): the enabled nodes laid out in waves, by
# name, with the rules of the fediversity command's rollout: a canary of the first
# var.canary nodes, then waves of var.wave_size (a count, or a percentage of the group
# rounded up), or the explicit var.waves. Unstaged (the default): one wave of every node.
# The layout, the gates and their messages are modules/tf's: a module called by a local
# path may not reach outside its own package ("../"), so they are a copy, and a change
# to one belongs in both.
#
# Every wave's containers (fediversity_incus_node above) are made up front, before the
# first wave: a container's address must not depend on the wave its node is in, or
# turning a rollout on, or changing its layout, would move a node's container to
# another wave's module, which Terraform plans as a delete of the container (and of
# everything on it) and a new one. The container of a node in a wave behind a halted
# gate is the image as created: nothing is registered, copied or switched on it.
locals {
  names      = sort(keys(local.nodes))
  group_size = length(local.names)
  canary     = min(var.canary, local.group_size)
  rest       = slice(local.names, local.canary, local.group_size)
  wave_size = max(1, var.wave_size == null ? length(local.rest) : (
    endswith(var.wave_size, "%")
    ? ceil(tonumber(trimsuffix(var.wave_size, "%")) * local.group_size / 100)
    : tonumber(var.wave_size)
  ))
  waves = length(var.waves) > 0 ? [for w in var.waves : [for n in w : n if contains(local.names, n)]] : concat(
    local.canary > 0 ? [slice(local.names, 0, local.canary)] : [],
    [for i in range(0, length(local.rest), local.wave_size) : slice(local.rest, i, min(i + local.wave_size, length(local.rest)))],
  )
  staged = var.canary > 0 || var.wave_size != null || length(var.waves) > 0 || var.failure_budget != null
  # Per wave, its nodes' roster entries and how each is reached.
  wave_nodes = [for i in range(4) : { for n in try(local.waves[i], []) : n => merge(local.nodes[n], { target = local.target[n] }) }]
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
  }
  # The SPIRE lane every wave registers its nodes with (tf-incus-operator), its trust
  # bundle read once for the group.
  spire = local.method != "tf-incus-operator" ? null : {
    group        = var.spire.group
    spire_node   = var.spire.spire_node
    trust_bundle = coalesce(var.spire.trust_bundle, try(data.fediversity_spire_trust_bundle.this[0].pem, null))
    agent_dir    = var.spire.agent_dir
    token_ttl    = var.spire.token_ttl
  }
  # Every node's verdicts, whichever wave it is in (the verdicts output).
  verdicts = merge(module.wave_1.verdicts, module.wave_2.verdicts, module.wave_3.verdicts, module.wave_4.verdicts)
}

# What a gate reads of a wave's verdicts (the deploy's and the verdict-only pass', a
# reason both give named once in the halt message); one local per wave, since a local that named a later wave would make the gate before it
# wait for that wave (a cycle).
locals {
  verdicts_1 = { for n, v in module.wave_1.verdicts : n => { ok = v.ok, reasons = distinct(v.reasons) } }
  verdicts_2 = { for n, v in module.wave_2.verdicts : n => { ok = v.ok, reasons = distinct(v.reasons) } }
  verdicts_3 = { for n, v in module.wave_3.verdicts : n => { ok = v.ok, reasons = distinct(v.reasons) } }
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

module "wave_1" {
  source            = "./wave"
  nodes             = local.wave_nodes[0]
  node_plans        = data.fediversity_submission.this.node_plans
  submission_file   = var.submission_file
  submission_digest = local.digest
  settings          = local.settings
  spire             = local.spire
}

# A gate between two waves: past the failure budget its apply fails, naming each failed
# node and why, and Terraform applies none of the waves behind it (their nodes are not
# registered, copied to or switched). It judges the verdicts of every wave before it.
# The first gate stands whenever the rollout is staged, even after a single wave (it
# then fails the apply past the budget, as the command's rollout does), and checks the
# layout before any node is touched.
resource "fediversity_rollout_gate" "after_wave_1" {
  count          = local.staged ? 1 : 0
  wave           = 1
  waves          = max(1, length(local.waves))
  group_size     = local.group_size
  failure_budget = var.failure_budget
  verdicts       = local.verdicts_1

  lifecycle {
    precondition {
      condition     = length(local.waves) <= 4
      error_message = "The rollout has ${length(local.waves)} waves; modules/tf-incus runs at most 4 (a canary and 3 waves). Raise wave_size or give fewer var.waves."
    }
    precondition {
      condition     = length(setsubtract(flatten(var.waves), keys(var.nodes))) == 0
      error_message = "waves: ${join(", ", setsubtract(flatten(var.waves), keys(var.nodes)))}: no such node in var.nodes. Use the node names of var.nodes."
    }
    precondition {
      condition     = length(flatten(local.waves)) == length(distinct(flatten(local.waves))) && length(setsubtract(local.names, flatten(local.waves))) == 0
      error_message = "waves: every enabled node must be in exactly one wave (in no wave: ${join(", ", setsubtract(local.names, flatten(local.waves)))}; in more than one: ${join(", ", distinct([for n in flatten(local.waves) : n if length([for m in flatten(local.waves) : m if m == n]) > 1]))})."
    }
  }
}

module "wave_2" {
  source            = "./wave"
  depends_on        = [fediversity_rollout_gate.after_wave_1]
  nodes             = local.wave_nodes[1]
  node_plans        = data.fediversity_submission.this.node_plans
  submission_file   = var.submission_file
  submission_digest = local.digest
  settings          = local.settings
  spire             = local.spire
}

resource "fediversity_rollout_gate" "after_wave_2" {
  count          = length(local.waves) > 2 ? 1 : 0
  wave           = 2
  waves          = length(local.waves)
  group_size     = local.group_size
  failure_budget = var.failure_budget
  verdicts       = merge(local.verdicts_1, local.verdicts_2)
}

module "wave_3" {
  source            = "./wave"
  depends_on        = [fediversity_rollout_gate.after_wave_2]
  nodes             = local.wave_nodes[2]
  node_plans        = data.fediversity_submission.this.node_plans
  submission_file   = var.submission_file
  submission_digest = local.digest
  settings          = local.settings
  spire             = local.spire
}

resource "fediversity_rollout_gate" "after_wave_3" {
  count          = length(local.waves) > 3 ? 1 : 0
  wave           = 3
  waves          = length(local.waves)
  group_size     = local.group_size
  failure_budget = var.failure_budget
  verdicts       = merge(local.verdicts_1, local.verdicts_2, local.verdicts_3)
}

module "wave_4" {
  source            = "./wave"
  depends_on        = [fediversity_rollout_gate.after_wave_3]
  nodes             = local.wave_nodes[3]
  node_plans        = data.fediversity_submission.this.node_plans
  submission_file   = var.submission_file
  submission_digest = local.digest
  settings          = local.settings
  spire             = local.spire
}
