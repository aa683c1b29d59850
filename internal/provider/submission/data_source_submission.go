package submission

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/datasourcevalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
	"github.com/fediversity/terraform-provider-fediversity/internal/submission"
)

var (
	_ datasource.DataSource                     = &submissionDataSource{}
	_ datasource.DataSourceWithConfigure        = &submissionDataSource{}
	_ datasource.DataSourceWithConfigValidators = &submissionDataSource{}
)

// NewSubmissionDataSource is the constructor of data source fediversity_submission.
func NewSubmissionDataSource() datasource.DataSource {
	return &submissionDataSource{}
}

type submissionDataSource struct {
	// cfg holds the provider's per-run values. They are only used to refuse a plan
	// that would hold one of them; none is ever copied into the data source's state.
	cfg *kit.Config
}

type submissionModel struct {
	SubmissionFile       types.String `tfsdk:"submission_file"`
	SubmissionJSON       types.String `tfsdk:"submission_json"`
	BakedJSON            types.String `tfsdk:"baked_json"`
	Method               types.String `tfsdk:"method"`
	IdentityKeys         types.List   `tfsdk:"identity_keys"`
	Identity             types.Map    `tfsdk:"identity"`
	OperatorRoot         types.String `tfsdk:"operator_root"`
	Digest               types.String `tfsdk:"digest"`
	Merged               types.String `tfsdk:"merged"`
	NodePlans            types.Map    `tfsdk:"node_plans"`
	NodePlanDigests      types.Map    `tfsdk:"node_plan_digests"`
	EnabledNodes         types.List   `tfsdk:"enabled_nodes"`
	DisabledApplications types.List   `tfsdk:"disabled_applications"`
}

func (d *submissionDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_submission"
}

const submissionDataSourceDoc = "Reads a submitted configuration, merges it into the baked configuration and writes " +
	"one *node plan* per enabled node. Each node's plan is its own map element, so a plan diff shows which nodes " +
	"a change of the submission touches; hand `node_plans[<node>]` to the node's deploy, and `digest` with " +
	"`submission_file` to the resources so that an apply refuses a submission that changed after the plan.\n\n" +
	"**Baked configuration** (`baked_json`), a JSON object:\n\n" +
	"```json\n" +
	"{\n" +
	"  \"nodes\": {\n" +
	"    \"web01\": {\"applications\": [\"mastodon\"], \"identity\": {\"instance\": \"fedi-n1\"}, \"module\": {\"_file\": \"nodes/web01.nix\"}},\n" +
	"    \"web02\": {\"applications\": [\"pixelfed\"]}\n" +
	"  },\n" +
	"  \"applications\": {\"mastodon\": {\"enable\": true}, \"pixelfed\": {\"enable\": false}},\n" +
	"  \"domain\": \"example.org\",\n" +
	"  \"email\": \"ops@example.org\"\n" +
	"}\n" +
	"```\n\n" +
	"A node runs an application when it lists it and the merged configuration enables it (`\"enable\": true`; " +
	"a missing `enable` is off). A node that runs no enabled application is disabled: it gets no plan and is not in " +
	"`enabled_nodes`. A node entry's other keys are its settings; other top-level keys are shared by every node. " +
	"The node map must name at least one node, or the submission is refused.\n\n" +
	"**The merge** is a pure data merge. The submission has the same shape, usually only `applications`, `domain` " +
	"and `email`, which it may also put in the branch of a method (`{\"tf-incus\": {\"applications\": …}}`): these " +
	"three move out of the branch of the picked `method` to the top level, and every method branch is removed " +
	"(other keys of the picked branch are dropped with a warning). Objects merge key by key; any other value " +
	"replaces the baked one. An application the submission names without `\"enable\": true` is off; one it does not " +
	"name keeps its baked entry.\n\n" +
	"**A node plan** is canonical JSON: `{\"node\", \"method\", \"domain\", \"email\", \"applications\" (the enabled " +
	"applications the node runs), \"identity\" (declared identity keys only), \"settings\", \"shared\"}`. It is data " +
	"only: objects, lists, strings, numbers, booleans, null and file references `{\"_file\": \"path\"}`, stored relative " +
	"to `operator_root`. A reference outside the operator tree, a Nix store path, an unevaluated `${…}`, a Nix " +
	"function or module-system value (`__functor`, `_type`, a derivation), or a per-run credential location of the " +
	"provider fails the plan with an error that names the place, e.g. `$.nodes.web01.applications.mastodon.key`.\n\n" +
	"Credential locations (SSH key, agent socket, kubeconfig, registry auth, staged credentials) are per-run values: " +
	"they never enter a node plan, so two runs that stage them at different paths give equal plans and no diff."

func (d *submissionDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: submissionDataSourceDoc,
		Attributes: map[string]schema.Attribute{
			"submission_file": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Path of the submission JSON file, relative to the working directory of " +
					"`tofu`/`terraform` or absolute. Exactly one of `submission_file` and `submission_json` is set. " +
					"The file is read at every plan; changing its content changes `digest` and the plans of the nodes " +
					"it touches. Give the same path and the `digest` to the resources so that the apply re-reads it.",
				Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"submission_json": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The submission as a JSON string (e.g. from `jsonencode`). Exactly one of " +
					"`submission_file` and `submission_json` is set.",
				Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"baked_json": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "The baked configuration as a JSON object (e.g. `file(\"baked.json\")` or " +
					"`jsonencode({...})`): the node map, the applications and their defaults, `domain`, `email`, and " +
					"shared settings. Shape above. Changing it changes the plans of the nodes it touches.",
				Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"method": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "The picked deployment method, one of `" + strings.Join(submission.Methods, "`, `") + "`. " +
					"Its branch of the submission is raised to the top level. It is part of every node plan, so changing " +
					"it changes every plan.",
				Validators: []validator.String{stringvalidator.OneOf(submission.Methods...)},
			},
			"identity_keys": schema.ListAttribute{
				ElementType: types.StringType,
				Optional:    true,
				MarkdownDescription: "The declared node identity keys: every coordinate the node configuration reads " +
					"from the environment. Only these keys are copied into a plan's `identity`, so a change of their " +
					"value redeploys the node. Default: none. A key that names a credential (SSH key or agent socket, " +
					"kubeconfig, registry auth file, staged credential, token, password, secret) is refused.",
				Validators: []validator.List{
					listvalidator.UniqueValues(),
					listvalidator.ValueStringsAre(stringvalidator.LengthAtLeast(1)),
				},
			},
			"identity": schema.MapAttribute{
				ElementType: types.StringType,
				Optional:    true,
				MarkdownDescription: "Values of identity keys for every node; a node's own `identity` entry in the " +
					"baked configuration wins over them. Keys not in `identity_keys` are ignored, so a map that also holds " +
					"per-run values does not change any plan. The map itself is kept in the state, so per-run values " +
					"(paths under /tmp, /var/tmp, /run/user, /dev/shm, /dev/fd, /proc or $TMPDIR (also inside a longer value, as in `--identity=/tmp/k`), such as a staged credential) are refused. Default: empty.",
				Validators: []validator.Map{kit.PerRunMapValidator{}},
			},
			"operator_root": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Root of the operator tree. File references `{\"_file\": …}` are stored relative " +
					"to it and must stay inside it. Default: the working directory of `tofu`/`terraform`. Moving the " +
					"tree changes no plan; a reference that then falls outside it fails the plan.",
				Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"digest": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "sha256 (lower-case hex) of the canonical JSON (sorted keys, no insignificant " +
					"space) of the submission as read, before the merge. Formatting does not change it; any value does.",
			},
			"merged": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The merged configuration as canonical JSON, with every method branch removed.",
			},
			"node_plans": schema.MapAttribute{
				ElementType: types.StringType,
				Computed:    true,
				MarkdownDescription: "Enabled node name → canonical JSON of its node plan. Only enabled nodes have " +
					"an entry; a submission change shows as a change of exactly the entries of the nodes it touches.",
			},
			"node_plan_digests": schema.MapAttribute{
				ElementType:         types.StringType,
				Computed:            true,
				MarkdownDescription: "Enabled node name → sha256 (lower-case hex) of its node plan's canonical JSON.",
			},
			"enabled_nodes": schema.ListAttribute{
				ElementType: types.StringType,
				Computed:    true,
				MarkdownDescription: "Names of the nodes that run at least one enabled application, sorted; exactly " +
					"the keys of `node_plans`. Never holds a disabled node.",
			},
			"disabled_applications": schema.ListAttribute{
				ElementType:         types.StringType,
				Computed:            true,
				MarkdownDescription: "Applications of the merged configuration that are not enabled, sorted.",
			},
		},
	}
}

func (d *submissionDataSource) ConfigValidators(_ context.Context) []datasource.ConfigValidator {
	return []datasource.ConfigValidator{
		datasourcevalidator.ExactlyOneOf(path.MatchRoot("submission_file"), path.MatchRoot("submission_json")),
	}
}

func (d *submissionDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	kit.ConfigureObject(&d.cfg, req.ProviderData, "the data source fediversity_submission", &resp.Diagnostics)
}

func (d *submissionDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m submissionModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}

	in := submission.Input{
		Baked:        []byte(m.BakedJSON.ValueString()),
		Method:       m.Method.ValueString(),
		PerRunValues: kit.PerRunValues(d.cfg),
	}
	subAttr := path.Root("submission_json")
	if !m.SubmissionFile.IsNull() {
		subAttr = path.Root("submission_file")
		raw, err := submission.ReadFile(m.SubmissionFile.ValueString())
		if err != nil {
			resp.Diagnostics.AddAttributeError(subAttr, "Unable to read submission",
				fmt.Sprintf("submission_file = %q cannot be read: %v.\n\nGive the path of the submission JSON file, "+
					"relative to the directory tofu/terraform runs in or absolute, or pass the submission in submission_json.",
					m.SubmissionFile.ValueString(), err))
			return
		}
		in.Submission = raw
	} else {
		in.Submission = []byte(m.SubmissionJSON.ValueString())
	}

	resp.Diagnostics.Append(m.IdentityKeys.ElementsAs(ctx, &in.IdentityKeys, false)...)
	resp.Diagnostics.Append(m.Identity.ElementsAs(ctx, &in.Identity, false)...)
	if resp.Diagnostics.HasError() {
		return
	}

	root := m.OperatorRoot.ValueString()
	if m.OperatorRoot.IsNull() {
		root = "."
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("operator_root"), "Unable to read submission",
			fmt.Sprintf("operator_root = %q cannot be made absolute: %v. Give an absolute path.", root, err))
		return
	}
	in.OperatorRoot = abs

	res, err := submission.Evaluate(in)
	if err != nil {
		resp.Diagnostics.Append(evaluationDiagnostics(err, subAttr, m.SubmissionFile.ValueString())...)
		return
	}
	for _, w := range res.Warnings {
		resp.Diagnostics.AddAttributeWarning(subAttr, "Submission partly not deployed", w)
	}

	m.Digest = types.StringValue(res.Digest)
	m.Merged = types.StringValue(res.Merged)
	var diags diag.Diagnostics
	m.NodePlans, diags = types.MapValueFrom(ctx, types.StringType, res.NodePlans)
	resp.Diagnostics.Append(diags...)
	m.NodePlanDigests, diags = types.MapValueFrom(ctx, types.StringType, res.NodePlanDigests)
	resp.Diagnostics.Append(diags...)
	m.EnabledNodes, diags = types.ListValueFrom(ctx, types.StringType, res.EnabledNodes)
	resp.Diagnostics.Append(diags...)
	m.DisabledApplications, diags = types.ListValueFrom(ctx, types.StringType, res.DisabledApplications)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// maxEvaluationDiagnostics bounds how many problems are shown one by one; a broken
// document can have hundreds, and the first few say what is wrong.
const maxEvaluationDiagnostics = 10

// evaluationDiagnostics turns the engine's errors into one diagnostic per problem, each
// on the attribute the operator fixes.
func evaluationDiagnostics(err error, subAttr path.Path, subFile string) diag.Diagnostics {
	var diags diag.Diagnostics
	var errs submission.Errors
	if !errors.As(err, &errs) {
		diags.AddAttributeError(subAttr, "Unable to read submission", err.Error())
		return diags
	}
	for i, e := range errs {
		if i == maxEvaluationDiagnostics {
			diags.AddAttributeError(subAttr, "Unable to read submission",
				fmt.Sprintf("%d more problems are not shown; fix the ones above and plan again.", len(errs)-i))
			break
		}
		attr, where := subAttr, ""
		switch e.In {
		case submission.InSubmission:
			where = "The submission (" + subAttr.String() + ")"
			if subFile != "" {
				where = fmt.Sprintf("The submission file %s (%s)", subFile, subAttr)
			}
		case submission.InBaked:
			attr, where = path.Root("baked_json"), "The baked configuration (baked_json)"
		case submission.InMerged:
			attr, where = path.Root("baked_json"), "The merged configuration (baked_json with the submission laid over it)"
		case submission.InNodePlan:
			where = fmt.Sprintf("The plan of node %s, made from the submission and baked_json,", e.Node)
			// Point at the place the operator wrote, in the document that set it.
			switch e.Source {
			case submission.InBaked:
				attr = path.Root("baked_json")
				where = fmt.Sprintf("The plan of node %s (from baked_json at %s)", e.Node, e.SourcePath)
			case submission.InSubmission:
				where = fmt.Sprintf("The plan of node %s (from the submission, %s, at %s)", e.Node, subAttr, e.SourcePath)
			}
		case submission.InMethod:
			attr, where = path.Root("method"), "method"
		case submission.InIdentityKeys:
			attr, where = path.Root("identity_keys"), "identity_keys"
		default:
			attr, where = path.Root("operator_root"), "operator_root"
		}
		detail := fmt.Sprintf("%s is not usable at %s: %s.", where, e.Path, e.Problem)
		if e.Fix != "" {
			detail += "\n\nTo fix it: " + e.Fix + "."
		}
		diags.AddAttributeError(attr, "Unable to read submission", detail)
	}
	return diags
}
