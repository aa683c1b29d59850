package k8s

import (
	corev1 "k8s.io/api/core/v1"
)

// What a node's pod gets when the SPIRE coordinates are set (k8s-operator):
//
//   - a projected token of its service account node-<node>, audience spire-server, that
//     lives SpireTokenLifetime; the kubelet renews it before it expires (at 80% of its
//     life). It is mounted read-only at SpireTokenDir with mode 0400, owned by root: only
//     root in the pod can read it;
//   - the ConfigMap spire-agent (the trust bundle), mounted read-only at SpireBundleDir.
//
// The node configuration must run the agent with k8s_psat and cluster <namespace>.<node>
// (spire.K8sCluster), give
// it a copy of SpireTokenDir/token (the agent's token_path) and make that copy again, as
// root, well within SpireTokenLifetime (e.g. a timer every 10 minutes), and use
// SpireBundleDir/bundle.crt as its trust bundle.

// SpireAudience is the audience of the node token.
const SpireAudience = "spire-server"

// SpireTokenLifetime bounds the projected token's life.
const SpireTokenLifetime int64 = 3600

// SpireTokenDir and SpireBundleDir are where the pod sees the token and the bundle.
const (
	SpireTokenDir  = "/run/spire-agent/token"
	SpireBundleDir = "/run/spire-agent/bundle"
)

// SpireTokenFile is the token's name inside SpireTokenDir.
const SpireTokenFile = "token"

// withSpireAgent adds the token and the bundle to a node's pod spec.
func withSpireAgent(spec *corev1.PodSpec) {
	lifetime := SpireTokenLifetime
	rootOnly := int32(0o400)
	readable := int32(0o444)
	spec.Volumes = append(spec.Volumes,
		corev1.Volume{Name: "spire-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: &rootOnly,
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: SpireAudience, ExpirationSeconds: &lifetime, Path: SpireTokenFile,
			}}},
		}}},
		corev1.Volume{Name: "spire-bundle", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: SpireAgentConfigMap}, DefaultMode: &readable,
		}}},
	)
	for i := range spec.Containers {
		if spec.Containers[i].Name != ContainerName {
			continue
		}
		spec.Containers[i].VolumeMounts = append(spec.Containers[i].VolumeMounts,
			corev1.VolumeMount{Name: "spire-token", MountPath: SpireTokenDir, ReadOnly: true},
			corev1.VolumeMount{Name: "spire-bundle", MountPath: SpireBundleDir, ReadOnly: true},
		)
	}
}
