package test

// The k8s guides' examples, applied as the guides print them, on the lab's real kubelet
// node (lab/k8s/node-up.sh): the pods really boot the systems the apply built. As
// TestAccGuideTFExampleApplies does for the tf guide, the example's main.tf is taken byte
// for byte from the file the guide prints (and checked against the generated page), its
// module comes from its printed source, and the test supplies only what an operator
// supplies:
//
//   - nodes.nix beside main.tf, whose attribute per node builds the node's system from
//     the node plan it is handed: here the lab's bootable stand-in system
//     (lab/closures/default.nix, attribute bootable), which copies that plan into its
//     toplevel and boots as PID 1 on the real node;
//   - terraform.tfvars naming the cluster's namespace (the test's own), RuntimeClass (the
//     real node's) and StorageClass (the real node's with a provisioner: the example's
//     storage sizes are claims a provisioner serves, as a cluster's default class does);
//   - the cluster and the registry in the environment: KUBE_CONFIG_PATH (the lab's
//     cluster) and K8S_REGISTRY (a registry on 127.0.0.1 of this test).
//
// The repository's sample baked.json and submission.json are the operator's
// configuration and submission as they are (their nodes are web01 and web02). The
// k8s-operator guide's example is applied the same way, with the lab's spire-server
// (TestAccSpireModuleK8sOperatorGuideExampleAppliesRealNode). Named TestAccModuleK8s…
// and TestAccSpire… so that CI runs them in the shards that have the cluster, the real
// node and a spire node.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

// guideK8sNodesNix is the operator's nodes.nix as the lab stands it in: each node of
// the sample configuration is the lab's stand-in system attribute of
// lab/closures/default.nix, built with the node plan handed as planFile and the
// arguments args(node) (Nix attributes, e.g. `seed = "x";`).
func guideK8sNodesNix(t *testing.T, root, dir, attribute string, args func(node string) string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "{ planFile ? \"\" }:\nlet\n  closures = import %s;\nin\n{\n", filepath.Join(root, "lab", "closures", "default.nix"))
	for _, n := range guideExampleNodes {
		fmt.Fprintf(&b, "  %s = (closures { inherit planFile; %s}).%s;\n", n, args(n), attribute)
	}
	b.WriteString("}\n")
	file := filepath.Join(dir, "nodes.nix")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// stateResource is one resource of `show -json`'s state, in any module.
type stateResource struct {
	Address string         `json:"address"`
	Type    string         `json:"type"`
	Values  map[string]any `json:"values"`
}

type stateModule struct {
	Resources    []stateResource `json:"resources"`
	ChildModules []stateModule   `json:"child_modules"`
}

// stateResourcesOf are the resources of type typ in the state of c, in every module,
// keyed by their `node` attribute.
func stateResourcesOf(t *testing.T, c *acctest.CLIDir, typ string) map[string]map[string]any {
	t.Helper()
	js, code := c.Run("show", "-json", "-no-color")
	if code != 0 {
		t.Fatalf("show -json exited %d:\n%s", code, js)
	}
	var st struct {
		Values struct {
			RootModule stateModule `json:"root_module"`
		} `json:"values"`
	}
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatalf("show -json: %v\n%s", err, js)
	}
	out := map[string]map[string]any{}
	var walk func(m stateModule)
	walk = func(m stateModule) {
		for _, r := range m.Resources {
			if r.Type == typ {
				node, _ := r.Values["node"].(string)
				out[node] = r.Values
			}
		}
		for _, cm := range m.ChildModules {
			walk(cm)
		}
	}
	walk(st.Values.RootModule)
	return out
}

// nixBuildNode builds attribute node of nodesNix with plan as its planFile, as an
// operator builds a node's system by hand, and returns the toplevel.
func nixBuildNode(t *testing.T, nodesNix, node, plan string) string {
	t.Helper()
	planFile := filepath.Join(t.TempDir(), "node-plan.json")
	if err := os.WriteFile(planFile, []byte(plan), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nix-build", "--no-out-link", nodesNix, "-A", node, "--argstr", "planFile", planFile)
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("nix-build %s -A %s: %v\n%s", nodesNix, node, err, stderr)
	}
	return strings.TrimSpace(string(out))
}

func TestAccModuleK8sGuideExampleAppliesRealNode(t *testing.T) {
	acctest.RequireRealNode(t)
	a := acctest.NewK8s(t)
	applyGuideK8sExample(t, a, guideK8sExample{
		guide: "k8s",
		nodesNix: func(root, dir string) string {
			return guideK8sNodesNix(t, root, dir, "bootable", func(string) string { return "" })
		},
	})
}

// The k8s-operator guide's example on the real node with the lab's spire-server: the
// operator's nodes.nix is the lab's bootable stand-in with a SPIRE agent
// (bootable-spire-agent: its fedi-spire-attested unit ends only once root holds the
// node's host SVID), and terraform.tfvars names the lab's spire node. Each node's pod
// is ready, and its verdict given, only after its agent attested to the real
// spire-server with the token the kubelet projected; the destroy evicts the agents.
func TestAccSpireModuleK8sOperatorGuideExampleAppliesRealNode(t *testing.T) {
	acctest.RequireRealNode(t)
	k := acctest.NewK8s(t)
	a := acctest.NewSpireInPod(t, k, guideExampleNodes...)
	agent := labtest.SpireAgentBinary(t)
	applyGuideK8sExample(t, k, guideK8sExample{
		guide: "k8s-operator",
		nodesNix: func(root, dir string) string {
			// Each node's agent names the node's own k8s_psat cluster, which the hand-off
			// trusts, and dials the server where the real node's pods reach it.
			return guideK8sNodesNix(t, root, dir, "bootable-spire-agent", func(n string) string {
				return fmt.Sprintf("spireAgent = %q; spireCluster = %q; spireServer = %q; spireServerPort = \"%d\"; ",
					agent, spire.K8sCluster(k.Ns, n), a.Server, a.Port)
			})
		},
		tfvars: fmt.Sprintf("spire_node = {\n  host     = %q\n  port     = %d\n  host_key = %q\n}\n", a.SN.SSHHost, a.SN.SSHPort, a.SN.HostKey),
		env:    []string{"SSH_PRIVATE_KEY_FILE=" + labtest.KeyFile()},
		booted: func(n string, _ *corev1.Pod) error {
			pod, err := a.AgentRuns(n)
			if err != nil {
				return err
			}
			if st, err := k.Exec(pod, "systemctl", "show", "-p", "ActiveState,Result", "fedi-spire-attested.service"); err != nil || st != "Result=success\nActiveState=active" {
				return fmt.Errorf("in pod %s of %s, fedi-spire-attested.service: %q (%v), want it ended with success before the verdict", pod.Name, n, st, err)
			}
			if err := a.HoldsHostSVID(pod, n); err != nil {
				return err
			}
			return a.ServerListsAgentOf(pod, n)
		},
		gone: func() error { return a.AgentsEvicted(nil) },
	})
}

// guideK8sExample is what differs between the k8s guides' examples as a test applies
// them.
type guideK8sExample struct {
	guide string // the guide's name: docs/guides/<guide>.md prints examples/guides/<guide>/main.tf
	// nodesNix writes the operator's nodes.nix into dir and returns it.
	nodesNix func(root, dir string) string
	// tfvars are the operator's settings besides namespace, runtime_class and storage_class.
	tfvars string
	// env is the operator's environment besides the cluster's and the registry's.
	env []string
	// booted checks more of node's booted, ready pod.
	booted func(node string, pod *corev1.Pod) error
	// gone checks more of what the destroy leaves.
	gone func() error
}

// applyGuideK8sExample applies the guide's example as printed on the real node with the
// operator's files of ex, checks that every node runs, booted, the image built from its
// system, that a second plan is empty, and that the destroy leaves nothing of the example
// in the cluster.
func applyGuideK8sExample(t *testing.T, a *acctest.K8s, ex guideK8sExample) {
	root := labtest.RepoRoot(t)
	example := "examples/guides/" + ex.guide
	mainTF := printedFile(t, root, ex.guide, "terraform", example+"/main.tf")
	if others, _ := filepath.Glob(filepath.Join(root, example, "*.tf")); len(others) != 1 {
		t.Fatalf("%s holds %d .tf files; the guide prints main.tf alone", example, len(others))
	}

	// The operator's directory: the printed main.tf, the sample configuration and
	// submission it reads from path.root, nodes.nix beside them and terraform.tfvars.
	c := acctest.NewCLIDir(t)
	if err := os.WriteFile(filepath.Join(c.Dir, "main.tf"), mainTF, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"baked.json", "submission.json"} {
		labtest.CopyFile(t, filepath.Join(root, example, f), filepath.Join(c.Dir, f))
	}
	nodesNix := ex.nodesNix(root, c.Dir)
	tfvars := fmt.Sprintf("namespace     = %q\nruntime_class = %q\nstorage_class = %q\n%s",
		a.Ns, acctest.RealNodeRuntimeClass, acctest.RealNodeProvisionedStorageClass, ex.tfvars)
	if err := os.WriteFile(filepath.Join(c.Dir, "terraform.tfvars"), []byte(tfvars), 0o600); err != nil {
		t.Fatal(err)
	}
	// The module comes by its printed source, from this tree's modules/ (see
	// exampleModulesGitConfig); the cluster and the registry from the environment, as
	// the example says (a later entry of an environment wins).
	gitConfig := exampleModulesGitConfig(t, root, []string{example})
	var env []string
	for _, kv := range withoutSSHAgent(c.Env) {
		if !strings.HasPrefix(kv, "K8S_NAMESPACE=") && !strings.HasPrefix(kv, "REGISTRY_AUTH_FILE=") {
			env = append(env, kv)
		}
	}
	c.Env = append(append(env, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+gitConfig,
		"KUBE_CONFIG_PATH="+a.Kc, "K8S_REGISTRY="+a.Reg.Host), ex.env...)

	if out, code := c.Run("get", "-no-color"); code != 0 {
		t.Fatalf("get (the module by its printed source) exited %d:\n%s", code, out)
	}
	destroyLeftOnCleanup(t, c)

	start := time.Now()
	out := c.MustApply("the " + ex.guide + " guide's example as printed")
	t.Logf("figure: the %s guide's example, one apply of 2 nodes on the real node (evaluate, build, push, canary or hand-off, roll out until systemd says running): %s",
		ex.guide, time.Since(start).Round(100*time.Millisecond))

	var outputs struct {
		Summary struct {
			Value exampleSummary `json:"value"`
		} `json:"summary"`
		Verdicts struct {
			Value map[string]struct {
				OK              bool   `json:"ok"`
				Status          string `json:"status"`
				RunningImageRef string `json:"running_image_ref"`
			} `json:"value"`
		} `json:"verdicts"`
	}
	readOutputs(t, c, &outputs)
	everyNodeOK(t, outputs.Summary.Value, guideExampleNodes, out)

	// Each node: its rollout ready, its Deployment naming the image the apply pushed,
	// built from the system nodes.nix builds for that node's plan, and its pod booted
	// into that system.
	images := stateResourcesOf(t, c, "fediversity_image")
	for _, n := range guideExampleNodes {
		v := outputs.Verdicts.Value[n]
		if !v.OK || v.Status != "ready" {
			t.Errorf("verdicts[%q]: ok %v, status %q; want ok and ready (verdicts %+v)", n, v.OK, v.Status, outputs.Verdicts.Value)
		}
		img := images[n]
		ref, _ := img["image_ref"].(string)
		plan, _ := img["node_plan"].(string)
		if ref == "" || plan == "" || !strings.Contains(plan, n) {
			t.Errorf("%s: the state's image has image_ref %q and node plan %q; want both, the plan of %s", n, ref, plan, n)
			continue
		}
		if v.RunningImageRef != ref {
			t.Errorf("%s runs %s by its verdict, want the image the apply pushed, %s", n, v.RunningImageRef, ref)
		}
		d, err := a.C.CS.AppsV1().Deployments(a.Ns).Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s's Deployment: %v", n, err)
			continue
		}
		if got := d.Spec.Template.Spec.Containers[0].Image; got != ref {
			t.Errorf("%s's Deployment names %s, want the pushed image %s", n, got, ref)
		}
		want := nixBuildNode(t, nodesNix, n, plan)
		top, err := deployedToplevel(a, n)
		if err != nil || top != want {
			t.Errorf("%s's image was built from %q (%v), want the system nodes.nix builds for its plan, %s", n, top, err, want)
		}
		pod, err := a.ReadyPodOf(n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if _, _, err := a.SystemdBooted(pod); err != nil {
			t.Errorf("%s: %v", n, err)
		}
		if cur, err := a.Exec(pod, "readlink", "/run/current-system"); err != nil || cur != want {
			t.Errorf("%s's pod runs %q (%v), want %s", n, cur, err, want)
		}
		t.Logf("%s: rollout %s, pod %s on %s booted, running %s (image %s)", n, v.Status, pod.Name, pod.Spec.NodeName, want, ref)
		if ex.booted != nil {
			if err := ex.booted(n, pod); err != nil {
				t.Error(err)
			}
		}
	}

	// The same files again: nothing to do.
	if out, code := c.Run("plan", "-no-color", "-detailed-exitcode"); code != 0 {
		t.Errorf("a second plan of the unchanged example exited %d (0: no changes):\n%s", code, out)
	}

	start = time.Now()
	destroyAll(t, c)
	// Nothing of the example stays in the cluster: the namespace (with its Deployments
	// and claims) and the volumes provisioned for the claims go.
	if err := waitGone(a, 3*time.Minute); err != nil {
		t.Error(err)
	}
	if ex.gone != nil {
		if err := ex.gone(); err != nil {
			t.Error(err)
		}
	}
	t.Logf("figure: the destroy, until the namespace and its volumes are gone: %s", time.Since(start).Round(100*time.Millisecond))
}

// waitGone waits until a's namespace is gone and no volume is bound to a claim of it.
func waitGone(a *acctest.K8s, limit time.Duration) error {
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	for {
		var left []string
		if _, err := a.C.CS.CoreV1().Namespaces().Get(ctx, a.Ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, fmt.Sprintf("namespace %s (%v)", a.Ns, err))
		}
		pvs, err := a.C.CS.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == a.Ns {
				left = append(left, "volume "+pv.Name+" of claim "+pv.Spec.ClaimRef.Name)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s after the destroy, still there: %s", limit, strings.Join(left, ", "))
		}
		time.Sleep(2 * time.Second)
	}
}
