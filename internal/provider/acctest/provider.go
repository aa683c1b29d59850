// Package acctest is the shared scaffolding of the provider's acceptance tests, which
// live beside their objects in the family packages (node, k8s, spire, submission) and,
// for the modules and examples, in the top-level test folder. Every acceptance test uses
// ProtoV6ProviderFactories, calls PreCheck(t) in PreCheck, and wraps its configuration
// in Config(...), so that the same test runs under Terraform and under OpenTofu:
//
//	TF_ACC=1 TF_ACC_TERRAFORM_PATH=/usr/local/bin/terraform go test ./internal/provider/... ./test/ -run TestAcc
//	TF_ACC=1 TF_ACC_TERRAFORM_PATH=$(bash lab/build-tofu.sh) TF_ACC_PROVIDER_NAMESPACE=fediversity \
//	    TF_ACC_PROVIDER_HOST=registry.opentofu.org go test ./internal/provider/... ./test/ -run TestAcc
//
// terraform-plugin-testing serves the provider in this process and hands its address
// to the binary through TF_REATTACH_PROVIDERS as <host>/<namespace>/fediversity. The
// configuration must name the same address in required_providers, or OpenTofu (whose
// default host is registry.opentofu.org) tries to download the provider. TestMain
// (each acceptance test package's TestMain calls it) fills in what is unset: the binary
// (terraform, then tofu, from PATH), the namespace (fediversity) and, when the binary is
// OpenTofu, the host (registry.opentofu.org). The family packages' acceptance tests are
// external test packages (package node_test, …): this package imports the provider,
// which imports the families.
package acctest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider"
)

// ProtoV6ProviderFactories serves the provider under test to the binary.
var ProtoV6ProviderFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"fediversity": providerserver.NewProtocol6WithError(provider.New("test")()),
}

// Binary is what TestMain found out about the binary the acceptance tests run.
var Binary struct {
	Path    string
	Version string // first line of `<binary> version`, e.g. "OpenTofu v1.10.6"
	err     error
}

// TestMain is every acceptance test package's TestMain: with TF_ACC set, it prepares
// the environment before the tests run.
func TestMain(m *testing.M) {
	if os.Getenv("TF_ACC") != "" {
		prepareAcceptanceEnv()
	}
	os.Exit(m.Run())
}

// prepareAcceptanceEnv fills in the environment terraform-plugin-testing reads and that
// the caller left unset. It never overrides a value the caller set.
func prepareAcceptanceEnv() {
	bin := os.Getenv("TF_ACC_TERRAFORM_PATH")
	if bin == "" {
		for _, name := range []string{"terraform", "tofu"} {
			if p, err := exec.LookPath(name); err == nil {
				bin = p
				break
			}
		}
		if bin == "" {
			Binary.err = fmt.Errorf("TF_ACC_TERRAFORM_PATH is unset and neither terraform nor tofu is on PATH; " +
				"set TF_ACC_TERRAFORM_PATH=/usr/local/bin/terraform or TF_ACC_TERRAFORM_PATH=$(bash lab/build-tofu.sh)")
			return
		}
		setenvForAcceptance("TF_ACC_TERRAFORM_PATH", bin)
	}
	Binary.Path = bin
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "version")
	cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1")
	out, err := cmd.Output()
	if err != nil {
		Binary.err = fmt.Errorf("%s version: %w", bin, err)
		return
	}
	Binary.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if os.Getenv("TF_ACC_PROVIDER_NAMESPACE") == "" {
		setenvForAcceptance("TF_ACC_PROVIDER_NAMESPACE", "fediversity")
	}
	if IsOpenTofu() && os.Getenv("TF_ACC_PROVIDER_HOST") == "" {
		setenvForAcceptance("TF_ACC_PROVIDER_HOST", "registry.opentofu.org")
	}
}

func setenvForAcceptance(name, value string) {
	if err := os.Setenv(name, value); err != nil && Binary.err == nil {
		Binary.err = fmt.Errorf("set %s: %w", name, err)
	}
}

func IsOpenTofu() bool {
	return strings.HasPrefix(Binary.Version, "OpenTofu")
}

// ProviderAddress is the address the binary reattaches the provider under test to.
func ProviderAddress() string {
	host := os.Getenv("TF_ACC_PROVIDER_HOST")
	if host == "" {
		host = "registry.terraform.io"
	}
	ns := os.Getenv("TF_ACC_PROVIDER_NAMESPACE")
	if ns == "" {
		ns = "hashicorp"
	}
	return strings.TrimSuffix(host, "/") + "/" + ns + "/fediversity"
}

// PreCheck fails the test when the binary cannot run, and logs which binary and
// provider address the test uses, so that a test log shows whether Terraform or
// OpenTofu ran it.
func PreCheck(t *testing.T) {
	t.Helper()
	if Binary.err != nil {
		t.Fatalf("acceptance test binary: %v", Binary.err)
	}
	t.Logf("acceptance binary: %s (%s), provider %s", Binary.Version, Binary.Path, ProviderAddress())
}

// Config puts the required_providers block that names the provider under test
// in front of an acceptance-test configuration.
func Config(body string) string {
	return fmt.Sprintf(`terraform {
  required_providers {
    fediversity = {
      source = %q
    }
  }
}

%s`, ProviderAddress(), body)
}
