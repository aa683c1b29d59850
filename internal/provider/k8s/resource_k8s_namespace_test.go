package k8s_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// TestAccK8sNamespace_notOursUnlessImported: a namespace the provider did not create is
// refused at plan (nothing is pushed or applied); imported, it is managed; a change of the
// base namespace plans a replacement, and the plan warns with the claims it deletes. Run
// through the CLI, because the warnings are what the operator reads.
func TestAccK8sNamespace_notOursUnlessImported(t *testing.T) {
	a := newK8sAcc(t)
	ctx := context.Background()
	if _, err := a.C.CS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.Ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := newCLIRun(t)
	r.write(a.Good("v1", "v1"))
	code, out := r.run("plan", "-input=false", "-no-color")
	if code == 0 || !regexp.MustCompile(`(?s)exists\s+and\s+is\s+not\s+the\s+provider's.*`+a.Ns+`.*import\s+it`).MatchString(out) {
		t.Fatalf("plan against a namespace the provider did not create: exit %d\n%s", code, out)
	}
	if n := a.Reg.Requests.Load(); n != 0 {
		t.Fatalf("the registry saw %d requests although the plan failed", n)
	}
	if _, err := a.C.CS.NetworkingV1().NetworkPolicies(a.Ns).Get(ctx, k8s.NetworkPolicyName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the namespace that is not ours was changed (NetworkPolicy: %v)", err)
	}

	if code, out := r.run("import", "-input=false", "-no-color", "fediversity_k8s_namespace.ns", a.Ns); code != 0 {
		t.Fatalf("import: exit %d\n%s", code, out)
	}
	if code, out := r.run("apply", "-auto-approve", "-input=false", "-no-color"); code != 0 {
		t.Fatalf("apply after the import: exit %d\n%s", code, out)
	}
	if _, err := a.ReadyPod(); err != nil {
		t.Fatal(err)
	}

	// Another base namespace: the old one, with web01's claim, is replaced.
	oldNS := a.Ns
	a.Ns = oldNS + "-b"
	t.Cleanup(func() { _ = a.C.CS.CoreV1().Namespaces().Delete(context.Background(), a.Ns, metav1.DeleteOptions{}) })
	r.write(a.Good("v1", "v1"))
	code, out = r.run("plan", "-input=false", "-no-color")
	if code != 0 {
		t.Fatalf("plan of the new namespace: exit %d\n%s", code, out)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"fediversity_k8s_namespace.ns must be replaced",
		"Replacing namespace " + oldNS + " deletes 1 claims",
		"will be deleted with the namespace: web01-state",
	} {
		if !strings.Contains(flat, want) {
			t.Fatalf("the plan lacks %q:\n%s", want, out)
		}
	}
	a.Ns = oldNS
	r.write(a.Good("v1", "v1"))
	if code, out := r.run("destroy", "-auto-approve", "-input=false", "-no-color"); code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), "web01-state") {
		t.Fatalf("destroy: exit %d, want success and a warning naming the claim\n%s", code, out)
	}
}

// TestAccK8sNamespace_recreatedBySomeoneElse: the namespace is deleted behind the state's
// back and someone re-creates the name, with the provider's label even (as another state
// of this provider would). The destroy refuses, naming both UIDs, and leaves it, with
// whatever is in it.
func TestAccK8sNamespace_recreatedBySomeoneElse(t *testing.T) {
	a := newK8sAcc(t)
	cfg := acctest.Config(a.Provider(a.Reg.Host) + `
resource "fediversity_k8s_namespace" "ns" {}
`)
	var first, second string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				Check: func(s *terraform.State) error {
					first = acctest.StateAttr(s, "fediversity_k8s_namespace.ns", "uid")
					ns, err := a.C.CS.CoreV1().Namespaces().Get(context.Background(), a.Ns, metav1.GetOptions{})
					if err != nil || first == "" || string(ns.UID) != first {
						return fmt.Errorf("state uid %q, the namespace's %v (err %v)", first, ns.UID, err)
					}
					return nil
				},
			},
			{
				PreConfig: func() {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					if err := a.C.DeleteNamespace(ctx, a.Ns, first); err != nil {
						t.Fatal(err)
					}
					ns, err := a.C.CS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
						Name: a.Ns, Labels: map[string]string{k8s.ManagedByLabel: k8s.ManagedBy}}}, metav1.CreateOptions{})
					if err != nil {
						t.Fatal(err)
					}
					second = string(ns.UID)
					// Something of the other owner's in it, which a delete would take along.
					if _, err := a.C.CS.CoreV1().ConfigMaps(a.Ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}}, metav1.CreateOptions{}); err != nil {
						t.Fatal(err)
					}
				},
				Config:      cfg,
				Destroy:     true,
				ExpectError: regexp.MustCompile(`(?s)not\s+this\s+state's.*its\s+UID\s+is\s+\S+,\s+the\s+state\s+recorded\s+\S+.*re-created.*state\s+rm`),
			},
			{
				PreConfig: func() {
					ns, err := a.C.CS.CoreV1().Namespaces().Get(context.Background(), a.Ns, metav1.GetOptions{})
					if err != nil || string(ns.UID) != second || ns.DeletionTimestamp != nil {
						t.Fatalf("after the refused destroy the re-created namespace is %v (err %v), want it untouched (UID %s)", ns, err, second)
					}
					if _, err := a.C.CS.CoreV1().ConfigMaps(a.Ns).Get(context.Background(), "theirs", metav1.GetOptions{}); err != nil {
						t.Fatalf("the other owner's ConfigMap: %v", err)
					}
					// Let the post-test destroy find nothing: the other owner removes theirs.
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					if err := a.C.DeleteNamespace(ctx, a.Ns, second); err != nil {
						t.Fatal(err)
					}
				},
				Config:             cfg,
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
		},
	})
}

// TestAccK8sNamespace_perAppTargetsHoldTheirOwnDeployment: the `all` target and a
// per-app target of the same base namespace are two namespaces (the base, and the base
// with `-<app>`), so the same node deployed by both is two Deployments that never touch:
// each runs its own image and has its own claim. Destroy removes both namespaces.
func TestAccK8sNamespace_perAppTargetsHoldTheirOwnDeployment(t *testing.T) {
	a := newK8sAcc(t)
	perApp := a.Ns + "-matrix"
	t.Cleanup(func() { // a failed test must not leave the per-app namespace behind
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = a.C.CS.CoreV1().Namespaces().Delete(ctx, perApp, metav1.DeleteOptions{})
	})
	target := func(res, app, archive string) string {
		appLine := ""
		if app != "" {
			appLine = fmt.Sprintf("app = %q", app)
		}
		return fmt.Sprintf(`
resource "fediversity_k8s_namespace" %[1]q {
  %[2]s
}

resource "fediversity_image" %[1]q {
  namespace = fediversity_k8s_namespace.%[1]s.name
  node      = "web01"
  tag       = %[3]q
  archive   = %[4]q
}

resource "fediversity_k8s_rollout" %[1]q {
  namespace     = fediversity_k8s_namespace.%[1]s.name
  node          = "web01"
  image_ref     = fediversity_image.%[1]s.image_ref
  runtime_class = fediversity_k8s_namespace.%[1]s.runtime_class
  storage_class = "fediversity-lab"
  timings {
    rollout_wait = "90s"
    pull_grace   = "3s"
  }
}
`, res, appLine, archive, a.Archives[archive])
	}
	cfg := acctest.Config(a.Provider(a.Reg.Host) + target("all", "", "v1") + target("matrix", "matrix", "v2"))
	// deployment is the image the Deployment web01 of ns names, and its claim's UID.
	deployment := func(ns string) (string, string, error) {
		ctx := context.Background()
		d, err := a.C.CS.AppsV1().Deployments(ns).Get(ctx, "web01", metav1.GetOptions{})
		if err != nil {
			return "", "", fmt.Errorf("Deployment web01 in %s: %w", ns, err)
		}
		pvc, err := a.C.CS.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "web01-state", metav1.GetOptions{})
		if err != nil {
			return "", "", fmt.Errorf("claim web01-state in %s: %w", ns, err)
		}
		return d.Spec.Template.Spec.Containers[0].Image, string(pvc.UID), nil
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("fediversity_k8s_namespace.all", "name", a.Ns),
					resource.TestCheckResourceAttr("fediversity_k8s_namespace.matrix", "name", perApp),
					func(s *terraform.State) error {
						allImage, allClaim, err := deployment(a.Ns)
						if err != nil {
							return err
						}
						appImage, appClaim, err := deployment(perApp)
						if err != nil {
							return err
						}
						if want := acctest.StateAttr(s, "fediversity_image.all", "image_ref"); allImage != want {
							return fmt.Errorf("the all target's Deployment names %s, want its own image %s", allImage, want)
						}
						if want := acctest.StateAttr(s, "fediversity_image.matrix", "image_ref"); appImage != want {
							return fmt.Errorf("the per-app target's Deployment names %s, want its own image %s", appImage, want)
						}
						if allImage == appImage || allClaim == appClaim {
							return fmt.Errorf("the two targets share a Deployment's image (%s) or a claim (%s)", allImage, allClaim)
						}
						for _, ns := range []string{a.Ns, perApp} {
							pods, err := a.C.CS.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.NodeLabel + "=web01"})
							if err != nil || len(pods.Items) != 1 {
								return fmt.Errorf("pods of web01 in %s: %d (err %v), want 1", ns, len(pods.Items), err)
							}
						}
						return nil
					},
				),
			},
		},
		CheckDestroy: func(*terraform.State) error {
			for _, ns := range []string{a.Ns, perApp} {
				if _, err := a.C.CS.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("namespace %s after destroy: %v, want it gone", ns, err)
				}
			}
			return nil
		},
	})
}
