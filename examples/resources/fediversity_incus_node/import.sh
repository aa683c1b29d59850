# By address: incus://local/<project>/<instance> ("local" = the provider's Incus connection).
terraform import fediversity_incus_node.web01 incus://local/default/web01

# By name, in the provider's project (incus.project, then "default").
terraform import fediversity_incus_node.web01 web01
