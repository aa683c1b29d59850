package kit

// The clients one provider configuration builds once and hands to every resource (as
// lxc/terraform-provider-incus does): the Incus API client, the SSH connection pool and
// the Kubernetes client. A transport opened for a node borrows them; it never makes its
// own HTTP client or SSH connection pool.

import (
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixeval"
	sshtransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/ssh"
)

// Clients are the shared clients of one provider configuration.
type Clients struct {
	// incus is the Incus API client, built in Configure; incusErr says why it could not
	// be (no socket, unreadable certificates). The error is reported only when a node is
	// reached over Incus, so a configuration that uses no Incus node does not fail.
	incus    *incusapi.Client
	incusErr error
	// ssh keeps one SSH connection per target, so the phases of a deploy and the Read of
	// the next plan reuse it.
	ssh *sshtransport.Pool
	// k8s is built on first use: reading the kubeconfig is only worth it, and only
	// possible, for a configuration with k8s resources.
	k8sOnce sync.Once
	k8s     *k8s.Client
	k8sErr  error
	// Nix evaluates and builds nodes' `build` blocks: the evaluation cache, one
	// evaluation per cache key and one build per derivation in this process.
	Nix *nixeval.Evaluator
}

// NewClients builds the clients of cfg.
func NewClients(cfg *Config) *Clients {
	c := &Clients{ssh: &sshtransport.Pool{}, Nix: nixeval.New()}
	if cfg.IncusAddress != "" {
		c.incus, c.incusErr = incusapi.NewHTTPS(incusapi.HTTPSConfig{
			URL: cfg.IncusAddress, ClientCertFile: cfg.IncusClientCert, ClientKeyFile: cfg.IncusClientKey, ServerCertFile: cfg.IncusServerCert,
		})
	} else {
		c.incus, c.incusErr = incusapi.NewUnix(cfg.IncusSocket)
	}
	if c.incus != nil {
		// The client is shared by every resource, so it has no request context to log
		// with: the plugin's standard log reaches the CLI's log (TF_LOG=WARN).
		c.incus.OnSlow = func(op string, took time.Duration) {
			log.Printf("[WARN] incus %s took %s: the daemon was slow to answer (transient faults were retried)", op, took.Round(time.Second))
		}
	}
	return c
}

// IncusClient is the configuration's Incus client, or why there is none.
func (cfg *Config) IncusClient() (*incusapi.Client, error) {
	if cfg.Clients == nil {
		return nil, ErrNotConfigured
	}
	return cfg.Clients.incus, cfg.Clients.incusErr
}

// sshPool is the configuration's SSH connection pool.
func (cfg *Config) sshPool() (*sshtransport.Pool, error) {
	if cfg.Clients == nil {
		return nil, ErrNotConfigured
	}
	return cfg.Clients.ssh, nil
}

// k8sClient is the configuration's Kubernetes client, made from the per-run kubeconfig
// on first use. The kubeconfig is read there and never copied anywhere else.
func (cfg *Config) k8sClient() (*k8s.Client, error) {
	if cfg.Clients == nil {
		return nil, ErrNotConfigured
	}
	cfg.Clients.k8sOnce.Do(func() {
		cfg.Clients.k8s, cfg.Clients.k8sErr = k8s.NewClient(cfg.KubeConfigPath)
	})
	return cfg.Clients.k8s, cfg.Clients.k8sErr
}

var ErrNotConfigured = fmt.Errorf("the provider's clients were not built (the provider was not configured); this is a bug in the provider")

// K8sClient is the provider configuration's Kubernetes client (made once, on first use,
// from the per-run kubeconfig), with a diagnostic naming what needed it.
func K8sClient(cfg *Config, node string) (*k8s.Client, diag.Diagnostics) {
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
