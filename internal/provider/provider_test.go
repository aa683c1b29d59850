package provider

// Shared scaffolding of the provider's acceptance tests. Every acceptance test of this
// package uses testAccProtoV6ProviderFactories, calls testAccPreCheck(t) in PreCheck,
// and wraps its configuration in testAccConfig(...), so that the same test runs under
// Terraform and under OpenTofu:
//
//	TF_ACC=1 TF_ACC_TERRAFORM_PATH=/usr/local/bin/terraform go test ./internal/provider/ -run TestAcc
//	TF_ACC=1 TF_ACC_TERRAFORM_PATH=$(bash lab/build-tofu.sh) TF_ACC_PROVIDER_NAMESPACE=fediversity \
//	    TF_ACC_PROVIDER_HOST=registry.opentofu.org go test ./internal/provider/ -run TestAcc
//
// terraform-plugin-testing serves the provider in this process and hands its address
// to the binary through TF_REATTACH_PROVIDERS as <host>/<namespace>/fediversity. The
// configuration must name the same address in required_providers, or OpenTofu (whose
// default host is registry.opentofu.org) tries to download the provider. TestMain
// fills in what is unset: the binary (terraform, then tofu, from PATH), the namespace
// (fediversity) and, when the binary is OpenTofu, the host (registry.opentofu.org).

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
)

// testAccProtoV6ProviderFactories serves the provider under test to the binary.
var testAccProtoV6ProviderFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"fediversity": providerserver.NewProtocol6WithError(New("test")()),
}

// testAccBinary is what TestMain found out about the binary the acceptance tests run.
var testAccBinary struct {
	path    string
	version string // first line of `<binary> version`, e.g. "OpenTofu v1.10.6"
	err     error
}

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
			testAccBinary.err = fmt.Errorf("TF_ACC_TERRAFORM_PATH is unset and neither terraform nor tofu is on PATH; " +
				"set TF_ACC_TERRAFORM_PATH=/usr/local/bin/terraform or TF_ACC_TERRAFORM_PATH=$(bash lab/build-tofu.sh)")
			return
		}
		setenvForAcceptance("TF_ACC_TERRAFORM_PATH", bin)
	}
	testAccBinary.path = bin
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "version")
	cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1")
	out, err := cmd.Output()
	if err != nil {
		testAccBinary.err = fmt.Errorf("%s version: %w", bin, err)
		return
	}
	testAccBinary.version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if os.Getenv("TF_ACC_PROVIDER_NAMESPACE") == "" {
		setenvForAcceptance("TF_ACC_PROVIDER_NAMESPACE", "fediversity")
	}
	if testAccIsOpenTofu() && os.Getenv("TF_ACC_PROVIDER_HOST") == "" {
		setenvForAcceptance("TF_ACC_PROVIDER_HOST", "registry.opentofu.org")
	}
}

func setenvForAcceptance(name, value string) {
	if err := os.Setenv(name, value); err != nil && testAccBinary.err == nil {
		testAccBinary.err = fmt.Errorf("set %s: %w", name, err)
	}
}

func testAccIsOpenTofu() bool {
	return strings.HasPrefix(testAccBinary.version, "OpenTofu")
}

// testAccProviderAddress is the address the binary reattaches the provider under test to.
func testAccProviderAddress() string {
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

// testAccPreCheck fails the test when the binary cannot run, and logs which binary and
// provider address the test uses, so that a test log shows whether Terraform or
// OpenTofu ran it.
func testAccPreCheck(t *testing.T) {
	t.Helper()
	if testAccBinary.err != nil {
		t.Fatalf("acceptance test binary: %v", testAccBinary.err)
	}
	t.Logf("acceptance binary: %s (%s), provider %s", testAccBinary.version, testAccBinary.path, testAccProviderAddress())
}

// testAccConfig puts the required_providers block that names the provider under test
// in front of an acceptance-test configuration.
func testAccConfig(body string) string {
	return fmt.Sprintf(`terraform {
  required_providers {
    fediversity = {
      source = %q
    }
  }
}

%s`, testAccProviderAddress(), body)
}

// TestAccProviderBinary checks the scaffolding itself: the binary named by
// TF_ACC_TERRAFORM_PATH is the one reported, and an OpenTofu run reattaches the provider
// on OpenTofu's registry host (otherwise OpenTofu would try to download it).
func TestAccProviderBinary(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1")
	}
	testAccPreCheck(t)
	if testAccBinary.path != os.Getenv("TF_ACC_TERRAFORM_PATH") {
		t.Fatalf("binary %s is not TF_ACC_TERRAFORM_PATH %s", testAccBinary.path, os.Getenv("TF_ACC_TERRAFORM_PATH"))
	}
	switch {
	case testAccIsOpenTofu():
		if !strings.HasPrefix(testAccProviderAddress(), "registry.opentofu.org/") {
			t.Fatalf("OpenTofu run with provider address %s; set TF_ACC_PROVIDER_HOST=registry.opentofu.org", testAccProviderAddress())
		}
	case strings.HasPrefix(testAccBinary.version, "Terraform"):
	default:
		t.Fatalf("unrecognised binary version %q", testAccBinary.version)
	}
}
