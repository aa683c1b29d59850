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
    # Deploy as an unprivileged user; what changes the system runs through `sudo -n`.
    user = "deploy"
    sudo = true
    # jump { host = "bastion.example.org" }
  }

  # Health checks decide the verdict too: a command on the node and a probe from the
  # deployer, each retried until it passes or its timeout runs out. Changing them
  # redeploys nothing.
  check {
    name     = "synapse-ready"
    argv     = ["curl", "-fsS", "http://127.0.0.1:8008/health"]
    interval = "2s"
    timeout  = "60s"
  }
  probe {
    name        = "public-https"
    url         = "https://web01.example.org/_matrix/client/versions"
    body_regexp = "\"versions\""
    timeout     = "60s"
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

output "web01_failed_checks" {
  value = [for c in fediversity_node_switch.web01.verdict.checks : c.name if !c.ok]
}

# What the last deploy changed: packages, units, bytes copied.
output "web01_changes" {
  value = fediversity_node_switch.web01.changes
}
