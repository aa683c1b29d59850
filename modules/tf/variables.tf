variable "submission_file" {
  description = "Path of the submission JSON the api wrote. It is read at every plan, and again by every resource at apply: a submission that changed after the plan is refused."
  type        = string
}

variable "submission_digest" {
  description = "The digest of the submission the operator approved. Default: the digest read at plan. Set it to refuse, at apply, every submission but that one."
  type        = string
  default     = null
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
    The node roster: how to reach and build each node, keyed by the node names of the baked
    configuration. The same shape as the `nodes` of the fediversity command's roster file, so
    `jsondecode(file("roster.json")).nodes` fits. Per node: `host` (and `port`, `user`, a pinned
    `host_key` or `known_hosts_file`, an optional `jump` host) for SSH, or `incus` =
    { instance, project } to reach it through the provider's Incus connection instead; and
    `toplevel` (a prebuilt system) or `build` (defaults to var.build). As in the roster, a node
    may also set `sudo` (with a non-root `user`), `keepalive`, `revert_on_lockout`,
    `insecure_ignore_host_key`, `snapshot` (Incus), `strict`, `activation`, `secret_chain`, `loop_budgets`, `timings` (over
    var.timings), `checks` and `probes` (see fediversity_node_switch). A node the submission
    enables must be listed; a listed node it does not enable is left alone.
  EOT
  type = map(object({
    host                     = optional(string)
    port                     = optional(number)
    user                     = optional(string)
    sudo                     = optional(bool)
    host_key                 = optional(string)
    known_hosts_file         = optional(string)
    insecure_ignore_host_key = optional(bool)
    keepalive                = optional(string)
    revert_on_lockout        = optional(bool)
    jump = optional(object({
      host             = string
      port             = optional(number)
      user             = optional(string)
      host_key         = optional(string)
      known_hosts_file = optional(string)
    }))
    incus = optional(object({
      instance = string
      project  = optional(string)
      remote   = optional(string)
    }))
    snapshot = optional(object({
      enabled = optional(bool)
      keep    = optional(number)
    }))
    toplevel     = optional(string)
    strict       = optional(bool)
    activation   = optional(string)
    secret_chain = optional(list(string))
    loop_budgets = optional(map(number))
    timings      = optional(map(string), {})
    checks = optional(list(object({
      name        = string
      argv        = list(string)
      expect_exit = optional(number)
      interval    = optional(string)
      timeout     = optional(string)
    })), [])
    probes = optional(list(object({
      name          = string
      url           = optional(string)
      tcp           = optional(string)
      expect_status = optional(number)
      body_regexp   = optional(string)
      insecure      = optional(bool)
      interval      = optional(string)
      timeout       = optional(string)
    })), [])
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

variable "activation" {
  description = "How every node comes to run its new system unless its entry says otherwise: switch (default), boot (the boot entry only), reboot-if-needed (reboot when the kernel, initrd, kernel modules or systemd change, or a switch inhibitor refuses the switch) or reboot (see fediversity_node_switch)."
  type        = string
  default     = "switch"
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
  description = "Waits and thresholds for every node (Go durations); unset ones come from the provider's timings."
  type = object({
    node_wait       = optional(string)
    switch_timeout  = optional(string)
    settle          = optional(string)
    watch           = optional(string)
    sample_interval = optional(string)
    stale_job       = optional(string)
    chain_wait      = optional(string)
    no_progress     = optional(string)
    confirm_timeout = optional(string)
    lock_wait       = optional(string)
  })
  default = {}
}

variable "canary" {
  description = "Staged rollout: the first wave, a canary of this many nodes (the first by name). 0 (default): no canary. See docs/guides/tf.md#staged-rollouts."
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
  description = "Staged rollout: how many nodes may fail before the rollout halts, a count (\"1\") or a percentage of the group, rounded down (\"20%\"). Past it the gate after the wave fails the apply and later waves are not touched. Default: no budget. A budget above 0 needs strict = false (a strict failure fails its own node's resource, and so every later wave)."
  type        = string
  default     = null
}
