# The kubeconfig comes from the provider's kube_config_path or KUBE_CONFIG_PATH.
# Namespace: K8S_NAMESPACE (or the provider's k8s_namespace), "fediversity" when unset.
resource "fediversity_k8s_namespace" "target" {}

# A per-app target: "<namespace>-mastodon".
resource "fediversity_k8s_namespace" "mastodon" {
  app           = "mastodon"
  runtime_class = "fediversity" # checked at plan time
}
