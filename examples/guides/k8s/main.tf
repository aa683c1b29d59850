terraform {
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}

# Cluster and registry: kube_config_path or KUBE_CONFIG_PATH, k8s_registry or
# K8S_REGISTRY, registry credentials from REGISTRY_AUTH_FILE. None of them is stored.
provider "fediversity" {
  k8s_namespace = "tenant-a"
}

module "group" {
  source = "github.com/fediversity/terraform-provider-fediversity//modules/k8s?ref=v0.1.0"

  submission_file = "${path.root}/submission.json"
  baked_json      = file("${path.root}/baked.json")
  operator_root   = path.root

  # Each node's system, built from its node plan (the module's node_plans output): the
  # image is built from it (one reproducible layer holding the closure) and tagged with
  # the toplevel's hash, so an unchanged system pushes nothing. A prebuilt
  # docker-archive works too: { archive = "…", tag = "…" }.
  nodes = {
    web01 = { toplevel = "/nix/store/xwm8an2vhqcwqj551lb6vpk9gdfxfj4z-nixos-system-web01" }
    web02 = { toplevel = "/nix/store/64aifyvnymzc5jjp99l3r06pvf5kxgz4-nixos-system-web02", storage_size = "20Gi" }
  }

  runtime_class = "fediversity"
  storage_class = "local-path"
  storage_size  = "10Gi"
  timings       = { rollout_wait = "5m", pull_grace = "20s" }

  # A staged rollout: the canary (web01, the first by name) first. If its pod does not
  # become ready, it goes back to its previous image and the rollout halts after it:
  # web02 gets no new image and keeps what it runs.
  canary         = 1
  failure_budget = "0"
}

output "summary" {
  value = module.group.summary
}
