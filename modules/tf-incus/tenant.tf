# The tenant's shared resources (docs/incus-nodes.md#incus-tenant), with var.tenant: an Incus
# project of the tenant, with its limits, and the project's default profile (the
# containers' root disk, their limits, eth0 on the operator's network when one is
# named, and the tenant's extra devices, e.g. the proxy by which its nodes reach the
# SPIRE server), made once for the group (fediversity_incus_tenant). Every container this
# module makes goes in that project (unless its roster entry names another), and so
# takes that profile. The tenant goes with its last node: when the submission enables
# no node whose container this module makes, the project is deleted after the
# containers; while it still holds data volumes their destroy kept, it is kept for them
# (a warning names each), and the tenant takes it back when a node comes back. Both
# methods take var.tenant: a project with limits needs neither SPIRE nor an application.
resource "fediversity_incus_tenant" "this" {
  count = var.tenant != null && length(local.containers) > 0 ? 1 : 0

  name             = var.tenant.name
  description      = var.tenant.description
  limits           = var.tenant.limits
  container_limits = var.tenant.container_limits
  pool             = var.tenant.pool
  network          = var.tenant.network
  devices          = var.tenant.devices
}

locals {
  # The project of a container this module makes: its roster entry's, else the tenant's
  # (else the provider's).
  container_project = { for n, v in local.containers : n => try(coalesce(v.project, one(fediversity_incus_tenant.this[*].project)), null) }
}
