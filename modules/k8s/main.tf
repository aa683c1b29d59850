# Method `k8s`: the target namespace (fediversity_k8s_namespace), then, for every node the
# submission enables, its node image pushed to the provider's registry (fediversity_image)
# and its Deployment and state claim rolled out (fediversity_k8s_rollout). A node the
# submission turns off drops out of for_each: its Deployment and its claim are deleted
# (the claim's data with it); the image stays in the registry.
#
# A rollout may be staged (docs/design.md#staged-rollouts): the nodes are then rolled out
# wave by wave (modules/k8s/wave), each wave behind a fediversity_rollout_gate that
# halts the apply past the failure budget; see "The rollout" below.

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

# The rollout (docs/design.md#staged-rollouts): the enabled nodes laid out in waves, by
# name, with the rules of the fediversity command's rollout: a canary of the first
# var.canary nodes, then waves of var.wave_size (a count, or a percentage of the group
# rounded up), or the explicit var.waves. Unstaged (the default): one wave of every node.
# The layout, the gates and their messages are modules/tf's: a module called by a local
# path may not reach outside its own package ("../"), so they are a copy, and a change
# to one belongs in both.
#
# Each node's image and rollout are in its wave's module: a node behind a halted gate
# has no image built or pushed and no Deployment or claim. The namespace stays up
# front: it is the group's, its address must not depend on any layout, and every wave
# needs it. A node's rollout does move with its wave: changing the layout of a group
# that is already rolled out (turning a rollout on, or changing canary, wave_size or
# waves so that a node changes wave) gives the node's rollout a new address, which
# Terraform plans as a destroy (its Deployment and claim deleted) and a create; move
# each such node's state first (`terraform state mv`, docs/guides/k8s.md#staged-rollouts).
# Its image may move freely: destroying one leaves the registry as it is.
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
  staged     = var.canary > 0 || var.wave_size != null || length(var.waves) > 0 || var.failure_budget != null
  wave_nodes = [for i in range(4) : { for n in try(local.waves[i], []) : n => local.nodes[n] }]
  namespace = {
    name          = fediversity_k8s_namespace.this.name
    runtime_class = fediversity_k8s_namespace.this.runtime_class
  }
  settings = {
    storage_class = var.storage_class
    storage_size  = var.storage_size
    spire_handoff = var.spire_handoff
    strict        = var.strict
    deploy        = var.deploy
    timings       = var.timings
  }
  # Every node's rollout, whichever wave it is in (the verdicts and summary outputs).
  rollouts = merge(module.wave_1.rollouts, module.wave_2.rollouts, module.wave_3.rollouts, module.wave_4.rollouts)
}

# What a gate reads of a wave's rollouts: a node counts failed when its rollout did not
# end ready (rolled back, failed, not ready), the status its reason. One local per wave,
# since a local that named a later wave would make the gate before it wait for that
# wave (a cycle).
locals {
  verdicts_1 = { for n, r in module.wave_1.rollouts : n => { ok = r.status == "ready", reasons = r.status == "ready" ? [] : ["rollout ${r.status}"] } }
  verdicts_2 = { for n, r in module.wave_2.rollouts : n => { ok = r.status == "ready", reasons = r.status == "ready" ? [] : ["rollout ${r.status}"] } }
  verdicts_3 = { for n, r in module.wave_3.rollouts : n => { ok = r.status == "ready", reasons = r.status == "ready" ? [] : ["rollout ${r.status}"] } }
}

# Today's single block of nodes is the first wave: a state from before rollouts keeps
# every node's image and rollout, and an unstaged group (every node in wave 1) plans no
# change.
moved {
  from = fediversity_image.node
  to   = module.wave_1.fediversity_image.node
}

moved {
  from = fediversity_k8s_rollout.node
  to   = module.wave_1.fediversity_k8s_rollout.node
}

module "wave_1" {
  source            = "./wave"
  nodes             = local.wave_nodes[0]
  node_plans        = data.fediversity_submission.this.node_plans
  submission_file   = var.submission_file
  submission_digest = local.digest
  namespace         = local.namespace
  settings          = local.settings
}

# A gate between two waves: past the failure budget its apply fails, naming each failed
# node and why, and Terraform applies none of the waves behind it (no image pushed, no
# Deployment or claim made or changed). It judges the rollouts of every wave before it.
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
      error_message = "The rollout has ${length(local.waves)} waves; modules/k8s runs at most 4 (a canary and 3 waves). Raise wave_size or give fewer var.waves."
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
  namespace         = local.namespace
  settings          = local.settings
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
  namespace         = local.namespace
  settings          = local.settings
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
  namespace         = local.namespace
  settings          = local.settings
}
