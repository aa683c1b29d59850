package k8s

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
)

// The SPIRE part of fediversity_k8s_rollout: with `spire_handoff` set, the pod gets the
// projected token of node-<node> (audience spire-server, one hour, root only) and the
// ConfigMap spire-agent (see internal/k8s/spire_agent.go for what the node configuration
// must do with them).

const rolloutSpireAttr = "spire_handoff"

func rolloutSpireAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		Optional:   true,
		Validators: []validator.String{sameAsNamespace{}},
		MarkdownDescription: "The `id` of the namespace's `fediversity_spire_handoff` (which also orders the hand-off before the Deployment). " +
			"When set, the pod gets a projected token of the service account `node-<node>` with audience `spire-server` and a one-hour life " +
			"(renewed by the kubelet), mounted read-only with mode 0400 at `" + k8s.SpireTokenDir + "/" + k8s.SpireTokenFile + "` so only root " +
			"in the pod can read it, and the ConfigMap `spire-agent` (the trust bundle) at `" + k8s.SpireBundleDir + "`. " +
			"The node configuration must run the SPIRE agent with the `k8s_psat` attestor (cluster `<namespace>.<node>`), give it a copy of " +
			"the token that a root service makes again well within the hour (e.g. every 10 minutes), and trust `" + k8s.SpireBundleDir + "/" +
			k8s.SpireBundleKey + "`. Setting or clearing it rolls the node out again."}
}

func spireAgentWanted(v types.String) bool { return v.ValueString() != "" }

// sameAsNamespace refuses a hand-off of another namespace: the k8s_psat cluster and the
// token's service account are the namespace's own.
type sameAsNamespace struct{}

func (sameAsNamespace) Description(_ context.Context) string {
	return "must be the id of the hand-off of this namespace (the namespace itself)"
}
func (v sameAsNamespace) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (sameAsNamespace) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	var ns types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("namespace"), &ns)...)
	if ns.IsUnknown() || ns.IsNull() || ns.ValueString() == req.ConfigValue.ValueString() {
		return
	}
	resp.Diagnostics.AddAttributeError(req.Path, "SPIRE hand-off of another namespace",
		fmt.Sprintf("spire_handoff = %q, but this node is in namespace %q: give it the id of the fediversity_spire_handoff of namespace %q.",
			req.ConfigValue.ValueString(), ns.ValueString(), ns.ValueString()))
}
