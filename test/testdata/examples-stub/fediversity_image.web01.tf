resource "fediversity_image" "web01" {
  namespace = fediversity_k8s_namespace.target.name
  node      = "web01"
  toplevel  = "/nix/store/xwm8an2vhqcwqj551lb6vpk9gdfxfj4z-nixos-system-web01"
}
