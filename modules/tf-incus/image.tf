# tf-incus from the node's source (docs/incus-nodes.md#incus-from-source): a node whose
# container this module makes, and for which neither its roster entry nor var.image
# names an image, gets an Incus image of its own system (fediversity_incus_image: its
# `toplevel`, else its `build`, else var.build, handed its node plan), and its container
# is created from that image. A submission then takes the group to running, judged
# containers with no image prepared by hand.
#
# The image only seeds the container (replace_on_image_change = false below): the
# node's later systems arrive through its deploy, which switches the running container
# and keeps its state. A changed source makes a new image, keyed on the new system, for
# the next container made (a replaced or a new one), and deletes the old one; an
# unchanged source imports nothing.
locals {
  built_images = { for n, v in local.containers : n => v if v.image == null && var.image == null }
}

resource "fediversity_incus_image" "node" {
  for_each = local.built_images

  node              = each.key
  project           = local.container_project[each.key]
  toplevel          = each.value.toplevel
  node_plan         = data.fediversity_submission.this.node_plans[each.key]
  submission_digest = local.digest
  submission_file   = var.submission_file

  dynamic "build" {
    for_each = each.value.toplevel == null ? [each.value.build != null ? each.value.build : var.build] : []
    content {
      flake       = build.value.flake
      installable = build.value.installable
      file        = build.value.file
      attribute   = build.value.attribute
      expression  = build.value.expression
      args        = build.value.args
    }
  }

  lifecycle {
    precondition {
      condition     = each.value.toplevel != null || each.value.build != null || var.build != null
      error_message = "Node ${each.key}: its container has no image to be made from: give it an `image` (or set var.image), or a system to build one from (`toplevel`, `build`, or var.build)."
    }
  }
}
