# Method `tf`: deploy one node over SSH. The key comes from the provider's
# ssh_private_key_file or SSH_PRIVATE_KEY_FILE (or an agent); it is never stored.
resource "fediversity_node_switch" "web01" {
  node              = "web01"
  node_plan         = data.fediversity_submission.this.node_plans["web01"]
  submission_digest = data.fediversity_submission.this.digest
  submission_file   = "${path.module}/submission.json"

  # Build on the deployer; the node plan is handed to the build as --argstr planFile <file>.
  build {
    installable = "${path.module}/nodes#web01"
  }

  ssh {
    host     = "web01.example.org"
    host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3Cj0aK1mO4vVq7bWJm7pS9xXcG2d0dTq0m4Q1fG7kD"
    # jump { host = "bastion.example.org" }
  }

  # A failed unit fails this apply and the next (strict is the default).
  strict       = true
  secret_chain = ["vault-agent.service", "secrets-install.service"]
  loop_budgets = { "matrix-synapse.service" = 3 }

  timings {
    settle = "5s"
    watch  = "10s"
  }

  timeouts {
    create = "30m"
    update = "30m"
  }
}

# Method `tf-incus`: the same deploy body through the Incus API, with a native snapshot
# before each switch as a rollback point for a node that stops answering.
resource "fediversity_node_switch" "db01" {
  node     = "db01"
  toplevel = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-nixos-system-db01-25.05"

  incus {
    instance = "db01"
    project  = "tenant-a"
  }

  snapshot {
    enabled = true
    keep    = 3
  }
}

output "web01_failed_units" {
  value = fediversity_node_switch.web01.verdict.failed
}
