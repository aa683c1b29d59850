package k8s

// fediversity_k8s_rollout's `deploy` input: roll the node out to the configured image,
// or to its last good template's image (the last pod template seen ready, recorded on
// the Deployment: k8s.LastGoodAnnotation), with the same words and meaning as
// fediversity_node_switch's `deploy` (kit.DeployConfigured, kit.DeployLastGood).
//
// The plan takes the record as the refresh read it from the cluster and plans
// `image_ref` as its image, so the plan shows which nodes change, and to what
// (docs/kubernetes.md#k8s-last-good); the apply reads it again and refuses when it changed
// since the plan.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

func rolloutDeployAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		Optional: true,
		MarkdownDescription: "Which image to run, as fediversity_node_switch's `deploy`. `configured` (the default, also when unset): `image_ref`. " +
			"`last-good`: the node's last good template instead, the last pod template seen ready, which every ready rollout records on the " +
			"Deployment (annotation `" + k8s.LastGoodAnnotation + "`, mirrored in `last_good_image_ref`): the node is rolled out to that " +
			"template's image (with this resource's other settings, as configured). The plan takes the record as the refresh read it (`last_good_image_ref`; " +
			"a rollout not in the state yet reads the cluster) and shows `image_ref` changing to that image; a node with no record fails the plan, naming it. `image_ref` must then be unset (a module " +
			"passes `null`), since the plan sets it. The rollout is waited for as any other, and the apply refuses, untouched, when another " +
			"rollout recorded another template since the plan. Set it back to `configured` (with `image_ref`) to roll the configured image " +
			"out again. See docs/kubernetes.md#k8s-last-good.",
		Validators: kit.DeployValidators,
	}
}

func deploysLastGood(v types.String) bool { return v.ValueString() == kit.DeployLastGood }

// validateDeploy checks at validation that `image_ref` is set exactly when the node
// rolls out the configured image.
func validateDeploy(m k8sRolloutModel, diags *diag.Diagnostics) {
	if m.Deploy.IsUnknown() || m.ImageRef.IsUnknown() {
		return
	}
	node := m.Node.ValueString()
	switch {
	case deploysLastGood(m.Deploy) && !m.ImageRef.IsNull():
		diags.AddAttributeError(path.Root("image_ref"), fmt.Sprintf("`image_ref` is set for %s, which rolls out its last good template", node),
			fmt.Sprintf("With deploy = %q the plan sets `image_ref` of node %s to the image of its last good template, so the configuration must leave it unset: "+
				"remove `image_ref` (a module passes null) while deploy is %q, or set deploy = %q to roll out the configured image.",
				kit.DeployLastGood, node, kit.DeployLastGood, kit.DeployConfigured))
	case !deploysLastGood(m.Deploy) && m.ImageRef.IsNull():
		diags.AddAttributeError(path.Root("image_ref"), fmt.Sprintf("Node %s has no `image_ref`", node),
			fmt.Sprintf("Node %s rolls out the configured image (deploy = %q), so `image_ref` must name it by digest, "+
				"e.g. fediversity_image.<x>.image_ref; or set deploy = %q to roll it out to its last good template.",
				node, kit.DeployConfigured, kit.DeployLastGood))
	}
}

// planLastGood is ModifyPlan with `deploy = "last-good"`: the planned image_ref is the
// image of the node's last good template, read from the cluster now. It reports whether
// the node deploys its last good template (the rest of ModifyPlan then runs on that
// plan, as for a configured image).
func (r *k8sRolloutResource) planLastGood(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) bool {
	var deploy, ns, node types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("deploy"), &deploy)...)
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("namespace"), &ns)...)
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("node"), &node)...)
	if resp.Diagnostics.HasError() || (!deploy.IsUnknown() && !deploysLastGood(deploy)) {
		return false
	}
	if deploy.IsUnknown() || ns.IsUnknown() || node.IsUnknown() || r.cfg == nil {
		// Known at apply (the namespace, the choice or the provider's settings come
		// from a resource not made yet): the apply's own plan reads the record.
		planRollout(ctx, resp, types.StringUnknown())
		return true
	}
	name := node.ValueString()
	img, err := r.lastGoodAtPlan(ctx, req, ns.ValueString(), name)
	if err != nil {
		resp.Diagnostics.Append(lastGoodDiagnostic(name, err))
		return true
	}
	var stateImage types.String
	if !req.State.Raw.IsNull() {
		resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("image_ref"), &stateImage)...)
	}
	if stateImage.ValueString() != img {
		planRollout(ctx, resp, types.StringValue(img))
		return true
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("image_ref"), types.StringValue(img))...)
	return true
}

// lastGoodAtPlan is the image of the node's last good template as the plan sees it: the
// state's last_good_image_ref, which the refresh before the plan read from the
// Deployment's record. Not the cluster itself: Terraform plans again at apply and refuses
// an apply whose plan changed ("inconsistent final plan"), so the plan must take a value
// the apply's plan takes too; the apply then reads the record itself and refuses one
// that changed since (checkLastGoodUnchanged). A node not in the state yet (its rollout
// is created) has no refreshed record: the plan reads the cluster.
func (r *k8sRolloutResource) lastGoodAtPlan(ctx context.Context, req resource.ModifyPlanRequest, ns, node string) (string, error) {
	if !req.State.Raw.IsNull() {
		var recorded types.String
		if d := req.State.GetAttribute(ctx, path.Root("last_good_image_ref"), &recorded); d.HasError() {
			return "", errors.New(kit.SummarizeDiags(d))
		}
		if recorded.ValueString() == "" {
			return "", k8s.ErrNoLastGood
		}
		return recorded.ValueString(), nil
	}
	c, cdiags := kit.K8sClient(r.cfg, node)
	if cdiags.HasError() {
		return "", errors.New(kit.SummarizeDiags(cdiags))
	}
	rctx, cancel := context.WithTimeout(ctx, rolloutReadTimeout)
	defer cancel()
	return c.LastGoodImage(rctx, ns, node)
}

// planRollout plans image_ref as img and what a rollout changes as known only after it.
func planRollout(ctx context.Context, resp *resource.ModifyPlanResponse, img types.String) {
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("image_ref"), img)...)
	for _, a := range []string{"running_image_ref", "last_good_image_ref", "status"} {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root(a), types.StringUnknown())...)
	}
}

// lastGoodDiagnostic reports a node whose last good template cannot be rolled out, on
// the attribute that asked for it, in fediversity_node_switch's words.
func lastGoodDiagnostic(node string, err error) diag.Diagnostic {
	summary := fmt.Sprintf("Cannot read the last good template of %s", node)
	hint := "check that the cluster answers (kube_config_path or KUBE_CONFIG_PATH)"
	if errors.Is(err, k8s.ErrNoLastGood) {
		summary = fmt.Sprintf("Node %s has no last good template: no pod of it was ever seen ready", node)
		hint = k8s.NoLastGoodHint
	}
	return diag.NewAttributeErrorDiagnostic(path.Root("deploy"), summary,
		kit.FailureDetail("Node "+node, k8s.PhaseReadLastGood, err,
			fmt.Sprintf("deploy = %q needs one. %s, or set deploy = %q.", kit.DeployLastGood, upperFirst(hint), kit.DeployConfigured)))
}

// checkLastGoodUnchanged is the apply's step before a rollout with `deploy =
// "last-good"`: the record is read again, and a record that changed since the plan (a
// rollout in between recorded another template) is refused: the apply would roll out
// another image than the plan showed.
func checkLastGoodUnchanged(ctx context.Context, r *k8sRolloutResource, m k8sRolloutModel) diag.Diagnostics {
	var diags diag.Diagnostics
	if !deploysLastGood(m.Deploy) {
		return diags
	}
	node := m.Node.ValueString()
	c, cdiags := kit.K8sClient(r.cfg, node)
	if cdiags.HasError() {
		return cdiags
	}
	img, err := c.LastGoodImage(ctx, m.Namespace.ValueString(), node)
	switch {
	case err != nil:
		diags.Append(lastGoodDiagnostic(node, err))
	case img != m.ImageRef.ValueString():
		diags.AddAttributeError(path.Root("deploy"), fmt.Sprintf("The last good template of %s changed since the plan", node),
			kit.FailureDetail("Node "+node, k8s.PhaseReadLastGood,
				fmt.Errorf("its last good template runs %s now, but the plan showed %s: a rollout since the plan recorded another", img, m.ImageRef.ValueString()),
				"Plan again to see what the roll back rolls out; the node was left untouched."))
	}
	return diags
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
