package test

// Acceptance test of modules/k8s with the operator variant (method k8s-operator) on the
// lab's control plane (kwok in the kubelet's place) and a real spire-server (the lab's
// spire node, reached over SSH as an operator reaches theirs): the namespace's
// fediversity_spire_handoff, wired as docs/guides/k8s-operator.md shows, registers each
// enabled node on the server and gives every node's pod its service account token and
// the trust bundle, on the first rollout and on every one after it. Named TestAccSpire…
// so that CI runs it in the suite that has a spire node.
//
// Not here: a SPIRE agent attesting from inside a node's pod. kwok runs no containers;
// TestAccSpireModuleK8sOperatorRealNode has the agents of the module's pods attest on
// the lab's real kubelet node.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

func TestAccSpireModuleK8sOperator(t *testing.T) {
	a := acctest.NewK8s(t) // first: it skips without TF_ACC, before the spire node is asked for
	sn := labtest.Spire(t)
	// The provider reaches the spire node with its SSH credential from the environment,
	// so the last, empty root's provider block can destroy the hand-off too.
	t.Setenv("SSH_PRIVATE_KEY_FILE", labtest.KeyFile())
	names := []string{"web01", "web02", "web03"}
	n1, n2, n3 := names[0], names[1], names[2]
	g := newGroupSample(t, "k8s-operator", names)

	spireExec := func(argv ...string) (string, error) {
		return labtest.IncusErr(append([]string{"exec", sn.Name, "--", "spire-server"}, argv...)...)
	}
	// nsEntries are the IDs of the entries the hand-off made for this namespace.
	nsEntries := func() ([]string, error) {
		out, err := spireExec("entry", "show", "-output", "json")
		if err != nil {
			return nil, fmt.Errorf("entry show: %v %s", err, out)
		}
		var resp struct {
			Entries []struct {
				ID string `json:"id"`
			} `json:"entries"`
		}
		if err := json.Unmarshal([]byte(out), &resp); err != nil {
			return nil, fmt.Errorf("entry show: %v", err)
		}
		var ids []string
		for _, e := range resp.Entries {
			if strings.HasPrefix(e.ID, spire.K8sEntryPrefix(a.Ns)) {
				ids = append(ids, e.ID)
			}
		}
		return ids, nil
	}
	t.Cleanup(func() { // a failed test must leave no entries or files on the spire node, nor the hand-off's cluster-wide RBAC
		_ = a.C.DeleteSpireHandOff(context.Background(), a.Ns)
		_, _ = labtest.IncusErr("exec", sn.Name, "--", "rm", "-rf", "/var/lib/spire/fediversity/k8s/"+a.Ns)
		ids, _ := nsEntries()
		for _, id := range ids {
			_, _ = spireExec("entry", "delete", "-entryID", id)
		}
	})

	top := map[string]string{}
	for _, v := range []string{"v1", "v2"} {
		top[v] = labtest.BuildClosureSeed(t, labtest.ClosureGood, "mk8s-"+v)
	}
	addresses := groupAddresses(names)
	// The root module as the guide shows it: the trust bundle read from the spire node,
	// the namespace's hand-off for the group's enabled nodes, and the module given its id.
	config := func(system map[string]string) string {
		roster := map[string]any{}
		for _, n := range names {
			roster[n] = map[string]any{"toplevel": top[system[n]]}
		}
		return acctest.Config(a.Provider(a.Reg.Host) + fmt.Sprintf(`
data "fediversity_spire_trust_bundle" "central" {
  spire_node {
    host     = %[6]q
    port     = %[7]d
    host_key = %[8]q
  }
}

resource "fediversity_spire_handoff" "group" {
  namespace    = module.group.namespace
  nodes        = module.group.enabled_nodes
  trust_bundle = data.fediversity_spire_trust_bundle.central.pem

  spire_node {
    host     = %[6]q
    port     = %[7]d
    host_key = %[8]q
  }
}

module "group" {
  source          = %[1]q
  method          = "k8s-operator"
  submission_file = %[2]q
  baked_json      = %[3]s
  nodes           = %[4]s
  storage_class   = "fediversity-lab"
  timings         = { rollout_wait = "90s", pull_grace = "3s" }
  addresses       = %[5]s
  spire_handoff   = fediversity_spire_handoff.group.id
}

output "summary" {
  value = module.group.summary
}
`+dnsOutputs, modulePath(t, "k8s"), g.file, hcl(g.baked()), hcl(roster), hcl(addresses),
			sn.SSHHost, sn.SSHPort, sn.HostKey))
	}
	v1 := map[string]string{n1: "v1", n2: "v1", n3: "v1"}
	v2 := map[string]string{n1: "v1", n2: "v2", n3: "v1"}
	const (
		img     = "module.group.module.wave_1.fediversity_image.node" // unstaged: every node is in wave 1
		rollout = "module.group.module.wave_1.fediversity_k8s_rollout.node"
		handoff = "fediversity_spire_handoff.group"
	)
	every := func(action plancheck.ResourceActionType) map[string]plancheck.ResourceActionType {
		return map[string]plancheck.ResourceActionType{n1: action, n2: action, n3: action}
	}

	deployment := func(n string) (*appsv1.Deployment, error) {
		return a.C.CS.AppsV1().Deployments(a.Ns).Get(context.Background(), n, metav1.GetOptions{})
	}
	// spireReady: each node's Deployment gives its pod the projected token of node-<node>
	// (audience spire-server) and the ConfigMap spire-agent, both mounted in the node's
	// container; the server's k8s_psat attestor accepts that token (the namespace's
	// cluster allows node-<node>, with that audience); the ConfigMap holds the bundle the
	// server shows; the server holds each node's alias and host entry.
	spireReady := func(nodes ...string) labCheck {
		return func() error {
			for _, n := range nodes {
				d, err := deployment(n)
				if err != nil {
					return fmt.Errorf("Deployment %s: %v", n, err)
				}
				if err := carriesSpire(d, n); err != nil {
					return err
				}
				if err := hasEntries(spireExec, a.Ns, n); err != nil {
					return err
				}
			}
			if err := attestorAccepts(sn, a.Ns, nodes, true); err != nil {
				return err
			}
			want, err := spireExec("bundle", "show")
			if err != nil {
				return fmt.Errorf("bundle show: %v %s", err, want)
			}
			got, found, err := a.C.SpireBundle(context.Background(), a.Ns)
			if err != nil || !found || strings.TrimSpace(got) != strings.TrimSpace(want) || !strings.Contains(got, "BEGIN CERTIFICATE") {
				return fmt.Errorf("ConfigMap %s holds %q (found %v, %v), the server's bundle is %q", k8s.SpireAgentConfigMap, got, found, err, want)
			}
			return nil
		}
	}
	// generations records each node's Deployment generation, which the API server raises
	// at every change of its spec (a rollout) and at no other write.
	generations, images := map[string]int64{}, map[string]string{}
	recordGenerations := labCheck(func() error {
		for _, n := range names {
			d, err := deployment(n)
			if err != nil {
				return err
			}
			generations[n], images[n] = d.Generation, d.Spec.Template.Spec.Containers[0].Image
		}
		return nil
	})
	// onlyRolled: the Deployments of changed nodes have a new spec and image, the others
	// the spec they had.
	onlyRolled := func(changed ...string) labCheck {
		return func() error {
			for _, n := range names {
				d, err := deployment(n)
				if err != nil {
					return err
				}
				was, now := generations[n], d.Generation
				if want := slices.Contains(changed, n); want != (now > was) {
					return fmt.Errorf("Deployment %s: generation %d before the step, %d after; changed = %v, want %v", n, was, now, now > was, want)
				}
				if img := d.Spec.Template.Spec.Containers[0].Image; slices.Contains(changed, n) == (img == images[n]) {
					return fmt.Errorf("Deployment %s: image %s before the step, %s after (changed nodes: %v)", n, images[n], img, changed)
				}
			}
			return nil
		}
	}
	// gone: the node's Deployment and entries are gone.
	gone := func(n string) labCheck {
		return func() error {
			if _, err := deployment(n); !apierrors.IsNotFound(err) {
				return fmt.Errorf("Deployment %s should be gone, the API says %v", n, err)
			}
			if err := attestorAccepts(sn, a.Ns, []string{n}, false); err != nil {
				return err
			}
			for _, id := range []string{spire.AliasID(a.Ns, n), spire.HostID(a.Ns, n)} {
				if out, _ := spireExec("entry", "show", "-spiffeID", id); strings.Contains(out, id) {
					return fmt.Errorf("the entry %s is left on the server after the submission turned %s off:\n%s", id, n, out)
				}
			}
			return nil
		}
	}
	entryCount := func(want int) labCheck {
		return func() error {
			ids, err := nsEntries()
			if err != nil {
				return err
			}
			if len(ids) != want {
				return fmt.Errorf("%d entries of namespace %s on the server, want %d: %v", len(ids), a.Ns, want, ids)
			}
			return nil
		}
	}

	resource.Test(t, resource.TestCase{
		PreCheck: func() { acctest.PreCheck(t) },
		Steps: moduleSteps(t,
			resource.TestStep{
				PreConfig: func() { g.submit(names, nil) },
				Config:    config(v1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(append(
					actions(img, names, every(plancheck.ResourceActionCreate)),
					actions(rollout, names, every(plancheck.ResourceActionCreate))...),
					plancheck.ExpectResourceAction(handoff, plancheck.ResourceActionCreate))},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)),
					spireReady(names...), entryCount(2 * len(names)),
					statecheck.ExpectKnownOutputValue("dns_records", dnsRecordsCheck(names, names)),
					statecheck.ExpectKnownOutputValue("domain", knownvalue.StringExact(groupDomain)),
					recordGenerations,
				},
			},
			resource.TestStep{
				Config:           config(v1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			resource.TestStep{
				// A second rollout: web02's application changes, and with it its toplevel.
				// Only web02's image and Deployment change, and its new pod template still
				// carries the token and the bundle; the hand-off has nothing to do.
				PreConfig: func() { g.submit(names, map[string]map[string]any{g.apps[n2]: {"theme": "dark"}}) },
				Config:    config(v2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(append(
					actions(img, names, map[string]plancheck.ResourceActionType{n2: plancheck.ResourceActionReplace}),
					actions(rollout, names, map[string]plancheck.ResourceActionType{n2: plancheck.ResourceActionUpdate})...),
					plancheck.ExpectResourceAction(handoff, plancheck.ResourceActionNoop))},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("summary", summaryCheck(names, nil)),
					onlyRolled(n2), spireReady(names...),
					recordGenerations,
				},
			},
			resource.TestStep{
				// The submission turns web03 off: the hand-off drops it (its entries are
				// deleted on the server), and its Deployment goes; the others keep
				// theirs, unchanged.
				PreConfig: func() {
					g.submit([]string{n1, n2}, map[string]map[string]any{g.apps[n2]: {"theme": "dark"}})
				},
				Config: config(v2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(append(
					actions(img, names, map[string]plancheck.ResourceActionType{n3: plancheck.ResourceActionDestroy}),
					actions(rollout, names, map[string]plancheck.ResourceActionType{n3: plancheck.ResourceActionDestroy})...),
					plancheck.ExpectResourceAction(handoff, plancheck.ResourceActionUpdate))},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("summary", summaryCheck([]string{n1, n2}, []string{n3})),
					gone(n3), spireReady(n1, n2), entryCount(4),
					labCheck(func() error { // web01 and web02 were not rolled again
						for _, n := range []string{n1, n2} {
							d, err := deployment(n)
							if err != nil {
								return err
							}
							if d.Generation != generations[n] {
								return fmt.Errorf("Deployment %s changed (generation %d, was %d) when only web03 was turned off", n, d.Generation, generations[n])
							}
						}
						return nil
					}),
					// The disabled node's records go with it.
					statecheck.ExpectKnownOutputValue("dns_records", dnsRecordsCheck(names, []string{n1, n2})),
				},
			},
			resource.TestStep{
				Config:           config(v2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			resource.TestStep{
				// The root module goes: the hand-off retires the namespace's entries and its
				// cluster-wide RBAC, and the namespace goes with everything in it.
				Config: emptyRoot(),
				ConfigStateChecks: []statecheck.StateCheck{entryCount(0), labCheck(func() error {
					if _, err := a.C.CS.RbacV1().ClusterRoleBindings().Get(context.Background(), k8s.SpireRoleName(a.Ns), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
						return fmt.Errorf("ClusterRoleBinding %s left after the module went (%v)", k8s.SpireRoleName(a.Ns), err)
					}
					ns, err := a.C.CS.CoreV1().Namespaces().Get(context.Background(), a.Ns, metav1.GetOptions{})
					if err == nil && ns.DeletionTimestamp == nil {
						return fmt.Errorf("namespace %s is still there and not terminating", a.Ns)
					}
					return nil
				})},
			},
		),
	})
}

// carriesSpire: the pod template of node n runs as the service account node-<n>, with the
// projected token of that account (audience spire-server, a bounded life, root-only
// mode) and the ConfigMap spire-agent as volumes, mounted where the node's SPIRE agent
// reads them.
func carriesSpire(d *appsv1.Deployment, n string) error {
	spec := d.Spec.Template.Spec
	if spec.ServiceAccountName != k8s.ServiceAccountName(n) {
		return fmt.Errorf("Deployment %s: pod service account %q, want %q", n, spec.ServiceAccountName, k8s.ServiceAccountName(n))
	}
	tokenVol, bundleVol := "", ""
	for _, v := range spec.Volumes {
		if p := v.Projected; p != nil && len(p.Sources) == 1 && p.Sources[0].ServiceAccountToken != nil {
			st := p.Sources[0].ServiceAccountToken
			if st.Audience != k8s.SpireAudience || st.ExpirationSeconds == nil || *st.ExpirationSeconds != k8s.SpireTokenLifetime ||
				st.Path != k8s.SpireTokenFile || p.DefaultMode == nil || *p.DefaultMode != 0o400 {
				return fmt.Errorf("Deployment %s: token volume %+v (audience %q), want audience %q, %d s, mode 0400", n, p, st.Audience, k8s.SpireAudience, k8s.SpireTokenLifetime)
			}
			tokenVol = v.Name
		}
		if v.ConfigMap != nil && v.ConfigMap.Name == k8s.SpireAgentConfigMap {
			bundleVol = v.Name
		}
	}
	if tokenVol == "" || bundleVol == "" {
		return fmt.Errorf("Deployment %s: token volume %q, bundle volume %q in %+v", n, tokenVol, bundleVol, spec.Volumes)
	}
	mounted := map[string]string{}
	for _, c := range spec.Containers {
		if c.Name != k8s.ContainerName {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.ReadOnly {
				mounted[m.Name] = m.MountPath
			}
		}
	}
	if mounted[tokenVol] != k8s.SpireTokenDir || mounted[bundleVol] != k8s.SpireBundleDir {
		return fmt.Errorf("Deployment %s: container %s mounts the token at %q and the bundle at %q, want %s and %s (read-only)",
			n, k8s.ContainerName, mounted[tokenVol], mounted[bundleVol], k8s.SpireTokenDir, k8s.SpireBundleDir)
	}
	return nil
}

// hasEntries: the server holds node n's alias (k8s_psat selectors of the node's cluster
// and node-<n>) and its host entry parented to the alias.
func hasEntries(spireExec func(...string) (string, error), ns, n string) error {
	out, err := spireExec("entry", "show", "-spiffeID", spire.AliasID(ns, n))
	for _, sel := range []string{"k8s_psat:cluster:" + spire.K8sCluster(ns, n), "k8s_psat:agent_ns:" + ns, "k8s_psat:agent_sa:node-" + n} {
		if err != nil || !strings.Contains(out, "Selector         : "+sel) {
			return fmt.Errorf("%s: the alias entry lacks %s: %v\n%s", n, sel, err, out)
		}
	}
	out, err = spireExec("entry", "show", "-spiffeID", spire.HostID(ns, n))
	if err != nil || !strings.Contains(out, "Parent ID        : "+spire.AliasID(ns, n)) {
		return fmt.Errorf("%s: no host entry parented to its alias: %v\n%s", n, err, out)
	}
	return nil
}

// attestorAccepts: the spire node's k8s_psat clusters (the file spire-server reads, which
// the hand-off writes) have each node's cluster (spire.K8sCluster), which takes the
// audience of the pods' token and allows the node's service account only (or, with
// allowed false, no longer have the node's cluster).
func attestorAccepts(sn labtest.SpireNode, ns string, nodes []string, allowed bool) error {
	out, err := labtest.IncusErr("exec", sn.Name, "--", "cat", "/var/lib/spire/fediversity/k8s_psat.hcl")
	if err != nil {
		return fmt.Errorf("k8s_psat clusters on the spire node: %v %s", err, out)
	}
	for _, n := range nodes {
		cluster := spire.K8sCluster(ns, n)
		_, block, found := strings.Cut(out, fmt.Sprintf("%q = {", cluster))
		block, _, _ = strings.Cut(block, "}")
		if found != allowed {
			return fmt.Errorf("the k8s_psat attestor has cluster %s: %v, want %v:\n%s", cluster, found, allowed, out)
		}
		if !allowed {
			continue
		}
		if !strings.Contains(block, fmt.Sprintf("audience = [%q]", k8s.SpireAudience)) {
			return fmt.Errorf("cluster %s of the k8s_psat attestor does not take the pods' token audience %q:\n%s", cluster, k8s.SpireAudience, block)
		}
		if sa := fmt.Sprintf("service_account_allow_list = [%q]", ns+":"+k8s.ServiceAccountName(n)); !strings.Contains(block, sa) {
			return fmt.Errorf("cluster %s of the k8s_psat attestor does not allow only %s:\n%s", cluster, ns+":"+k8s.ServiceAccountName(n), block)
		}
	}
	return nil
}
