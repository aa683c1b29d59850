package kit

import (
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// Config is what every resource and data source receives in Configure. It holds the
// resolved per-run values. None of its fields may be copied into state.
type Config struct {
	Version           string
	SSHPrivateKeyFile string
	SSHAuthSock       string
	KubeConfigPath    string
	K8sRegistry       string
	K8sNamespace      string
	RegistryAuthFile  string
	RegistryInsecure  bool
	IncusSocket       string
	IncusAddress      string
	IncusClientCert   string
	IncusClientKey    string
	IncusServerCert   string
	IncusProject      string
	// Timings holds the provider-level defaults; a zero field means "engine default".
	Timings Timings

	// Clients are built once in Configure and shared by every resource (clients.go).
	Clients *Clients
}

// Timings are the tunable waits and thresholds, one per row of the engine's timing
// table. A zero value means "not set here".
type Timings = deploybody.Timings

// ConfigureObject is the one place that takes the provider's Config from what the
// framework hands a resource or data source in Configure. The framework also calls
// Configure before the provider is configured (data is then nil): dst stays as it is.
func ConfigureObject(dst **Config, data any, object string, diags *diag.Diagnostics) {
	if data == nil {
		return
	}
	cfg, ok := data.(*Config)
	if !ok {
		diags.AddError("Unexpected provider data",
			fmt.Sprintf("%s wants *kit.Config, got %T. This is a bug in the provider; please report it.", object, data))
		return
	}
	*dst = cfg
}
