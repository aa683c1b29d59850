# The registry comes from the provider's k8s_registry or K8S_REGISTRY; credentials from
# registry_auth_file or REGISTRY_AUTH_FILE (containers auth JSON). Neither is stored.
resource "fediversity_image" "web01" {
  namespace = fediversity_k8s_namespace.target.name
  node      = "web01"
  # A docker-archive, e.g. the output of pkgs.dockerTools.buildImage for the node.
  archive = "/nix/store/fdizcszk7vawdc4wh56ipwdf8qwjq9y6-docker-image-web01.tar.gz"
  # The push is replaced when, and only when, the tag changes.
  tag = "fdizcszk7vawdc4wh56ipwdf8qwjq9y6"
}
