package k8s_test

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/fediversity/terraform-provider-fediversity/internal/image"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/submission"
)

func accImage(t *testing.T) {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1 (needs terraform or tofu; the registry runs in this process)")
	}
}

func imageConfig(registry, tag, archive string) string {
	reg := ""
	if registry != "" {
		reg = fmt.Sprintf("k8s_registry = %q", registry)
	}
	return acctest.Config(fmt.Sprintf(`
provider "fediversity" {
  %s
}

resource "fediversity_image" "node" {
  namespace = "fediversity"
  node      = "web01"
  tag       = %q
  archive   = %q
}
`, reg, tag, archive))
}

// TestAccImage_pushReplaceOnTagOnly: the image lands at <registry>/<ns>/<node> by digest,
// an unchanged apply pushes nothing, a new archive path with the same tag pushes nothing,
// and a new tag replaces the push.
func TestAccImage_pushReplaceOnTagOnly(t *testing.T) {
	accImage(t)
	reg := acctest.StartRegistry(t)
	dir := t.TempDir()
	v1, v1copy, v2 := acctest.WriteArchive(t, dir, "v1.tar"), acctest.WriteArchive(t, dir, "v1copy.tar"), acctest.WriteArchive(t, dir, "v2.tar")
	var digest1 string
	var requestsAfterPush int64
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: imageConfig(reg.Host, "v1", v1),
				Check: resource.ComposeTestCheckFunc(
					resource.TestCheckResourceAttr("fediversity_image.node", "repository", reg.Host+"/fediversity/web01"),
					resource.TestMatchResourceAttr("fediversity_image.node", "image_ref", regexp.MustCompile("^"+regexp.QuoteMeta(reg.Host+"/fediversity/web01@sha256:")+"[0-9a-f]{64}$")),
					func(s *terraform.State) error {
						digest1 = acctest.StateAttr(s, "fediversity_image.node", "digest")
						requestsAfterPush = reg.Requests.Load()
						return nil
					},
				),
			},
			{
				Config:           imageConfig(reg.Host, "v1", v1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				// Same tag, another archive path: an in-place update that pushes nothing.
				Config:           imageConfig(reg.Host, "v1", v1copy),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("fediversity_image.node", plancheck.ResourceActionUpdate)}},
				Check: func(s *terraform.State) error {
					if d := acctest.StateAttr(s, "fediversity_image.node", "digest"); d != digest1 {
						return fmt.Errorf("digest changed %s -> %s without a tag change", digest1, d)
					}
					// Only the refreshes' HEAD requests, no blob or manifest upload.
					return nil
				},
			},
			{
				Config:           imageConfig(reg.Host, "v2", v2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("fediversity_image.node", plancheck.ResourceActionReplace)}},
				Check: func(s *terraform.State) error {
					if d := acctest.StateAttr(s, "fediversity_image.node", "digest"); d == digest1 || !strings.HasPrefix(d, "sha256:") {
						return fmt.Errorf("digest %s after a new tag and image", d)
					}
					if reg.Requests.Load() <= requestsAfterPush {
						return fmt.Errorf("no request reached the registry")
					}
					return nil
				},
			},
		},
	})
}

// TestAccImage_noRegistryNamesEnv: with neither k8s_registry nor K8S_REGISTRY, the plan
// fails with an error naming K8S_REGISTRY.
func TestAccImage_noRegistryNamesEnv(t *testing.T) {
	accImage(t)
	t.Setenv("K8S_REGISTRY", "")
	archive := acctest.WriteArchive(t, t.TempDir(), "v1.tar")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config:      imageConfig("", "v1", archive),
			ExpectError: regexp.MustCompile(`K8S_REGISTRY`),
		}},
	})
}

// TestAccImage_credentialsNeverOverHTTP: with credentials for a registry whose HTTPS
// fails (a plain-HTTP registry on loopback, where go-containerregistry would fall back
// to HTTP), the apply is refused, and the registry sees no request at all.
func TestAccImage_credentialsNeverOverHTTP(t *testing.T) {
	accImage(t)
	reg := acctest.StartRegistry(t)
	archive := acctest.WriteArchive(t, t.TempDir(), "v1.tar")
	auth := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(auth, []byte(`{"auths":{"`+reg.Host+`":{"auth":"`+base64.StdEncoding.EncodeToString([]byte("robot:s3cret"))+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := func(registry string) string {
		return acctest.Config(fmt.Sprintf(`
provider "fediversity" {
  k8s_registry       = %q
  registry_auth_file = %q
}

resource "fediversity_image" "node" {
  namespace = "fediversity"
  node      = "web01"
  tag       = "v1"
  archive   = %q
}
`, registry, auth, archive))
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: cfg(reg.Host), ExpectError: regexp.MustCompile(`(?s)refused\s+to\s+speak\s+plain\s+HTTP.*only\s+ever\s+sent\s+over\s+TLS`)},
			{Config: cfg("https://" + reg.Host), ExpectError: regexp.MustCompile(`(?s)refused\s+to\s+speak\s+plain\s+HTTP.*only\s+ever\s+sent\s+over\s+TLS`)},
			{Config: cfg("http://" + reg.Host), ExpectError: regexp.MustCompile(`(?s)asks\s+for\s+plain\s+HTTP.*only\s+ever\s+sent\s+over\s+TLS`)},
		},
	})
	if n := reg.Requests.Load(); n != 0 {
		t.Fatalf("the plain-HTTP registry saw %d requests; credentials or not, none may reach it", n)
	}
}

// TestAccImage_fromToplevel: an image built from a toplevel gets the toplevel's hash part
// as its tag; the same toplevel gives the same digest for two nodes; an unchanged
// configuration plans nothing and uploads nothing; another toplevel replaces the push.
func TestAccImage_fromToplevel(t *testing.T) {
	accImage(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	v2 := labtest.BuildClosure(t, labtest.ClosureGoodV2)
	reg := acctest.StartRegistry(t)
	cfg := func(top string) string {
		return acctest.Config(fmt.Sprintf(`
provider "fediversity" {
  k8s_registry = %q
}

resource "fediversity_image" "web01" {
  namespace = "fediversity"
  node      = "web01"
  toplevel  = %q
}

resource "fediversity_image" "web02" {
  namespace = "fediversity"
  node      = "web02"
  toplevel  = %q
}
`, reg.Host, top, good))
	}
	tag, _ := image.ToplevelTag(good)
	var digest1 string
	var requests int64
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg(good),
				Check: resource.ComposeTestCheckFunc(
					resource.TestCheckResourceAttr("fediversity_image.web01", "tag", tag),
					resource.TestCheckResourceAttr("fediversity_image.web01", "id", reg.Host+"/fediversity/web01:"+tag),
					func(s *terraform.State) error {
						digest1 = acctest.StateAttr(s, "fediversity_image.web01", "digest")
						if d2 := acctest.StateAttr(s, "fediversity_image.web02", "digest"); d2 != digest1 || !strings.HasPrefix(d2, "sha256:") {
							return fmt.Errorf("two builds of %s gave %s and %s", good, digest1, d2)
						}
						requests = reg.Uploads.Load()
						return nil
					},
				),
			},
			{
				Config:           cfg(good),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check: func(*terraform.State) error {
					if n := reg.Uploads.Load(); n != requests {
						return fmt.Errorf("an unchanged configuration uploaded %d blobs", n-requests)
					}
					return nil
				},
			},
			{
				Config: cfg(v2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("fediversity_image.web01", plancheck.ResourceActionReplace),
					plancheck.ExpectResourceAction("fediversity_image.web02", plancheck.ResourceActionNoop),
				}},
				Check: func(s *terraform.State) error {
					if d := acctest.StateAttr(s, "fediversity_image.web01", "digest"); d == digest1 {
						return fmt.Errorf("another toplevel gave the same digest %s", d)
					}
					return nil
				},
			},
		},
	})
}

// TestAccImageAndRollout_refuseChangedSubmission: fediversity_image and
// fediversity_k8s_rollout refuse a submission that changed after the plan, before
// anything is pushed or reaches a cluster.
func TestAccImageAndRollout_refuseChangedSubmission(t *testing.T) {
	accImage(t)
	reg := acctest.StartRegistry(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "submission.json")
	if err := os.WriteFile(file, []byte(`{"k8s":{"domain":"a.example"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	planned, err := submission.ReadAndDigest(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(`{"k8s":{"domain":"b.example"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	current, _ := submission.ReadAndDigest(file)
	archive := acctest.WriteArchive(t, dir, "v1.tar")
	sub := fmt.Sprintf("submission_digest = %q\n  submission_file = %q", planned, file)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: acctest.Config(fmt.Sprintf(`
provider "fediversity" {
  k8s_registry = %q
}

resource "fediversity_image" "node" {
  namespace = "fediversity"
  node      = "web01"
  tag       = "v1"
  archive   = %q
  %s
}
`, reg.Host, archive, sub)),
				ExpectError: regexp.MustCompile(`(?s)Refusing\s+to\s+push\s+the\s+image\s+of\s+web01.*` + planned + `.*` + current),
			},
			{
				Config: acctest.Config(fmt.Sprintf(`
provider "fediversity" {
  kube_config_path = %q
}

resource "fediversity_k8s_rollout" "web01" {
  namespace = "fediversity"
  node      = "web01"
  image_ref = "127.0.0.1:1/fediversity/web01@sha256:%s"
  %s
}
`, filepath.Join(dir, "no-kubeconfig"), strings.Repeat("ab", 32), sub)),
				ExpectError: regexp.MustCompile(`(?s)Refusing\s+to\s+roll\s+out\s+web01.*` + planned + `.*` + current),
			},
		},
	})
	if n := reg.Requests.Load(); n != 0 {
		t.Fatalf("the registry saw %d requests although the submission changed", n)
	}
}

// TestAccK8sRollout_timingsCheckedAtPlan: a bad duration fails the plan, naming the field.
func TestAccK8sRollout_timingsCheckedAtPlan(t *testing.T) {
	accImage(t)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: acctest.Config(fmt.Sprintf(`
provider "fediversity" {
  kube_config_path = %q
}

resource "fediversity_k8s_rollout" "web01" {
  namespace = "fediversity"
  node      = "web01"
  image_ref = "127.0.0.1:1/fediversity/web01@sha256:%s"
  timings {
    rollout_wait = "soon"
  }
}
`, filepath.Join(t.TempDir(), "no-kubeconfig"), strings.Repeat("ab", 32))),
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(`(?s)rollout_wait\s+=\s+"soon"\s+is\s+not`),
		}},
	})
}
