# The lab demo (`make demo` runs `tofu apply -auto-approve` here). It reads the sample
# submission, merges it into the baked configuration of the lab nodes fedi-n1..fedi-n3
# and publishes one plan per enabled node. The submission enables mastodon (fedi-n1) and
# pixelfed (fedi-n2) inside the branch of method "tf", and names peertube (fedi-n3)
# without enabling it, so fedi-n3 gets no plan.
terraform {
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}

# Credentials come from the environment (SSH_PRIVATE_KEY_FILE …), never from here.
provider "fediversity" {}

variable "method" {
  description = "Deployment method whose branch of the submission is taken."
  type        = string
  default     = "tf"
}

data "fediversity_submission" "lab" {
  submission_file = "${path.module}/submission.json"
  baked_json      = file("${path.module}/baked.json")
  method          = var.method
  identity_keys   = ["instance"]
  operator_root   = path.module
}

output "digest" {
  description = "sha256 of the submission as read; give it to the resources with submission_file."
  value       = data.fediversity_submission.lab.digest
}

output "enabled_nodes" {
  value = data.fediversity_submission.lab.enabled_nodes
}

output "disabled_applications" {
  value = data.fediversity_submission.lab.disabled_applications
}

output "node_plans" {
  value = data.fediversity_submission.lab.node_plans
}
