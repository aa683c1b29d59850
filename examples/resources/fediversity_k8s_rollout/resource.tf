resource "fediversity_k8s_rollout" "web01" {
  namespace     = fediversity_k8s_namespace.target.name
  node          = "web01"
  image_ref     = fediversity_image.web01.image_ref
  runtime_class = fediversity_k8s_namespace.target.runtime_class
  storage_class = "local-path"
  storage_size  = "10Gi"

  timings {
    rollout_wait = "5m"  # the operator's limit of the wait
    pull_grace   = "20s" # ErrImagePull/ImagePullBackOff tolerated this long
  }

  timeouts {
    create = "15m"
    update = "15m"
  }
}
