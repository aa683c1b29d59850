output "instances" {
  description = "Per enabled node: the Incus instance and project it runs in."
  value       = local.target
}

output "verdicts" {
  description = "Per enabled node deployed (every wave the apply reached): ok (deploy and verdict-only pass both converged), the reasons of each, the toplevel and generation it runs, and both verdicts as text."
  value       = local.verdicts
}
