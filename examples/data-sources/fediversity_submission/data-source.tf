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

  # Only declared identity keys reach a plan; the staged credential below does not, so
  # staging it somewhere else on the next run changes no plan.
  identity_keys = ["instance", "dns_zone"]
  identity = {
    dns_zone          = "example.org"
    staged_credential = "/run/user/0/fediversity-stage/token"
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
