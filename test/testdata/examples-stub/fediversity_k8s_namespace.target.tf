resource "fediversity_k8s_namespace" "target" {}
