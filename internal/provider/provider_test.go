package provider_test

import (
	"os"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

func TestMain(m *testing.M) { acctest.TestMain(m) }

// TestAccProviderBinary checks the scaffolding itself: the binary named by
// TF_ACC_TERRAFORM_PATH is the one reported, and an OpenTofu run reattaches the provider
// on OpenTofu's registry host (otherwise OpenTofu would try to download it).
func TestAccProviderBinary(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1")
	}
	acctest.PreCheck(t)
	if acctest.Binary.Path != os.Getenv("TF_ACC_TERRAFORM_PATH") {
		t.Fatalf("binary %s is not TF_ACC_TERRAFORM_PATH %s", acctest.Binary.Path, os.Getenv("TF_ACC_TERRAFORM_PATH"))
	}
	switch {
	case acctest.IsOpenTofu():
		if !strings.HasPrefix(acctest.ProviderAddress(), "registry.opentofu.org/") {
			t.Fatalf("OpenTofu run with provider address %s; set TF_ACC_PROVIDER_HOST=registry.opentofu.org", acctest.ProviderAddress())
		}
	case strings.HasPrefix(acctest.Binary.Version, "Terraform"):
	default:
		t.Fatalf("unrecognised binary version %q", acctest.Binary.Version)
	}
}
