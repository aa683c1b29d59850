// Package node holds the provider's node objects: fediversity_node_switch (deploy one
// node), fediversity_verdict (judge one node) and fediversity_incus_node (one Incus
// container), with their models, the node run and the import address. It imports the
// shared internal/provider/kit and no other family (internal/archtest).
package node
