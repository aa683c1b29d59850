terraform {
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}

# The Incus daemon: the local unix socket here; see the provider's incus block for HTTPS.
provider "fediversity" {}

module "group" {
  source = "github.com/fediversity/terraform-provider-fediversity//modules/tf-incus?ref=main"

  submission_file = "${path.root}/submission.json"
  baked_json      = file("${path.root}/baked.json")
  operator_root   = path.root

  # The containers this module makes, and one instance made elsewhere (e.g. by another
  # Incus provider), which it only deploys to. No image is named: each container is
  # made from an image of its node's own system (built from `build` below), which the
  # module imports into the daemon.
  nodes = {
    web01 = {
      limits = { cpu = "2", memory = "2GiB" }
      # Each container gets a data volume (web01-data at /var/lib/fediversity) by
      # default, so its data is in its snapshot sets; here it gets a quota.
      data_volume = { size = "20GiB" }
    }
    web02 = {
      profiles = ["default", "fediversity"]
    }
    db01 = {
      instance = "db01"
      project  = "tenant-a"
    }
  }

  build         = { file = "${path.root}/nodes.nix", attribute = "system" }
  snapshot_keep = 3
  timings       = { settle = "5s", watch = "10s", node_wait = "2m", verdict_watch = "5s" }

  # A staged rollout: the canary (db01, the first by name) first. If it fails, the
  # rollout halts after it: web01 and web02 are not copied to or switched.
  canary         = 1
  failure_budget = "0"
}

output "summary" {
  value = module.group.summary
}
