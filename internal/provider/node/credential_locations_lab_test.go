package node_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// credentialStage is one run's staged credentials: the SSH key that reaches the node (a
// copy of the lab's key), a kubeconfig and a registry auth file, in a directory of its
// own, as a CI job stages them under a fresh temporary directory each run.
type credentialStage struct{ dir, key, kubeconfig, registryAuth string }

func stageCredentials(t *testing.T, name string) credentialStage {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fediversity-stage-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s := credentialStage{dir: dir, key: filepath.Join(dir, "id_ed25519"),
		kubeconfig: filepath.Join(dir, "kubeconfig"), registryAuth: filepath.Join(dir, "auth.json")}
	labtest.CopyFile(t, labtest.KeyFile(), s.key)
	for file, text := range map[string]string{
		s.kubeconfig:   "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
		s.registryAuth: `{"auths": {}}`,
	} {
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// noStagedPath fails when any of the stages' directories appears in text.
func noStagedPath(what, text string, stages ...credentialStage) error {
	for _, s := range stages {
		if strings.Contains(text, s.dir) {
			return fmt.Errorf("%s holds the staged credential location %s", what, s.dir)
		}
	}
	return nil
}

// Credential locations are per-run values: two applies of the same submission whose
// SSH key, kubeconfig and registry auth file are staged at different paths (the first
// in the provider block, the second in the environment, after the first stage's
// directory was removed) give equal node plans and no diff. The second plan is empty;
// the submission's node plans, the node's plan and derivation are those of the first
// run; neither the state nor the plan's values hold either location, nor does the node
// plan the deployed system carries. Then a change of the node deploys with the second
// stage's key: the location that moved is really the one used to reach the node.
//
// Only the SSH key is used (the node is reached over SSH); nothing in this
// configuration reads the kubeconfig or the registry auth file, so for those two the
// test shows that their locations reach no plan and no state, not that a k8s object
// would use them.
func TestAccNodeSwitchCredentialLocationsGiveEqualPlans(t *testing.T) {
	acctest.Lab(t)
	node := labtest.NewInstance(t, "acc-cred-stage")
	a, b := stageCredentials(t, "aaaa"), stageCredentials(t, "bbbb")
	root := t.TempDir() // the operator tree: the plan names no file of it
	const (
		data   = "data.fediversity_submission.s"
		baked  = `{"nodes": {"web01": {"applications": ["mastodon"], "identity": {"instance": "fedi-web01"}}}, "applications": {"mastodon": {"enable": false}}, "domain": "baked.example", "email": "ops@baked.example"}`
		submit = `{"applications": {"mastodon": {"enable": true}}, "domain": "one.example"}`
	)
	config := func(providerBlock, seed string) string {
		return acctest.Config(providerBlock + fmt.Sprintf(`
data "fediversity_submission" "s" {
  submission_json = %q
  baked_json      = %q
  method          = "tf"
  operator_root   = %q
  identity_keys   = ["instance"]
}

resource "fediversity_node_switch" "n" {
  node      = %q
  node_plan = data.fediversity_submission.s.node_plans["web01"]
  build {
    file = %q
    args = { seed = %q }
  }
%s
%s
}
`, submit, baked, root, node.Name, testdataFile("node.nix"), seed, sshBlock(node), accTimings))
	}
	inProviderBlock := fmt.Sprintf(`
provider "fediversity" {
  ssh_private_key_file = %q
  kube_config_path     = %q
  registry_auth_file   = %q
}
`, a.key, a.kubeconfig, a.registryAuth)
	inEnvironment := `
provider "fediversity" {}
`
	toEnvironment := func() {
		if err := os.RemoveAll(a.dir); err != nil {
			t.Fatal(err)
		}
		t.Setenv("SSH_PRIVATE_KEY_FILE", b.key)
		t.Setenv("KUBE_CONFIG_PATH", b.kubeconfig)
		t.Setenv("REGISTRY_AUTH_FILE", b.registryAuth)
	}

	// What the first run planned, to compare the second with.
	var nodePlans, nodePlan, derivation, toplevel string
	attrs := func(s *terraform.State, res string) map[string]string {
		if r := s.RootModule().Resources[res]; r != nil {
			return r.Primary.Attributes
		}
		return nil
	}
	// The state's every attribute and output, and the node plan on the node.
	noPathAnywhere := func(s *terraform.State) error {
		var all strings.Builder
		for name, r := range s.RootModule().Resources {
			for k, v := range r.Primary.Attributes {
				fmt.Fprintf(&all, "%s.%s=%s\n", name, k, v)
			}
		}
		for name, o := range s.RootModule().Outputs {
			fmt.Fprintf(&all, "output.%s=%v\n", name, o.Value)
		}
		if err := noStagedPath("the state", all.String(), a, b); err != nil {
			return err
		}
		onNode := nodeExec(t, node, "cat /run/current-system/etc/fediversity/node-plan.json")
		if !strings.Contains(onNode, "fedi-web01") {
			return fmt.Errorf("the deployed system's node plan %q is not web01's", onNode)
		}
		return noStagedPath("the node plan on the node", onNode, a, b)
	}
	// The plan's values (not its configuration, which holds the provider block as
	// written).
	noPathInPlan := planCheckFunc(func(p *tfjson.Plan) error {
		for what, v := range map[string]any{"the planned changes": p.ResourceChanges, "the planned values": p.PlannedValues, "the prior state": p.PriorState, "the output changes": p.OutputChanges} {
			text, err := json.Marshal(v)
			if err != nil {
				return err
			}
			if err := noStagedPath(what, string(text), a, b); err != nil {
				return err
			}
		}
		return nil
	})

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:           config(inProviderBlock, "acc-cred-stage-1"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{noPathInPlan}},
				Check: func(s *terraform.State) error {
					nodePlans = attrs(s, data)["node_plans.web01"]
					n := attrs(s, addr)
					nodePlan, derivation, toplevel = n["node_plan"], n["derivation"], n["toplevel"]
					if nodePlans == "" || nodePlan != nodePlans || derivation == "" {
						return fmt.Errorf("web01's plan %q, the node's plan %q, derivation %q: want the submission's plan deployed", nodePlans, nodePlan, derivation)
					}
					if err := nodeAgreesWithState(t, node, s, toplevel); err != nil {
						return err
					}
					return noPathAnywhere(s)
				},
			},
			{
				// The same submission; the credentials staged elsewhere, and given another way.
				PreConfig: toEnvironment,
				Config:    config(inEnvironment, "acc-cred-stage-1"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectEmptyPlan(), noPathInPlan},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: func(s *terraform.State) error {
					n := attrs(s, addr)
					if got := attrs(s, data)["node_plans.web01"]; got != nodePlans {
						return fmt.Errorf("web01's node plan with the credentials moved:\n%s\nthe first run's:\n%s", got, nodePlans)
					}
					if n["node_plan"] != nodePlan || n["derivation"] != derivation || n["toplevel"] != toplevel {
						return fmt.Errorf("the node's plan, derivation and toplevel moved with the credentials: %q %q %q, first %q %q %q",
							n["node_plan"], n["derivation"], n["toplevel"], nodePlan, derivation, toplevel)
					}
					return noPathAnywhere(s)
				},
			},
			{
				// A real change deploys with the key where the second stage put it.
				Config: config(inEnvironment, "acc-cred-stage-2"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate), noPathInPlan,
				}},
				Check: func(s *terraform.State) error {
					n := attrs(s, addr)
					if n["toplevel"] == toplevel || n["node_plan"] != nodePlan {
						return fmt.Errorf("after the change: toplevel %s (was %s), node plan %q (was %q): want a new system with the same plan", n["toplevel"], toplevel, n["node_plan"], nodePlan)
					}
					if err := nodeAgreesWithState(t, node, s, n["toplevel"]); err != nil {
						return err
					}
					return noPathAnywhere(s)
				},
			},
		},
	})
}
