output "verdicts" {
  description = "Per enabled node deployed (every wave the apply reached): ok (converged: no reason to fail or warn), the reasons it fails (or warns), the toplevel and generation it runs, and the verdict as text."
  value       = local.verdicts
}
