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
