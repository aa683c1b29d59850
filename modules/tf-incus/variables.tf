variable "method" {
  description = "The method whose branch of the submission is taken: `tf-incus`, or `tf-incus-operator` when the SPIRE lane brings the nodes their secrets."
  type        = string
  default     = "tf-incus"
  validation {
    condition     = contains(["tf-incus", "tf-incus-operator"], var.method)
    error_message = "method must be \"tf-incus\" or \"tf-incus-operator\"."
  }
}

variable "image" {
  description = "Image of the containers this module creates (an alias or fingerprint on the provider's Incus daemon), unless a node names its own. Null (the default): each such node's container is made from an image of its own system (its `toplevel` or `build`, else var.build), built and imported by the module (fediversity_incus_image)."
  type        = string
  default     = null
}

variable "snapshot_keep" {
  description = "Take an Incus snapshot before each switch and keep this many (0: none). A node that does not answer after its switch is restored from it."
  type        = number
  default     = 0
}

variable "interrupted_restore" {
  description = "With snapshots (snapshot_keep > 0): what a deploy does first when an earlier run's restore of a node was cut off between stopping its container and starting it again (the plan warns about it): `finish` restores the rollback point that restore was restoring; `abort` puts the container back on the state that stopped answering, kept aside. Either way the deploy then goes on."
  type        = string
  default     = "finish"
  validation {
    condition     = contains(["finish", "abort"], var.interrupted_restore)
    error_message = "interrupted_restore must be \"finish\" (restore the rollback point the cut-off restore was restoring) or \"abort\" (put the container back on the state it kept aside)."
  }
}

variable "deploy" {
  description = "Which system every node deploys: configured (default: its toplevel or build) or last-good (its last good system, the toplevel whose verdict was last clean, recorded on the node by every deploy so judged; as `fediversity rollback --to last-good`). The plan shows each node's toplevel going back; a node with none fails the plan, naming it. Set it back to configured to deploy the configured systems again (see fediversity_node_switch's `deploy`)."
  type        = string
  default     = "configured"
  nullable    = false
  validation {
    condition     = contains(["configured", "last-good"], var.deploy)
    error_message = "deploy must be \"configured\" or \"last-good\"."
  }
}

variable "strict" {
  description = "Strict (default): a failed unit fails the apply. false: the apply succeeds with a warning and the node shows as failing in the summary."
  type        = bool
  default     = true
}

variable "secret_chain" {
  description = "Units that bring a node's secrets up, in order (see fediversity_node_switch)."
  type        = list(string)
  default     = null
}

variable "loop_budgets" {
  description = "Per-unit loop budgets (see fediversity_node_switch)."
  type        = map(number)
  default     = null
}

variable "activation" {
  description = "How the nodes come to run their new systems: switch (default), boot, reboot-if-needed or reboot (see fediversity_node_switch). A reboot restarts the Incus container; its snapshot guard restores a node that does not come back."
  type        = string
  default     = "switch"
}

variable "spire" {
  description = <<-EOT
    The SPIRE lane of `tf-incus-operator` (required with that method, refused with
    `tf-incus`): `group`, the group name in the nodes' SPIFFE IDs
    (`spiffe://<trust domain>/host/<group>-<node>`); `spire_node`, the node that runs
    spire-server (`host`, `port` default 22, `host_key`), reached with the provider's
    SSH credential; optional `trust_bundle` (PEM; default: read from the spire node),
    `agent_dir` (default `/var/lib/spire/agent`) and `token_ttl` (default `30m`).
    The module makes one fediversity_spire_registration per enabled node before the
    node's deploy: its one-time join token must still be valid when the new system
    starts the node's agent, so `token_ttl` must cover the node's build, copy and switch.
  EOT
  type = object({
    group = string
    spire_node = object({
      host     = string
      port     = optional(number)
      host_key = string
    })
    trust_bundle = optional(string)
    agent_dir    = optional(string)
    token_ttl    = optional(string, "30m")
  })
  default = null
}

variable "tenant" {
  description = <<-EOT
    The tenant's shared resources (docs/incus-nodes.md#incus-tenant): with it, the module makes
    the tenant's Incus project (`name`, its `limits` as `limits.*` keys without the prefix,
    e.g. `{ instances = "10", memory = "16GiB" }`, and `description`) and writes the
    project's default profile (the containers' root disk on `pool`, default the default
    profile's pool; `container_limits`, each container's limits; `network`, an existing
    network every container joins as eth0; `devices`, more devices of that profile, as
    Incus writes them, e.g. a proxy device by which every container reaches the SPIRE
    server where its agent's configuration names it), once for the group, and makes
    every container in it. The project goes with the tenant's last node, unless it still
    holds data volumes kept on destroy (`data_volume`'s default): then it is kept for them, with a
    warning, and taken back when a node of the tenant comes back. Taken by both methods.
    Default: none, the containers go in their roster entry's project or the provider's.
  EOT
  type = object({
    name             = string
    description      = optional(string)
    limits           = optional(map(string), {})
    container_limits = optional(map(string), {})
    pool             = optional(string)
    network          = optional(string)
    devices          = optional(map(map(string)), {})
  })
  default = null
}
