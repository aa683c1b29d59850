# Method `tf`: every node the submission enables is deployed with fediversity_node_switch
# over SSH (or, per node, over the provider's Incus connection). A node the submission
# turns off drops out of for_each, so its resource leaves the state; the node itself is
# not touched.
#
# The parts every group module shares are in generated_*.tf (`make generate`, from the
# node spec and the timing table): the submission, var.nodes and var.timings, the staged
# rollout's waves and gates (docs/rollouts.md#staged-rollouts), and the summary. This
# module's own parts are here: what each wave is handed, and the wave (./wave).

locals {
  method = "tf"
  # What a wave is handed of each of its nodes: its roster entry.
  wave_entries = local.nodes
  # The group's settings a node's roster entry may override (build, strict, activation,
  # secret_chain, loop_budgets, timings); deploy is the group's alone.
  settings = {
    build        = var.build
    deploy       = var.deploy
    strict       = var.strict
    activation   = var.activation
    secret_chain = var.secret_chain
    loop_budgets = var.loop_budgets
    timings      = var.timings
  }
}

# Today's single block of nodes is the first wave: a state from before rollouts keeps
# every node, and an unstaged group (every node in wave 1) plans no change.
moved {
  from = fediversity_node_switch.node
  to   = module.wave_1.fediversity_node_switch.node
}
