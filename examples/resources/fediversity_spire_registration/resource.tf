# SPIRE registration of one Incus node of a tf-incus-operator group. The join token goes
# to the node through the Incus API (or an ssh block), never through state.
resource "fediversity_spire_registration" "web01" {
  group        = "acme"
  node         = "web01"
  trust_bundle = data.fediversity_spire_trust_bundle.central.pem

  spire_node {
    host     = "spire.central.example.org"
    host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILEN8KFBXA4iE2RNE1fM4+7VYlxLY6cu3eE3UXD8qenv"
  }

  incus {
    instance = fediversity_incus_node.web01.name
  }
}
