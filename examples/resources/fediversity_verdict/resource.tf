# Method `tf-incus`: after the deploy (and, e.g., an attestation step that brings the
# secrets), judge the node again without building, copying or switching.
resource "fediversity_verdict" "db01" {
  node     = fediversity_node_switch.db01.node
  toplevel = fediversity_node_switch.db01.toplevel

  incus {
    instance = "db01"
    project  = "tenant-a"
  }

  # Wait for these, in order; stop early naming a member that fails or shows no progress.
  secret_chain = ["vault-agent.service", "secrets-install.service"]
  loop_budgets = { "matrix-synapse.service" = 3 }
  strict       = true

  timings {
    chain_wait  = "5m"
    no_progress = "60s"
  }

  # Run the pass again whenever the node gets a new generation.
  triggers = {
    generation = tostring(fediversity_node_switch.db01.generation)
  }
}

output "db01_verdict" {
  value = fediversity_verdict.db01.verdict.report
}
