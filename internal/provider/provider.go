// Package provider translates between the OpenTofu/Terraform plugin framework and the
// engine packages (internal/submission, internal/deploybody, the transports,
// internal/k8s, internal/image). It holds schemas, models and diagnostics only: all
// deploy, merge, rollout and push logic lives in the engines, which never import the
// plugin framework. This root package holds the provider, its configuration and the
// registry; the objects live per family in node, k8s, spire and submission, over the
// shared kit, which holds the Config handed to every object.
//
// Per-run values (SSH key location, agent socket, kubeconfig, registry, registry auth,
// Incus client certificates) are configured here or read from their environment
// variables. They are handed to resources through ProviderData and are never written
// to state, to a plan, to a trigger or to a node plan.
package provider

import (
	"context"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

var _ provider.Provider = &fediversityProvider{}

// New returns a constructor of the provider, as providerserver.Serve wants it.
func New(version string) func() provider.Provider {
	return func() provider.Provider {
		return &fediversityProvider{version: version}
	}
}

type fediversityProvider struct {
	version string
}

// providerModel is the provider block. Every attribute is optional; unset ones fall back
// to their environment variable, then to a documented default.
type providerModel struct {
	SSHPrivateKeyFile types.String      `tfsdk:"ssh_private_key_file"`
	SSHAuthSock       types.String      `tfsdk:"ssh_auth_sock"`
	KubeConfigPath    types.String      `tfsdk:"kube_config_path"`
	K8sRegistry       types.String      `tfsdk:"k8s_registry"`
	K8sNamespace      types.String      `tfsdk:"k8s_namespace"`
	RegistryAuthFile  types.String      `tfsdk:"registry_auth_file"`
	RegistryInsecure  types.Bool        `tfsdk:"registry_insecure"`
	Incus             *incusRemote      `tfsdk:"incus"`
	Timings           *kit.TimingsModel `tfsdk:"timings"`
}

// incusRemote says how to reach the Incus API: the local unix socket by default, or an
// HTTPS address with client certificate files and a pinned server certificate.
type incusRemote struct {
	Socket         types.String `tfsdk:"socket"`
	Address        types.String `tfsdk:"address"`
	ClientCertFile types.String `tfsdk:"client_cert_file"`
	ClientKeyFile  types.String `tfsdk:"client_key_file"`
	ServerCertFile types.String `tfsdk:"server_cert_file"`
	Project        types.String `tfsdk:"project"`
}

func (p *fediversityProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "fediversity"
	resp.Version = p.version
}

func (p *fediversityProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Deploys NixOS nodes of a Fediversity submission over SSH or the Incus API, " +
			"judges whether their systemd units came up, and rolls node images out to Kubernetes. " +
			"Every attribute here is a per-run value: it is read at each run, never stored in state " +
			"or in a node plan, and changing it never causes a diff.",
		Attributes: map[string]schema.Attribute{
			"ssh_private_key_file": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Path of the SSH private key used to reach nodes. Default: `SSH_PRIVATE_KEY_FILE`. " +
					"When neither is set, the SSH agent at `ssh_auth_sock` is used. Never stored in state.",
			},
			"ssh_auth_sock": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Path of the SSH agent socket. Default: `SSH_AUTH_SOCK`. Never stored in state.",
			},
			"kube_config_path": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Path of the kubeconfig for the k8s resources. Default: `KUBE_CONFIG_PATH`. Never stored in state.",
			},
			"k8s_registry": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Registry host (and optional path prefix) that node images are pushed to. Default: `K8S_REGISTRY`.",
			},
			"k8s_namespace": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Base Kubernetes namespace. Default: `K8S_NAMESPACE`, then `fediversity`.",
			},
			"registry_auth_file": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Containers auth JSON file with registry credentials. Default: `REGISTRY_AUTH_FILE`. An entry is a host or a `host/path`; the most specific one that is a prefix of the image repository wins (as containers-auth.json(5) says). Never stored in state. Credentials are only ever sent over TLS.",
			},
			"registry_insecure": schema.BoolAttribute{
				Optional: true,
				MarkdownDescription: "Allow plain HTTP to a registry that is not on loopback (`http://host` in `k8s_registry`, or a fallback after HTTPS). " +
					"Default false: `https://` means TLS only, and plain HTTP is used only for a loopback registry. Never for credentials.",
			},
		},
		Blocks: map[string]schema.Block{
			"incus": schema.SingleNestedBlock{
				MarkdownDescription: "How to reach the Incus API. Default: the local unix socket (`INCUS_SOCKET`, then `/var/lib/incus/unix.socket`).",
				Attributes: map[string]schema.Attribute{
					"socket":           schema.StringAttribute{Optional: true, MarkdownDescription: "Unix socket of a local incusd. Default: `INCUS_SOCKET`, then `/var/lib/incus/unix.socket`."},
					"address":          schema.StringAttribute{Optional: true, MarkdownDescription: "HTTPS address of a remote incusd, e.g. `https://127.0.0.1:8443`. When set, the client certificate files are required."},
					"client_cert_file": schema.StringAttribute{Optional: true, MarkdownDescription: "PEM client certificate for the HTTPS remote."},
					"client_key_file":  schema.StringAttribute{Optional: true, MarkdownDescription: "PEM client key for the HTTPS remote. Never stored in state."},
					"server_cert_file": schema.StringAttribute{Optional: true, MarkdownDescription: "PEM server certificate that the HTTPS remote must present (pinned)."},
					"project":          schema.StringAttribute{Optional: true, MarkdownDescription: "Default Incus project. Default: `default`."},
				},
			},
			"timings": kit.TimingsProviderBlock(),
		},
	}
}

func (p *fediversityProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	cfg := &kit.Config{
		Version:           p.version,
		SSHPrivateKeyFile: stringOrEnv(m.SSHPrivateKeyFile, "SSH_PRIVATE_KEY_FILE", ""),
		SSHAuthSock:       stringOrEnv(m.SSHAuthSock, "SSH_AUTH_SOCK", ""),
		KubeConfigPath:    stringOrEnv(m.KubeConfigPath, "KUBE_CONFIG_PATH", ""),
		K8sRegistry:       stringOrEnv(m.K8sRegistry, "K8S_REGISTRY", ""),
		K8sNamespace:      stringOrEnv(m.K8sNamespace, "K8S_NAMESPACE", "fediversity"),
		RegistryAuthFile:  stringOrEnv(m.RegistryAuthFile, "REGISTRY_AUTH_FILE", ""),
		RegistryInsecure:  m.RegistryInsecure.ValueBool(),
		IncusSocket:       envOr("INCUS_SOCKET", "/var/lib/incus/unix.socket"),
		IncusProject:      "default",
	}
	if m.Incus != nil {
		cfg.IncusSocket = stringOrEnv(m.Incus.Socket, "INCUS_SOCKET", "/var/lib/incus/unix.socket")
		cfg.IncusAddress = m.Incus.Address.ValueString()
		cfg.IncusClientCert = m.Incus.ClientCertFile.ValueString()
		cfg.IncusClientKey = m.Incus.ClientKeyFile.ValueString()
		cfg.IncusServerCert = m.Incus.ServerCertFile.ValueString()
		if v := m.Incus.Project.ValueString(); v != "" {
			cfg.IncusProject = v
		}
		if cfg.IncusAddress != "" && (cfg.IncusClientCert == "" || cfg.IncusClientKey == "") {
			resp.Diagnostics.AddAttributeError(path.Root("incus").AtName("address"),
				"Incomplete Incus remote",
				"incus.address is set, so incus.client_cert_file and incus.client_key_file are required: "+
					"the HTTPS remote authenticates this provider by its client certificate.")
		}
	}
	t, diags := m.Timings.ToTimings(path.Root("timings"))
	resp.Diagnostics.Append(diags...)
	cfg.Timings = t
	if resp.Diagnostics.HasError() {
		return
	}
	cfg.Clients = kit.NewClients(cfg)
	resp.DataSourceData = cfg
	resp.ResourceData = cfg
}

func (p *fediversityProvider) Resources(_ context.Context) []func() resource.Resource {
	return resources
}

func (p *fediversityProvider) DataSources(_ context.Context) []func() datasource.DataSource {
	return dataSources
}

// resources and dataSources are filled by each object's file (see registry.go), so that
// objects can be added without touching this file.
var (
	resources   []func() resource.Resource
	dataSources []func() datasource.DataSource
)

func stringOrEnv(v types.String, env, def string) string {
	if !v.IsNull() && !v.IsUnknown() && v.ValueString() != "" {
		return v.ValueString()
	}
	return envOr(env, def)
}

func envOr(env, def string) string {
	if e := os.Getenv(env); e != "" {
		return e
	}
	return def
}
