variable "method" {
  description = "The method whose branch of the submission is taken: `k8s`, or `k8s-operator` when the SPIRE lane brings the nodes their secrets."
  type        = string
  default     = "k8s"
  validation {
    condition     = contains(["k8s", "k8s-operator"], var.method)
    error_message = "method must be \"k8s\" or \"k8s-operator\"."
  }
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
