data "fediversity_submission" "this" {
  submission_file = "${path.module}/submission.json"
  method          = "tf"
  baked_json      = jsonencode({ nodes = { web01 = {} } })
}
