variable "submission_file" {
  description = "Path of the submission JSON the api wrote. It is read at every plan, and again by every resource at apply: a submission that changed after the plan is refused."
  type        = string
}

variable "submission_digest" {
  description = "The digest of the submission the operator approved. Default: the digest read at plan. Set it to refuse, at apply, every submission but that one."
  type        = string
  default     = null
}

variable "method" {
  description = "The method whose branch of the submission is taken: `tf-incus`, or `tf-incus-operator` when the SPIRE lane brings the nodes their secrets."
  type        = string
  default     = "tf-incus"
  validation {
    condition     = contains(["tf-incus", "tf-incus-operator"], var.method)
    error_message = "method must be \"tf-incus\" or \"tf-incus-operator\"."
  }
}

variable "baked_json" {
  description = "The baked configuration as a JSON object (the node map, the applications and their defaults), e.g. file(\"baked.json\"). See the fediversity_submission data source."
  type        = string
}

variable "identity_keys" {
  description = "The declared node identity keys (see fediversity_submission)."
  type        = list(string)
  default     = []
}

variable "identity" {
  description = "Values of identity keys for every node (see fediversity_submission)."
  type        = map(string)
  default     = {}
}

variable "operator_root" {
  description = "Root of the operator tree; file references in node plans are relative to it. Default: the working directory."
  type        = string
  default     = null
}

variable "nodes" {
  description = <<-EOT
    The node roster, keyed by the node names of the baked configuration. Per node, either
    the container this module creates (`image`, default var.image, else an image of the
    node's own system that the module builds and imports; `profiles`, `config`,
    `limits`, `devices`; `container` names it, default the node name) or `instance` (and
    `project`): an existing Incus instance, e.g. one another Incus provider manages, which
    this module then only deploys to. And `toplevel` (a prebuilt system) or `build`
    (default var.build). A node the submission enables must be listed.

    A container this module creates gets a data volume by default (`data_volume`, see
    fediversity_incus_node): a custom storage volume `<container>-data` at
    /var/lib/fediversity (`path`), in the pool of its root disk (`pool`), with an optional
    quota (`size`), so that the node's data is in its snapshot sets. It is kept when the
    container is destroyed unless `delete_on_destroy = true`. `data_volume = { enabled =
    false }` makes none: then keep the data on a host path device in `devices` if you
    must (it is in no snapshot set), or on the root disk. A container made before this
    default existed needs `enabled = false` (or a replacement): a data volume is not added
    to an existing container.
  EOT
  type = map(object({
    instance  = optional(string)
    project   = optional(string)
    container = optional(string)
    image     = optional(string)
    profiles  = optional(list(string))
    config    = optional(map(string))
    limits    = optional(map(string))
    devices = optional(list(object({
      name       = string
      type       = string
      properties = map(string)
    })), [])
    data_volume = optional(object({
      enabled           = optional(bool, true)
      path              = optional(string)
      pool              = optional(string)
      size              = optional(string)
      delete_on_destroy = optional(bool)
    }), {})
    toplevel = optional(string)
    build = optional(object({
      flake       = optional(string)
      installable = optional(string)
      file        = optional(string)
      attribute   = optional(string)
      expression  = optional(string)
      args        = optional(map(string))
    }))
  }))
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

variable "build" {
  description = "How a node's system is built when its roster entry has neither toplevel nor build: `flake` (`<flake ref>#<attribute>`, the node plan handed as the flake input `fediversity-node-plan`), or `installable`, `file` or `expression` (nix-build, the node plan handed as `--argstr planFile <file>`)."
  type = object({
    flake       = optional(string)
    installable = optional(string)
    file        = optional(string)
    attribute   = optional(string)
    expression  = optional(string)
    args        = optional(map(string))
  })
  default = null
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

variable "timings" {
  description = "Waits and thresholds for every node (Go durations); unset ones come from the provider's timings. `node_wait` also bounds how long a new container may take to boot; `verdict_settle` and `verdict_watch` are the settle and watch of the verdict-only pass (default: settle and watch)."
  type = object({
    node_wait       = optional(string)
    switch_timeout  = optional(string)
    settle          = optional(string)
    watch           = optional(string)
    sample_interval = optional(string)
    stale_job       = optional(string)
    chain_wait      = optional(string)
    no_progress     = optional(string)
    verdict_settle  = optional(string)
    verdict_watch   = optional(string)
  })
  default = {}
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

variable "addresses" {
  description = <<-EOT
    The DNS lane of the operator variants: per node, the addresses its records point at
    (IPv4 and/or IPv6), as the operator's address management hands them out (e.g. NetBox).
    They are no part of any node plan: a changed address redeploys nothing. Each enabled
    node listed here gets one record per address in the `dns_records` output, named
    `<node>.<domain>`; a node not listed gets none. Creating the records is the job of
    the operator's DNS provider. Default: none.
  EOT
  type        = map(list(string))
  default     = {}
  nullable    = false
}

variable "canary" {
  description = "Staged rollout: the first wave, a canary of this many nodes (the first by name). 0 (default): no canary. See docs/guides/tf-incus.md#staged-rollouts."
  type        = number
  default     = 0
  validation {
    condition     = var.canary >= 0 && floor(var.canary) == var.canary
    error_message = "canary: want a whole count of nodes, 0 or more."
  }
}

variable "wave_size" {
  description = "Staged rollout: the nodes after the canary go in waves of this many, a count (\"2\") or a percentage of the group, rounded up (\"50%\"). Default: one wave of the rest. Not with var.waves. At most 4 waves in all."
  type        = string
  default     = null
  validation {
    condition     = var.wave_size == null || can(regex("^[1-9][0-9]*%?$", var.wave_size))
    error_message = "wave_size: want a count of 1 or more (\"2\") or a percentage of the group (\"50%\")."
  }
}

variable "waves" {
  description = "Staged rollout: explicit waves of node names, in order (the first is the canary). Every enabled node must be in exactly one; a node the submission disables is skipped. Not with canary or wave_size. At most 4."
  type        = list(list(string))
  default     = []
  validation {
    condition     = length(var.waves) == 0 || (var.canary == 0 && var.wave_size == null)
    error_message = "waves: give either explicit waves or canary/wave_size, not both."
  }
}

variable "failure_budget" {
  description = "Staged rollout: how many nodes may fail before the rollout halts, a count (\"1\") or a percentage of the group, rounded down (\"20%\"). Past it the gate after the wave fails the apply and the nodes of later waves are not touched: nothing is registered, copied to or switched on them (their containers are made up front, before the first wave, as the image makes them). Default: no budget. A budget above 0 needs strict = false (a strict failure fails its own node's resource, and so every later wave)."
  type        = string
  default     = null
}

variable "tenant" {
  description = <<-EOT
    The tenant's shared resources (docs/design.md#incus-tenant): with it, the module makes
    the tenant's Incus project (`name`, its `limits` as `limits.*` keys without the prefix,
    e.g. `{ instances = "10", memory = "16GiB" }`, and `description`) and writes the
    project's default profile (the containers' root disk on `pool`, default the default
    profile's pool; `container_limits`, each container's limits; `network`, an existing
    network every container joins as eth0), once for the group, and makes every container
    in it. The project goes with the tenant's last node. Default: none, the containers go
    in their roster entry's project or the provider's.
  EOT
  type = object({
    name             = string
    description      = optional(string)
    limits           = optional(map(string), {})
    container_limits = optional(map(string), {})
    pool             = optional(string)
    network          = optional(string)
  })
  default = null
}
