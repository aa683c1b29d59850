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

# The rollout (docs/design.md#staged-rollouts): the enabled nodes laid out in waves, by
# name, with the rules of the fediversity command's rollout: a canary of the first
# var.canary nodes, then waves of var.wave_size (a count, or a percentage of the group
# rounded up), or the explicit var.waves. Unstaged (the default): one wave of every node.
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
  defaults = {
    build        = var.build
    deploy       = var.deploy
    strict       = var.strict
    activation   = var.activation
    secret_chain = var.secret_chain
    loop_budgets = var.loop_budgets
    timings      = var.timings
  }
  # Every node's fediversity_node_switch, whichever wave it is in.
  switches = merge(module.wave_1.switches, module.wave_2.switches, module.wave_3.switches, module.wave_4.switches)
}

# What a gate reads of a wave's verdicts; one local per wave, since a local that named
# a later wave would make the gate before it wait for that wave (a cycle).
locals {
  verdicts_1 = { for n, s in module.wave_1.switches : n => { ok = length(s.verdict.reasons) == 0, reasons = s.verdict.reasons } }
  verdicts_2 = { for n, s in module.wave_2.switches : n => { ok = length(s.verdict.reasons) == 0, reasons = s.verdict.reasons } }
  verdicts_3 = { for n, s in module.wave_3.switches : n => { ok = length(s.verdict.reasons) == 0, reasons = s.verdict.reasons } }
}

# Today's single block of nodes is the first wave: a state from before rollouts keeps
# every node, and an unstaged group (every node in wave 1) plans no change.
moved {
  from = fediversity_node_switch.node
  to   = module.wave_1.fediversity_node_switch.node
}

module "wave_1" {
  source            = "./wave"
  nodes             = local.wave_nodes[0]
  node_plans        = data.fediversity_submission.this.node_plans
  submission_file   = var.submission_file
  submission_digest = local.digest
  defaults          = local.defaults
}

# A gate between two waves: past the failure budget its apply fails, naming each failed
# node and why, and Terraform applies none of the waves behind it (their nodes are not
# touched). It judges the verdicts of every wave before it.
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
      error_message = "The rollout has ${length(local.waves)} waves; modules/tf runs at most 4 (a canary and 3 waves). Raise wave_size or give fewer var.waves."
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
  defaults          = local.defaults
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
  defaults          = local.defaults
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
  defaults          = local.defaults
}
