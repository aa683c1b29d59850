# One wave of modules/tf's group: one fediversity_node_switch per node (made from the
# roster's node entry, generated_node_switch.tf), as the group had before rollouts were
# staged (docs/rollouts.md#staged-rollouts).

output "verdicts" {
  description = "Per node of the wave: the entry of modules/tf's verdicts output."
  value = {
    for n, r in fediversity_node_switch.node : n => {
      ok         = length(r.verdict.reasons) == 0
      reasons    = r.verdict.reasons
      toplevel   = r.toplevel
      generation = r.generation
      report     = r.verdict.report
    }
  }
}
