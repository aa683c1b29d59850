# Method `tf-incus`: every node the submission enables gets its Incus container
# (fediversity_incus_node, unless the roster names an existing instance), is deployed
# through the Incus API (fediversity_node_switch), and judged again by the verdict-only
# pass (fediversity_verdict). A node the submission turns off drops out of for_each:
# its deploy and verdict leave the state, and the container this module made for it is
# deleted.
#
# Method `tf-incus-operator` adds the SPIRE lane: each enabled node is registered on
# the SPIRE server (fediversity_spire_registration: its host entry, and a one-time join
# token and the trust bundle written into the container) after its container exists
# and before its deploy, so the agent of the new system finds its token when the switch
# starts it, and the verdict-only pass, which follows the deploy, judges the secret
# chain of a node whose agent could attest. The token is minted as late as that order
# allows: right before the node's deploy (its build, copy and switch), which
# `spire.token_ttl` must cover. A node the submission turns off loses its entries and
# its agent is evicted.

locals {
  method = var.method
  baked  = jsondecode(var.baked_json)
  digest = coalesce(var.submission_digest, data.fediversity_submission.this.digest)
  nodes  = { for n in data.fediversity_submission.this.enabled_nodes : n => var.nodes[n] }
  # The nodes registered on the SPIRE server: every enabled one, with the operator variant.
  registered = local.method == "tf-incus-operator" ? local.nodes : {}
  # The DNS lane: the group's domain (every node plan carries it) and, per enabled node,
  # one record per address the operator gives (var.addresses), in the address's
  # canonical form (cidrhost of its single-address prefix). The dns_records output's
  # preconditions refuse what cannot make a record.
  domain = try(tostring(jsondecode(data.fediversity_submission.this.merged).domain), null)
  ip_canonical = { for a in distinct(flatten(values(var.addresses))) :
    a => try(cidrhost("${a}/${length(regexall(":", a)) > 0 ? 128 : 32}", 0), null)
  }
  not_ip = flatten([for n, addrs in var.addresses : [for a in addrs : "${n}: ${jsonencode(a)}" if local.ip_canonical[a] == null]])
  dns_records = flatten([
    for n in data.fediversity_submission.this.enabled_nodes : [
      for a in lookup(var.addresses, n, []) : {
        node  = n
        name  = local.domain == null ? null : "${n}.${local.domain}"
        type  = length(regexall(":", a)) > 0 ? "AAAA" : "A"
        value = local.ip_canonical[a]
      }
    ]
  ])
  # Nodes whose container this module makes.
  containers = { for n, v in local.nodes : n => v if v.instance == null }
  # How each node is reached: the container made here, or the existing instance.
  target = {
    for n, v in local.nodes : n => {
      instance = try(fediversity_incus_node.node[n].instance, v.instance)
      project  = try(fediversity_incus_node.node[n].project, v.project)
    }
  }
}

data "fediversity_submission" "this" {
  submission_file = var.submission_file
  baked_json      = var.baked_json
  method          = local.method
  identity_keys   = var.identity_keys
  identity        = var.identity
  operator_root   = var.operator_root

  lifecycle {
    precondition {
      condition     = (var.method == "tf-incus-operator") == (var.spire != null)
      error_message = var.spire == null ? "method = \"tf-incus-operator\" needs var.spire (the group and the spire node that registers the nodes)." : "var.spire is set but method is \"${var.method}\": the SPIRE lane is the tf-incus-operator method's. Set method = \"tf-incus-operator\", or drop var.spire."
    }
    postcondition {
      condition     = length(setsubtract(self.enabled_nodes, keys(var.nodes))) == 0
      error_message = "The submission enables nodes that var.nodes does not list: ${join(", ", setsubtract(self.enabled_nodes, keys(var.nodes)))}. Add each of them to var.nodes (a container to create, or an existing instance)."
    }
  }
}

data "fediversity_spire_trust_bundle" "this" {
  count = local.method == "tf-incus-operator" && try(var.spire.trust_bundle, null) == null ? 1 : 0

  spire_node {
    host     = var.spire.spire_node.host
    port     = var.spire.spire_node.port
    host_key = var.spire.spire_node.host_key
  }
}

resource "fediversity_spire_registration" "node" {
  for_each = local.registered

  group        = var.spire.group
  node         = each.key
  trust_bundle = coalesce(var.spire.trust_bundle, try(data.fediversity_spire_trust_bundle.this[0].pem, null))
  agent_dir    = var.spire.agent_dir
  token_ttl    = var.spire.token_ttl

  spire_node {
    host     = var.spire.spire_node.host
    port     = var.spire.spire_node.port
    host_key = var.spire.spire_node.host_key
  }

  incus {
    instance = local.target[each.key].instance
    project  = local.target[each.key].project
  }
}

resource "fediversity_incus_node" "node" {
  for_each = local.containers

  name      = coalesce(each.value.container, each.key)
  image     = coalesce(each.value.image, var.image)
  project   = each.value.project
  profiles  = each.value.profiles
  config    = each.value.config
  limits    = each.value.limits
  node_wait = var.timings.node_wait

  dynamic "device" {
    for_each = each.value.devices
    content {
      name       = device.value.name
      type       = device.value.type
      properties = device.value.properties
    }
  }
}

resource "fediversity_node_switch" "node" {
  for_each = local.nodes

  # tf-incus-operator: each node's token and trust bundle are on it before its new
  # system starts its agent (no registration with tf-incus).
  depends_on = [fediversity_spire_registration.node]

  node              = each.key
  node_plan         = data.fediversity_submission.this.node_plans[each.key]
  submission_digest = local.digest
  submission_file   = var.submission_file
  # The last good system replaces the configured toplevel (the plan sets it).
  toplevel     = var.deploy == "last-good" ? null : each.value.toplevel
  deploy       = var.deploy
  strict       = var.strict
  activation   = var.activation
  secret_chain = var.secret_chain
  loop_budgets = var.loop_budgets

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

  incus {
    instance = local.target[each.key].instance
    project  = local.target[each.key].project
  }

  dynamic "snapshot" {
    for_each = var.snapshot_keep > 0 ? [var.snapshot_keep] : []
    content {
      keep = snapshot.value
    }
  }

  timings {
    node_wait       = var.timings.node_wait
    switch_timeout  = var.timings.switch_timeout
    settle          = var.timings.settle
    watch           = var.timings.watch
    sample_interval = var.timings.sample_interval
    stale_job       = var.timings.stale_job
    chain_wait      = var.timings.chain_wait
    no_progress     = var.timings.no_progress
  }
}

# The verdict-only pass after the deploy: it runs again whenever the node gets a new
# generation or a new node plan, and judges the toplevel the deploy put in place.
resource "fediversity_verdict" "node" {
  for_each = local.nodes

  node              = fediversity_node_switch.node[each.key].node
  toplevel          = fediversity_node_switch.node[each.key].toplevel
  submission_digest = local.digest
  submission_file   = var.submission_file
  strict            = var.strict
  secret_chain      = var.secret_chain
  loop_budgets      = var.loop_budgets

  incus {
    instance = local.target[each.key].instance
    project  = local.target[each.key].project
  }

  # The node plan's hash is known at plan: when it changes, the plan shows the pass
  # running again, with the new submission digest, even before the new generation is
  # known.
  triggers = {
    generation = tostring(fediversity_node_switch.node[each.key].generation)
    node_plan  = sha256(data.fediversity_submission.this.node_plans[each.key])
  }

  timings {
    node_wait       = var.timings.node_wait
    settle          = var.timings.verdict_settle != null ? var.timings.verdict_settle : var.timings.settle
    watch           = var.timings.verdict_watch != null ? var.timings.verdict_watch : var.timings.watch
    sample_interval = var.timings.sample_interval
    stale_job       = var.timings.stale_job
    chain_wait      = var.timings.chain_wait
    no_progress     = var.timings.no_progress
  }
}
