// Package k8s holds the provider's Kubernetes objects: fediversity_image (push a node
// image), fediversity_k8s_namespace and fediversity_k8s_rollout (one node as a
// Deployment), and the rollout's SPIRE wiring. It imports the shared
// internal/provider/kit and no other family (internal/archtest).
package k8s
