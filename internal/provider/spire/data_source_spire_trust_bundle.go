package spire

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

var (
	_ datasource.DataSource              = &spireTrustBundleDataSource{}
	_ datasource.DataSourceWithConfigure = &spireTrustBundleDataSource{}
)

// NewSpireTrustBundleDataSource is the fediversity_spire_trust_bundle data source.
func NewSpireTrustBundleDataSource() datasource.DataSource { return &spireTrustBundleDataSource{} }

type spireTrustBundleDataSource struct{ cfg *kit.Config }

type spireTrustBundleModel struct {
	ID        types.String    `tfsdk:"id"`
	PEM       types.String    `tfsdk:"pem"`
	SHA256    types.String    `tfsdk:"sha256"`
	SpireNode *spireNodeModel `tfsdk:"spire_node"`
}

func (d *spireTrustBundleDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_spire_trust_bundle"
}

func (d *spireTrustBundleDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The X.509 trust bundle of the SPIRE server, read from the spire node at plan time " +
			"(`spire-server bundle show` over SSH). Give `pem` to `fediversity_spire_handoff.trust_bundle` (it becomes the ConfigMap " +
			"`spire-agent`) and to `fediversity_spire_registration.trust_bundle`. An unchanged bundle changes nothing; after the server " +
			"prepares a new CA (a rotation) the bundle holds it too, and the next plan shows the change. A spire node that does not " +
			"answer fails the plan, the plan of a destroy too.",
		Attributes: map[string]schema.Attribute{
			"id":     schema.StringAttribute{Computed: true, MarkdownDescription: "`sha256` of the bundle."},
			"pem":    schema.StringAttribute{Computed: true, MarkdownDescription: "The bundle: every CA certificate the agents must trust, PEM."},
			"sha256": schema.StringAttribute{Computed: true, MarkdownDescription: "Hex sha256 of `pem`."},
		},
		Blocks: map[string]schema.Block{spireNodeBlock: dataSourceBlock(spireNodeBlockSchema())},
	}
}

// dataSourceBlock turns a resource's single nested block of plain attributes (strings,
// numbers, booleans, and nested blocks of them) into the data source form.
func dataSourceBlock(b rschema.SingleNestedBlock) schema.SingleNestedBlock {
	out := schema.SingleNestedBlock{MarkdownDescription: b.MarkdownDescription, Attributes: map[string]schema.Attribute{}, Blocks: map[string]schema.Block{}}
	for name, a := range b.Attributes {
		switch a := a.(type) {
		case rschema.StringAttribute:
			out.Attributes[name] = schema.StringAttribute{Optional: true, MarkdownDescription: a.MarkdownDescription, Validators: a.Validators}
		case rschema.Int64Attribute:
			out.Attributes[name] = schema.Int64Attribute{Optional: true, MarkdownDescription: a.MarkdownDescription, Validators: a.Validators}
		case rschema.BoolAttribute:
			out.Attributes[name] = schema.BoolAttribute{Optional: true, MarkdownDescription: a.MarkdownDescription}
		default:
			panic(fmt.Sprintf("dataSourceBlock: attribute %s of type %T", name, a))
		}
	}
	for name, nb := range b.Blocks {
		out.Blocks[name] = dataSourceBlock(nb.(rschema.SingleNestedBlock))
	}
	return out
}

func (d *spireTrustBundleDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	kit.ConfigureObject(&d.cfg, req.ProviderData, "the data source fediversity_spire_trust_bundle", &resp.Diagnostics)
}

func (d *spireTrustBundleDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m spireTrustBundleModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	sn, diags := resolveSpireNode(m.SpireNode, d.cfg)
	if resp.Diagnostics.Append(diags...); diags.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	srv, _, err := openSpireServer(ctx, sn, d.cfg)
	var pem string
	if err == nil {
		pem, err = srv.Bundle(ctx)
	}
	if err != nil {
		spireUnreachable(&resp.Diagnostics, "The trust bundle", sn, err)
		return
	}
	sum := sha256.Sum256([]byte(pem))
	m.PEM = types.StringValue(pem)
	m.SHA256 = types.StringValue(hex.EncodeToString(sum[:]))
	m.ID = m.SHA256
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
