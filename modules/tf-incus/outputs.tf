output "digest" {
  description = "The digest of the submission as read at plan."
  value       = data.fediversity_submission.this.digest
}

output "node_plans" {
  description = "The node plan of every enabled node."
  value       = data.fediversity_submission.this.node_plans
}

output "instances" {
  description = "Per enabled node: the Incus instance and project it runs in."
  value       = local.target
}

output "verdicts" {
  description = "Per enabled node deployed (every wave the apply reached): ok (deploy and verdict-only pass both converged), the reasons of each, the toplevel and generation it runs, and both verdicts as text."
  value       = local.verdicts
}

output "summary" {
  description = "The group: nodes ok, nodes failing with their reasons (only seen in lenient mode: a strict failure fails the apply), and nodes the submission disables (no resources)."
  value = {
    ok       = sort([for n, v in local.verdicts : n if v.ok])
    failing  = { for n, v in local.verdicts : n => v.reasons if !v.ok }
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
