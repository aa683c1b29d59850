package k8s

import (
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// defaultRuntimeClass is the method's RuntimeClass when none is configured.
const defaultRuntimeClass = "fediversity"

// submissionRefused is checkSubmission for the k8s resources: the diagnostics alone.
func submissionRefused(digest, file types.String, verb, node string) diag.Diagnostics {
	d, _ := kit.CheckSubmission(digest, file, verb, node)
	return d
}
