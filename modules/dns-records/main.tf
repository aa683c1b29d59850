# The DNS lane of the operator variants, one piece for modules/k8s and modules/tf-incus:
# the group's domain (every node plan carries it) and, per enabled node, one record per
# address the operator gives, in the address's canonical form (cidrhost of its
# single-address prefix). The records output's preconditions refuse what cannot make a
# record. It creates nothing: the records go to the operator's DNS provider.

variable "merged" {
  description = "The merged configuration (fediversity_submission's `merged`), JSON."
  type        = string
}

variable "enabled_nodes" {
  description = "The nodes the submission enables, in its order."
  type        = list(string)
}

variable "baked_nodes" {
  description = "Every node of the baked configuration."
  type        = set(string)
}

variable "addresses" {
  description = "Per node, its IP addresses."
  type        = map(list(string))
}

locals {
  domain = try(tostring(jsondecode(var.merged).domain), null)
  ip_canonical = { for a in distinct(flatten(values(var.addresses))) :
    a => try(cidrhost("${a}/${length(regexall(":", a)) > 0 ? 128 : 32}", 0), null)
  }
  not_ip = flatten([for n, addrs in var.addresses : [for a in addrs : "${n}: ${jsonencode(a)}" if local.ip_canonical[a] == null]])
  records = flatten([
    for n in var.enabled_nodes : [
      for a in lookup(var.addresses, n, []) : {
        node  = n
        name  = local.domain == null ? null : "${n}.${local.domain}"
        type  = length(regexall(":", a)) > 0 ? "AAAA" : "A"
        value = local.ip_canonical[a]
      }
    ]
  ])
}

output "domain" {
  description = "The group's domain, or null."
  value       = local.domain
}

output "records" {
  description = "One {node, name, type, value} per address of each enabled node."
  value       = local.records

  precondition {
    condition     = length(setsubtract(keys(var.addresses), var.baked_nodes)) == 0
    error_message = "addresses names nodes that the baked configuration does not have: ${join(", ", sort(tolist(setsubtract(keys(var.addresses), var.baked_nodes))))}. Key addresses by the node names of the baked configuration."
  }
  precondition {
    condition     = length(local.not_ip) == 0
    error_message = "addresses holds values that are no IP address: ${join(", ", local.not_ip)}. Write each as an IPv4 or IPv6 address, e.g. \"203.0.113.10\" or \"2001:db8::10\", without a prefix length."
  }
  precondition {
    condition     = length(local.records) == 0 || local.domain != null
    error_message = "addresses gives the DNS records of ${join(", ", distinct([for r in local.records : r.node]))}, but the merged configuration has no domain to name them in. Set \"domain\" in the baked configuration or in the submission."
  }
}
