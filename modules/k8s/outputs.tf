output "enabled_nodes" {
  description = "The nodes the submission enables (known at plan). Method k8s-operator: the `nodes` of the namespace's fediversity_spire_handoff, so that a node the submission turns off loses its SPIRE entries with its Deployment."
  value       = data.fediversity_submission.this.enabled_nodes
}

output "namespace" {
  description = "The target namespace."
  value       = fediversity_k8s_namespace.this.name
}

output "verdicts" {
  description = "Per enabled node rolled out (every wave the apply reached): ok (its pod became ready on the configured image), the rollout status (ready, not_ready, rolled_back, failed), the image it runs and its machine ID."
  value       = local.verdicts
}
