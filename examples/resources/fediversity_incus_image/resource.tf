# tf-incus from the node's source: an Incus image of web01's own system, built in the
# graph and imported into the provider's Incus daemon. An unchanged system imports
# nothing; another system is a new image, and the old one is deleted.
resource "fediversity_incus_image" "web01" {
  node      = "web01"
  node_plan = data.fediversity_submission.this.node_plans["web01"]
  build {
    installable = "${path.module}/nodes#web01"
  }
}

# The container is made from that image. The image only seeds it: later systems arrive
# through the deploy, which switches the running container and keeps its state.
resource "fediversity_incus_node" "web01" {
  name                    = "web01"
  image                   = fediversity_incus_image.web01.fingerprint
  replace_on_image_change = false
}

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
