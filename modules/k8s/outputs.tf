output "digest" {
  description = "The digest of the submission as read at plan."
  value       = data.fediversity_submission.this.digest
}

output "node_plans" {
  description = "The node plan of every enabled node: what each node's image is built from."
  value       = data.fediversity_submission.this.node_plans
}

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
  value = {
    for n, r in local.rollouts : n => {
      ok                = r.status == "ready"
      reasons           = r.status == "ready" ? [] : ["rollout ${r.status}"]
      status            = r.status
      running_image_ref = r.running_image_ref
      machine_id        = r.machine_id
    }
  }
}

output "summary" {
  description = "The group: nodes ok, nodes failing with their rollout status (only seen with strict = false: a strict failure fails the apply), and nodes the submission disables (no Deployment, no claim)."
  value = {
    ok       = sort([for n, r in local.rollouts : n if r.status == "ready"])
    failing  = { for n, r in local.rollouts : n => ["rollout ${r.status}"] if r.status != "ready" }
    disabled = sort(tolist(setsubtract(keys(local.baked.nodes), data.fediversity_submission.this.enabled_nodes)))
  }
}

output "domain" {
  description = "The group's domain: `domain` of the merged configuration (the submission's, else the baked one), as every node plan carries it; null when neither sets it."
  value       = local.domain
}

output "dns_records" {
  description = "The DNS lane of the operator variants: what a DNS provider needs to create, per enabled node listed in `addresses`, one record per address: `node`, `name` (`<node>.<domain>`), `type` (`A` or `AAAA`) and `value` (the address). A node the submission disables has none. This module creates no record: hand them to the operator's DNS provider."
  value       = local.dns_records

  precondition {
    condition     = length(setsubtract(keys(var.addresses), keys(local.baked.nodes))) == 0
    error_message = "addresses names nodes that the baked configuration does not have: ${join(", ", sort(tolist(setsubtract(keys(var.addresses), keys(local.baked.nodes)))))}. Key addresses by the node names of the baked configuration."
  }
  precondition {
    condition     = length(local.not_ip) == 0
    error_message = "addresses holds values that are no IP address: ${join(", ", local.not_ip)}. Write each as an IPv4 or IPv6 address, e.g. \"203.0.113.10\" or \"2001:db8::10\", without a prefix length."
  }
  precondition {
    condition     = length(local.dns_records) == 0 || local.domain != null
    error_message = "addresses gives the DNS records of ${join(", ", distinct([for r in local.dns_records : r.node]))}, but the merged configuration has no domain to name them in. Set \"domain\" in the baked configuration or in the submission."
  }
}
