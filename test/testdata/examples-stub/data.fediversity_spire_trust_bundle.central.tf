data "fediversity_spire_trust_bundle" "central" {
  spire_node {
    host     = "spire.central.example.org"
    host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILEN8KFBXA4iE2RNE1fM4+7VYlxLY6cu3eE3UXD8qenv"
  }
}
