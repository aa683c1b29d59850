# Method `tf-incus-operator`: the shared resources of tenant-a, made once for its group:
# its Incus project, with its limits, and the project's default profile (the root disk
# and the limits of each of its containers).
resource "fediversity_incus_tenant" "tenant_a" {
  name             = "tenant-a"
  limits           = { instances = "10", cpu = "8", memory = "16GiB" }
  container_limits = { cpu = "2", memory = "2GiB" }
}

# Every container of the tenant's nodes goes in its project, and so takes its profile.
resource "fediversity_incus_node" "web01" {
  name    = "web01"
  image   = "nixos/25.05"
  project = fediversity_incus_tenant.tenant_a.project
}
