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

  # Each node's image, built from its node plan (e.g. pkgs.dockerTools.buildImage of the
  # node's configuration), and its tag (e.g. the hash part of the image's store path).
  nodes = {
    web01 = { archive = "/nix/store/aaaa…-docker-image-web01.tar.gz", tag = "aaaa" }
    web02 = { archive = "/nix/store/bbbb…-docker-image-web02.tar.gz", tag = "bbbb", storage_size = "20Gi" }
  }

  runtime_class = "fediversity"
  storage_class = "local-path"
  storage_size  = "10Gi"
  timings       = { rollout_wait = "5m", pull_grace = "20s" }
}

output "summary" {
  value = module.group.summary
}
