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
  description = "The method whose branch of the submission is taken: `k8s`, or `k8s-operator` when the SPIRE lane brings the nodes their secrets."
  type        = string
  default     = "k8s"
  validation {
    condition     = contains(["k8s", "k8s-operator"], var.method)
    error_message = "method must be \"k8s\" or \"k8s-operator\"."
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
    The node roster, keyed by the node names of the baked configuration (DNS labels: they
    name the Deployment, the claim and the image repository). Per node, the node's system:
    `toplevel`, its NixOS toplevel built from the node's configuration and its node plan
    (the module's `node_plans` output), from which the image is built (one reproducible
    layer holding the closure; the tag is derived from the toplevel unless `tag` is set);
    or a `build` (as fediversity_node_switch's: `flake`, `installable`, `file`, `expression`),
    evaluated at plan and built at apply with the node's node plan handed to it, so one apply
    builds every node's image from the submission;
    or a prebuilt `archive` (a docker-archive) with its `tag`. Optional: `storage_size`.
    A node the submission enables must be listed.
  EOT
  type = map(object({
    toplevel = optional(string)
    build = optional(object({
      flake       = optional(string)
      installable = optional(string)
      file        = optional(string)
      attribute   = optional(string)
      expression  = optional(string)
      args        = optional(map(string))
    }))
    archive      = optional(string)
    tag          = optional(string)
    storage_size = optional(string)
  }))
}

variable "app" {
  description = "For a per-app target: the application, appended as -<app> to the provider's namespace. Default: the `all` target (the namespace itself)."
  type        = string
  default     = null
}

variable "runtime_class" {
  description = "The method's RuntimeClass, checked at every plan. Default `fediversity`."
  type        = string
  default     = null
}

variable "storage_class" {
  description = "StorageClass of every node's claim. Default: the cluster's default class."
  type        = string
  default     = null
}

variable "storage_size" {
  description = "Size of every node's claim unless the node sets its own. Default `1Gi`."
  type        = string
  default     = null
}

variable "spire_handoff" {
  description = "Method k8s-operator: the id of the namespace's fediversity_spire_handoff. Each node's pod then gets its service account token and the trust bundle for its SPIRE agent."
  type        = string
  default     = null
}

variable "timings" {
  description = "Waits of every rollout (Go durations); unset ones come from the provider's timings."
  type = object({
    rollout_wait   = optional(string)
    pull_grace     = optional(string)
    degraded_grace = optional(string)
    rollback_wait  = optional(string)
  })
  default = {}
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

variable "deploy" {
  description = "Which image every node runs: configured (default: the image built or given for it in var.nodes) or last-good (its last good template, the last pod template seen ready, which every ready rollout records on the node's Deployment; as modules/tf's `deploy` and `fediversity rollback --to last-good`). The plan shows each node's image_ref going back to that template's image; a node with none fails the plan, naming it. The images of var.nodes are still pushed, but no node runs them. Set it back to configured to roll the configured images out again (see fediversity_k8s_rollout's `deploy`)."
  type        = string
  default     = "configured"
  nullable    = false
  validation {
    condition     = contains(["configured", "last-good"], var.deploy)
    error_message = "deploy must be \"configured\" or \"last-good\"."
  }
}

variable "strict" {
  description = "Strict (default): a node whose rollout does not end ready (rolled back, or failed with nothing to go back to) fails the apply. false: the apply goes on with a warning naming the node and the reason; the rollout's state says what runs (status rolled_back or failed, running_image_ref), the node shows as failing in the summary, the next plan rolls it out again, and a staged rollout's gate counts it against failure_budget (fediversity_k8s_rollout's fail_when_not_ready)."
  type        = bool
  default     = true
  nullable    = false
}

variable "canary" {
  description = "Staged rollout: the first wave, a canary of this many nodes (the first by name). 0 (default): no canary. See docs/guides/k8s.md#staged-rollouts: changing the layout of a group already rolled out moves nodes between waves, which deletes their Deployment and claim unless their state is moved first."
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
  description = "Staged rollout: how many nodes may fail (a rollout that did not end ready) before the rollout halts, a count (\"1\") or a percentage of the group, rounded down (\"20%\"). Past it the gate after the wave fails the apply and the nodes of later waves are not touched: no image is built or pushed for them, and their Deployment and claim are neither made nor changed. Default: no budget. A budget above 0 needs strict = false (a strict failure fails its own node's rollout, and so every later wave)."
  type        = string
  default     = null
}
