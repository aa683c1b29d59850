resource "fediversity_node_switch" "db01" {
  node     = "db01"
  toplevel = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-nixos-system-db01-25.05"

  incus {
    instance = "db01"
  }
}
