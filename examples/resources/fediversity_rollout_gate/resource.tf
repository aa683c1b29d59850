# A staged rollout by hand: db01 is the canary; every node switch of the next wave says
# `depends_on = [fediversity_rollout_gate.after_canary]`, so Terraform applies it only
# when the canary's verdict is in and within the budget. (modules/tf does this for a
# whole group: see its canary, wave_size and failure_budget.)
resource "fediversity_rollout_gate" "after_canary" {
  wave           = 1
  waves          = 2
  group_size     = 4
  failure_budget = "0"

  verdicts = {
    db01 = {
      ok      = length(fediversity_node_switch.db01.verdict.reasons) == 0
      reasons = fediversity_node_switch.db01.verdict.reasons
    }
  }
}
