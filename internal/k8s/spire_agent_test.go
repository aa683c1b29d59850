package k8s

import "testing"

func TestBuildDeploymentWithSpireAgent(t *testing.T) {
	s := NodeSpec{Namespace: "ops", Node: "web01", Image: "r/ops/web01@sha256:0", ContainerUUID: "0f0e0d0c-0b0a-4908-8706-050403020100"}
	plain := BuildDeployment(s).Spec.Template.Spec
	s.SpireAgent = true
	spec := BuildDeployment(s).Spec.Template.Spec
	if len(spec.Volumes) != len(plain.Volumes)+2 {
		t.Fatalf("volumes: %d with SPIRE, %d without", len(spec.Volumes), len(plain.Volumes))
	}
	var token, bundle bool
	for _, v := range spec.Volumes {
		if p := v.Projected; p != nil {
			st := p.Sources[0].ServiceAccountToken
			token = st != nil && st.Audience == "spire-server" && *st.ExpirationSeconds == 3600 && *p.DefaultMode == 0o400
		}
		if v.ConfigMap != nil {
			bundle = v.ConfigMap.Name == "spire-agent"
		}
	}
	mounts := map[string]bool{}
	for _, m := range spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = m.ReadOnly
	}
	if !token || !bundle || !mounts[SpireTokenDir] || !mounts[SpireBundleDir] {
		t.Fatalf("token %v bundle %v mounts %v", token, bundle, mounts)
	}
	if spec.ServiceAccountName != "node-web01" {
		t.Fatalf("the token must be of node-web01, the pod runs as %s", spec.ServiceAccountName)
	}
}
