# The SPIRE hand-off of a k8s-operator namespace: before the Deployments.
# K8S_SPIRE_API_SERVER gives the API server address as the spire node reaches it
# (default: the server of KUBE_CONFIG_PATH); SSH_PRIVATE_KEY_FILE reaches the spire node.
resource "fediversity_spire_handoff" "acme" {
  namespace    = fediversity_k8s_namespace.target.name
  group        = "acme"
  nodes        = ["web01", "db01"]
  trust_bundle = data.fediversity_spire_trust_bundle.central.pem

  spire_node {
    host     = "spire.central.example.org"
    host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILEN8KFBXA4iE2RNE1fM4+7VYlxLY6cu3eE3UXD8qenv"
  }
}

# Each node's pod gets the projected token of node-<node> and the bundle.
resource "fediversity_k8s_rollout" "web01" {
  namespace     = fediversity_k8s_namespace.target.name
  node          = "web01"
  image_ref     = fediversity_image.web01.image_ref
  runtime_class = fediversity_k8s_namespace.target.runtime_class
  spire_handoff = fediversity_spire_handoff.acme.id
}
