# Deploys two lab nodes through the shared deploy body and prints their verdicts:
#   fedi-n1 over SSH  (method `tf`: pinned host key, key from SSH_PRIVATE_KEY_FILE)
#   fedi-n2 over the Incus API (method `tf-incus`: deploy, then the verdict-only pass)
# Each node's closure is built on the deployer with nix-build from the lab's stand-in
# toplevels (lab/closures, no nixpkgs); its node plan is written to a file and handed to
# the build as `planFile`. The submission digest is checked again at apply.

variable "fediversity_repo" {
  description = "Checkout of this repository (lab/demo.sh sets TF_VAR_fediversity_repo); its lab/closures builds the node systems."
  type        = string
}

variable "lab_state" {
  description = "Lab state directory written by lab/lab.sh: nodes.json and the known_hosts file that pins the nodes' host keys."
  type        = string
  default     = "/var/lib/fediversity-lab"
}

locals {
  lab_nodes = { for n in jsondecode(file("${var.lab_state}/nodes.json")) : n.name => n }
  closures  = "${var.fediversity_repo}/lab/closures/default.nix"
}

resource "fediversity_node_switch" "ssh" {
  node              = "fedi-n1"
  node_plan         = data.fediversity_submission.lab.node_plans["fedi-n1"]
  submission_digest = data.fediversity_submission.lab.digest
  submission_file   = "${path.module}/submission.json"

  build {
    file      = local.closures
    attribute = "good"
  }

  ssh {
    host             = local.lab_nodes["fedi-n1"].ssh_host
    port             = local.lab_nodes["fedi-n1"].ssh_port
    known_hosts_file = "${var.lab_state}/known_hosts"
  }

  timings {
    settle = "2s"
    watch  = "6s"
  }
}

resource "fediversity_node_switch" "incus" {
  node              = "fedi-n2"
  node_plan         = data.fediversity_submission.lab.node_plans["fedi-n2"]
  submission_digest = data.fediversity_submission.lab.digest
  submission_file   = "${path.module}/submission.json"

  build {
    file      = local.closures
    attribute = "good"
  }

  incus {
    instance = local.lab_nodes["fedi-n2"].instance
    project  = local.lab_nodes["fedi-n2"].project
  }

  timings {
    settle = "2s"
    watch  = "6s"
  }
}

# tf-incus: after the deploy, the verdict-only pass judges the node again (no build, no
# copy, no switch); it re-runs whenever the deployed generation changes.
resource "fediversity_verdict" "incus" {
  node     = fediversity_node_switch.incus.node
  toplevel = fediversity_node_switch.incus.toplevel

  incus {
    instance = local.lab_nodes["fedi-n2"].instance
    project  = local.lab_nodes["fedi-n2"].project
  }

  triggers = {
    generation = tostring(fediversity_node_switch.incus.generation)
  }

  timings {
    settle = "1s"
    watch  = "4s"
  }
}

output "verdict_ssh" {
  description = "Verdict of fedi-n1, deployed over SSH."
  value = {
    toplevel   = fediversity_node_switch.ssh.toplevel
    generation = fediversity_node_switch.ssh.generation
    report     = fediversity_node_switch.ssh.verdict.report
  }
}

output "verdict_incus" {
  description = "Verdict of fedi-n2, deployed over the Incus API, and of its verdict-only pass."
  value = {
    toplevel     = fediversity_node_switch.incus.toplevel
    generation   = fediversity_node_switch.incus.generation
    report       = fediversity_node_switch.incus.verdict.report
    verdict_only = fediversity_verdict.incus.verdict.report
  }
}
