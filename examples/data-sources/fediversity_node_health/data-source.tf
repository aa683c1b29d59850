# Re-judge db01 at every plan: an unhealthy node is a warning naming its units, and the
# plan still succeeds. Cost: one read-only verdict pass (settle + watch) per plan.
check "db01_health" {
  data "fediversity_node_health" "db01" {
    node = fediversity_node_switch.db01.node
    # Judge the units of the system deployed (default: whatever the node runs).
    toplevel = fediversity_node_switch.db01.toplevel
    # A cheaper pass than the deploy's defaults; a shorter watch sees fewer loops.
    timings {
      settle = "2s"
      watch  = "6s"
    }
    ssh {
      host             = "db01.example.org"
      known_hosts_file = "known_hosts"
    }
  }

  assert {
    condition     = data.fediversity_node_health.db01.ok
    error_message = data.fediversity_node_health.db01.message
  }
}
