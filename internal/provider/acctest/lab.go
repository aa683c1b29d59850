package acctest

import (
	"fmt"
	"os"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// Lab skips unless both TF_ACC and the lab are enabled.
func Lab(t *testing.T) {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1 (and FEDIVERSITY_LAB=1 with the lab up)")
	}
	labtest.Require(t)
}

func LabProvider() string {
	return fmt.Sprintf(`
provider "fediversity" {
  ssh_private_key_file = %q
}
`, labtest.KeyFile())
}
