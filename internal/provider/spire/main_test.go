package spire_test

import (
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

func TestMain(m *testing.M) { acctest.TestMain(m) }
