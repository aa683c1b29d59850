resource "fediversity_incus_node" "web01" {
  name  = "web01"
  image = "nixos/25.05"
}
