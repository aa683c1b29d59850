output "digest" {
  description = "The digest of the submission as read at plan."
  value       = data.fediversity_submission.this.digest
}

output "node_plans" {
  description = "The node plan of every enabled node."
  value       = data.fediversity_submission.this.node_plans
}

output "verdicts" {
  description = "Per enabled node: ok (converged: no reason to fail or warn), the reasons it fails (or warns), the toplevel and generation it runs, and the verdict as text."
  value = {
    for n, r in local.switches : n => {
      ok         = length(r.verdict.reasons) == 0
      reasons    = r.verdict.reasons
      toplevel   = r.toplevel
      generation = r.generation
      report     = r.verdict.report
    }
  }
}

output "summary" {
  description = "The group: nodes ok, nodes failing with their reasons (only seen in lenient mode: a strict failure fails the apply), and nodes the submission disables (no resources)."
  value = {
    ok       = sort([for n, r in local.switches : n if length(r.verdict.reasons) == 0])
    failing  = { for n, r in local.switches : n => r.verdict.reasons if length(r.verdict.reasons) > 0 }
    disabled = sort(tolist(setsubtract(keys(local.baked.nodes), data.fediversity_submission.this.enabled_nodes)))
  }
}
