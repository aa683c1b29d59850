# Method `tf-incus`: the node's container is made in the same graph as its deploy.
# The image must be on the provider's Incus daemon (an alias or a fingerprint).
resource "fediversity_incus_node" "web01" {
  name     = "web01"
  image    = "nixos/25.05"
  profiles = ["default"]

  config = {
    "user.fediversity.node" = "web01"
    "security.nesting"      = "true"
  }
  limits = {
    cpu    = "2"
    memory = "2GiB"
  }

  # The node's sshd on a loopback port of the host (for SSH access besides the Incus API).
  device {
    name       = "ssh"
    type       = "proxy"
    properties = { listen = "tcp:127.0.0.1:2201", connect = "tcp:127.0.0.1:22", bind = "host" }
  }

  # The node's data on a custom volume of its own (web01-data, in the root disk's pool),
  # so that a deploy's snapshot set includes it. It is kept when the container is
  # destroyed or replaced, and the next container of that name takes it back.
  data_volume {
    path = "/var/lib/fediversity"
    size = "20GiB"
  }

  # Create returns once systemd in the container answers running or degraded.
  node_wait = "2m"
}

# The deploy targets the container through the Incus API. Where the containers are
# managed by another Incus provider, give its instance name and project here instead.
resource "fediversity_node_switch" "web01" {
  node      = "web01"
  node_plan = data.fediversity_submission.this.node_plans["web01"]
  build {
    installable = "${path.module}/nodes#web01"
  }

  incus {
    instance = fediversity_incus_node.web01.instance
    project  = fediversity_incus_node.web01.project
  }
}
