package k8s_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/fediversity/terraform-provider-fediversity/internal/image"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/submission"
)

// countRealise points nixstore at a wrapper around the real nix-store that counts its
// --realise runs (builds), and returns the count.
func countRealise(t *testing.T) func() int {
	t.Helper()
	dir := t.TempDir()
	count, wrapper := filepath.Join(dir, "count"), filepath.Join(dir, "nix-store")
	script := fmt.Sprintf("#!/bin/sh\n[ \"$1\" = --realise ] && echo run >>%q\nexec nix-store \"$@\"\n", count)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	prev := nixstore.NixStoreBin
	nixstore.NixStoreBin = wrapper
	t.Cleanup(func() { nixstore.NixStoreBin = prev })
	return func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "run\n")
	}
}

// TestAccImage_fromBuild: fediversity_image takes the node switch's `build` block (a
// flake here): evaluated at plan to `derivation`, its tag the derivation's hash part;
// two images of one derivation build it once; an unchanged plan evaluates nothing and
// pushes nothing; an edit of one node's module replaces that image only; a submission
// that changed since the plan is refused before anything is built or pushed.
func TestAccImage_fromBuild(t *testing.T) {
	accImage(t)
	evals := labtest.CountNixEvals(t)
	builds := countRealise(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	reg := acctest.StartRegistry(t)
	flake, lib := t.TempDir(), t.TempDir()
	acctest.WriteFlake(t, flake, lib, fmt.Sprintf("acc-image-%d", time.Now().UnixNano()))
	subFile := filepath.Join(t.TempDir(), "submission.json")
	acctest.WriteFile(t, subFile, `{"k8s":{"domain":"a.example"}}`)
	digest, err := submission.ReadAndDigest(subFile)
	if err != nil {
		t.Fatal(err)
	}

	imageOf := func(name, node string) string {
		return fmt.Sprintf(`
resource "fediversity_image" %q {
  namespace         = "fediversity"
  node              = %q
  node_plan         = jsonencode({ node = %q })
  submission_digest = %q
  submission_file   = %q
  build {
    flake = "path:%s#nixosConfigurations.%s.config.system.build.toplevel"
  }
}
`, name, name, node, digest, subFile, flake, node)
	}
	cfg := acctest.Config(fmt.Sprintf("provider \"fediversity\" {\n  k8s_registry = %q\n}\n", reg.Host) +
		imageOf("a", "a") + imageOf("a-copy", "a") + imageOf("b", "b"))
	const ra, rcopy, rb = "fediversity_image.a", "fediversity_image.a-copy", "fediversity_image.b"
	var digestA, digestB string
	var uploads int64
	var before int
	mark := func() { before = evals() }

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				Check: resource.ComposeTestCheckFunc(
					resource.TestMatchResourceAttr(ra, "derivation", regexp.MustCompile(`^/nix/store/[0-9a-z]{32}-nixos-system-fedi-acc\.drv$`)),
					func(s *terraform.State) error {
						drv := acctest.StateAttr(s, ra, "derivation")
						tag, _ := image.ToplevelTag(drv)
						if got := acctest.StateAttr(s, ra, "tag"); got != tag {
							return fmt.Errorf("tag %s, want the derivation's hash part %s", got, tag)
						}
						digestA, digestB = acctest.StateAttr(s, ra, "digest"), acctest.StateAttr(s, rb, "digest")
						if acctest.StateAttr(s, rcopy, "digest") != digestA || digestA == digestB || !strings.HasPrefix(digestA, "sha256:") {
							return fmt.Errorf("digests a %s, a-copy %s, b %s: want a and a-copy equal, b another", digestA, acctest.StateAttr(s, rcopy, "digest"), digestB)
						}
						if n := builds(); n != 2 {
							return fmt.Errorf("nix-store --realise ran %d times for two derivations (three images), want 2", n)
						}
						uploads = reg.Uploads.Load()
						return nil
					},
				),
			},
			{
				PreConfig:        mark,
				Config:           cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check: func(*terraform.State) error {
					if n := evals() - before; n != 0 {
						return fmt.Errorf("an unchanged plan ran nix eval %d times", n)
					}
					if n := reg.Uploads.Load(); n != uploads {
						return fmt.Errorf("an unchanged configuration uploaded %d blobs", n-uploads)
					}
					return nil
				},
			},
			{
				PreConfig: func() { acctest.WriteFile(t, filepath.Join(flake, "a.nix"), `"a-v2"`) },
				Config:    cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(ra, plancheck.ResourceActionReplace),
						plancheck.ExpectResourceAction(rcopy, plancheck.ResourceActionReplace),
						plancheck.ExpectResourceAction(rb, plancheck.ResourceActionNoop),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: func(s *terraform.State) error {
					if d := acctest.StateAttr(s, ra, "digest"); d == digestA || acctest.StateAttr(s, rb, "digest") != digestB {
						return fmt.Errorf("after the edit of a's module: a %s (was %s), b %s (was %s)", d, digestA, acctest.StateAttr(s, rb, "digest"), digestB)
					}
					return nil
				},
			},
			{
				PreConfig: func() {
					acctest.WriteFile(t, filepath.Join(flake, "a.nix"), `"a-v3"`)
					acctest.WriteFile(t, subFile, `{"k8s":{"domain":"b.example"}}`)
					uploads, before = reg.Uploads.Load(), builds()
				},
				Config:      cfg,
				ExpectError: regexp.MustCompile(`(?s)Refusing\s+to\s+push\s+the\s+image\s+of\s+a\b.*` + digest),
			},
		},
	})
	// A step that expects an error runs no Check: the refused step is the last, and the
	// destroy after it builds and pushes nothing.
	if reg.Uploads.Load() != uploads || builds() != before {
		t.Fatalf("a refused submission built (%d) or uploaded (%d)", builds()-before, reg.Uploads.Load()-uploads)
	}
}
