# The submission the api wrote, read at every plan. Its digest goes to the resources, so
# that an apply refuses a submission that changed after the plan.
data "fediversity_submission" "this" {
  submission_file = "${path.module}/submission.json"
  method          = "tf-incus"

  # The baked configuration: the node map, the applications and their defaults.
  baked_json = jsonencode({
    nodes = {
      web01 = {
        applications = ["mastodon"]
        identity     = { instance = "fedi-n1" }
        # A file of the operator tree, stored relative to operator_root in the plan.
        module = { _file = "nodes/web01.nix" }
      }
      web02 = {
        applications = ["pixelfed"]
        identity     = { instance = "fedi-n2" }
      }
    }
    applications = {
      mastodon = { enable = false }
      pixelfed = { enable = false }
    }
    domain = "example.org"
    email  = "ops@example.org"
  })

  # Only declared identity keys reach a plan: dns_zone does; site, not declared, does
  # not, so changing it changes no plan. The map is kept in the state: a per-run value
  # (a path under /tmp or /run/user, such as a staged credential) is refused here.
  identity_keys = ["instance", "dns_zone"]
  identity = {
    dns_zone = "example.org"
    site     = "ams1"
  }
  operator_root = path.module
}

# A submission such as
#   {"tf-incus": {"applications": {"mastodon": {"enable": true}}, "domain": "social.example"}}
# enables mastodon (raised out of the method branch) and leaves pixelfed off, so only web01
# gets a plan.
output "enabled_nodes" {
  value = data.fediversity_submission.this.enabled_nodes
}

output "node_plans" {
  value = data.fediversity_submission.this.node_plans
}
