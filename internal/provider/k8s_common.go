package provider

import (
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
)

var (
	dnsLabelRE  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	tagRE       = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	digestRefRE = regexp.MustCompile(`^[^@\s]+@sha256:[0-9a-f]{64}$`)
)

// defaultRuntimeClass is the method's RuntimeClass when none is configured.
const defaultRuntimeClass = "fediversity"

// k8sClient is the provider configuration's Kubernetes client (made once, on first use,
// from the per-run kubeconfig), with a diagnostic naming what needed it.
func k8sClient(cfg *Config, node string) (*k8s.Client, diag.Diagnostics) {
	var diags diag.Diagnostics
	if cfg == nil {
		diags.AddError("Provider not configured", "The fediversity provider was not configured. This is a bug in the provider.")
		return nil, diags
	}
	c, err := cfg.k8sClient()
	if err != nil {
		what := "the target namespace"
		if node != "" {
			what = "node " + node
		}
		diags.AddError("Unable to reach the cluster", "For "+what+": "+err.Error())
		return nil, diags
	}
	return c, diags
}

// submissionRefused is checkSubmission for the k8s resources: the diagnostics alone.
func submissionRefused(digest, file types.String, verb, node string) diag.Diagnostics {
	d, _ := checkSubmission(digest, file, verb, node)
	return d
}
