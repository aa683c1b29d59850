// Package spire is the SPIRE lane of the operator methods: it talks to the spire node
// (the machine that runs spire-server) through any transport that runs argv with stdin
// (the SSH transport in practice), and it keeps the registration entries, the k8s_psat
// clusters and the files the hand-off leaves there.
//
// Decisions:
//
//   - Entries reach the server through the spire-server CLI on the spire node
//     (`entry show|create|update|delete -output json`, the batch forms reading JSON from
//     stdin). The CLI talks to the server's local admin socket, so the deployer needs no
//     SPIRE credentials of its own, only root over SSH. Each entry the provider makes has
//     a deterministic entry ID (fediversity.k8s.<namespace>.<node>.alias|host,
//     fediversity.incus.<group>.<node>.alias|host): creation is idempotent by ID, a
//     changed entry is updated in place, and the entries of a namespace or group that
//     the configuration no longer names are deleted. Nothing is found by SPIFFE ID
//     prefix, which could catch entries someone else made.
//   - The drop-files are the spire node's record of the hand-off: one file per node under
//     /var/lib/spire/fediversity/k8s/<namespace>/nodes/<node>, next to the namespace's
//     kubeconfig. The k8s_psat attestor's clusters are generated on the spire node from
//     that tree (per drop-file the cluster <namespace>.<node>, allow list
//     <namespace>:node-<node> only, audience spire-server, the namespace's kubeconfig:
//     one cluster per node, since k8s_psat names an agent after its cluster and kubelet
//     node, and two nodes of a namespace may share a kubelet node) into the attestor's
//     plugin_data_file, and spire-server is told to reload it (SIGUSR1). A new namespace
//     or node so needs no restart of the server, and the attestor reads the kubeconfig
//     at each TokenReview, so a new token is taken up at once.
//   - Secrets go through stdin only: the kubeconfig (with the spire-server token) is
//     written by `sh -c 'cat >tmp && mv tmp file'` with the bytes on stdin; a join token
//     for an Incus node is read from the spire node's stdout into memory and written to
//     the node the same way. No secret is ever an argument, a log line, or returned to
//     the caller for storage.
//
// This package must not import the plugin framework.
package spire
