package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// NetworkPolicyName is the policy that admits ingress only from the same namespace.
const NetworkPolicyName = "same-namespace-only"

// ManagedByLabel marks every object this engine creates.
const ManagedByLabel = "app.kubernetes.io/managed-by"

// ManagedBy is the value of ManagedByLabel.
const ManagedBy = "terraform-provider-fediversity"

// NamespaceName is K8S_NAMESPACE (base), "fediversity" when empty, with "-<app>" appended
// for a per-app target, so two targets never hold the same Deployment.
func NamespaceName(base, app string) string {
	if base == "" {
		base = "fediversity"
	}
	if app != "" {
		return base + "-" + app
	}
	return base
}

// RuntimeClassExists fails when the cluster has no RuntimeClass of that name.
func (c *Client) RuntimeClassExists(ctx context.Context, name string) error {
	_, err := c.CS.NodeV1().RuntimeClasses().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("the cluster has no RuntimeClass %q: the method's pods cannot start without it. Ask the cluster's operator to install it, or set runtime_class to one that exists", name)
	}
	if err != nil {
		return fmt.Errorf("check RuntimeClass %q: %w", name, err)
	}
	return nil
}

// ErrNotOurs is returned for a namespace that exists but was not created by this
// provider (it lacks ManagedByLabel).
var ErrNotOurs = errors.New("not created by this provider")

// NotOursError names a namespace the provider did not create.
type NotOursError struct{ Name string }

func (e *NotOursError) Error() string {
	return fmt.Sprintf("namespace %s already exists and was %s (it has no label %s=%s). Managing it would later delete it with everything in it. "+
		"To manage it anyway, import it (terraform import / tofu import of the fediversity_k8s_namespace resource, ID %s); otherwise choose another k8s_namespace or app",
		e.Name, ErrNotOurs, ManagedByLabel, ManagedBy, e.Name)
}

func (e *NotOursError) Unwrap() error { return ErrNotOurs }

// CheckNamespaceFree fails with a *NotOursError when the namespace exists without
// ManagedByLabel. A namespace this provider made (from an apply that was interrupted
// before its state was saved, say) is free to take.
func (c *Client) CheckNamespaceFree(ctx context.Context, name string) error {
	ns, err := c.CS.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("read namespace %s: %w", name, err)
	case ns.DeletionTimestamp == nil && ns.Labels[ManagedByLabel] != ManagedBy:
		return &NotOursError{Name: name}
	}
	return nil
}

// Claims lists the claims of a namespace, by name: the nodes' /var/lib that go with it.
func (c *Client) Claims(ctx context.Context, ns string) ([]string, error) {
	list, err := c.CS.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the claims of namespace %s: %w", ns, err)
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out, nil
}

// EnsureNamespace creates the namespace (waiting out an earlier deletion of the same
// name) and then its NetworkPolicy, so the policy is in place before any Deployment, and
// returns the namespace's UID. An existing namespace the provider did not create is
// refused unless adopt is set (the resource was imported); an adopted one is given
// ManagedByLabel, so that a later destroy knows it as the provider's. uid is the UID the
// state recorded ("" for a new resource): a namespace of that name with another UID was
// deleted and re-created by someone else, and is refused with a *ReplacedNamespaceError.
func (c *Client) EnsureNamespace(ctx context.Context, name, uid string, adopt bool) (string, error) {
	api := c.CS.CoreV1().Namespaces()
	var ns *corev1.Namespace
	for {
		cur, err := api.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cur, err = api.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
				Name: name, Labels: map[string]string{ManagedByLabel: ManagedBy},
			}}, metav1.CreateOptions{FieldManager: ManagedBy})
			if apierrors.IsAlreadyExists(err) {
				continue // made meanwhile: read it, and check it, again
			}
			if err != nil {
				return "", fmt.Errorf("create namespace %s: %w", name, err)
			}
			ns = cur
			break
		}
		if err != nil {
			return "", fmt.Errorf("read namespace %s: %w", name, err)
		}
		if cur.DeletionTimestamp == nil {
			if uid != "" && string(cur.UID) != uid {
				return "", &ReplacedNamespaceError{Name: name, StateUID: uid, UID: string(cur.UID)}
			}
			if !adopt && cur.Labels[ManagedByLabel] != ManagedBy {
				return "", &NotOursError{Name: name}
			}
			if ns, err = c.labelOurs(ctx, cur); err != nil {
				return "", err
			}
			break
		}
		// An earlier destroy is still removing it; creating now would fail.
		if err := sleep(ctx, c.poll()); err != nil {
			return "", fmt.Errorf("namespace %s is still being deleted: %w", name, err)
		}
	}
	return string(ns.UID), c.ensureNetworkPolicy(ctx, name)
}

// labelOurs puts ManagedByLabel on an adopted namespace. The patch carries the UID and
// resourceVersion it was read with: it never labels a namespace changed meanwhile.
func (c *Client) labelOurs(ctx context.Context, ns *corev1.Namespace) (*corev1.Namespace, error) {
	if ns.Labels[ManagedByLabel] == ManagedBy {
		return ns, nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": map[string]string{ManagedByLabel: ManagedBy},
		"uid":    ns.UID, "resourceVersion": ns.ResourceVersion,
	}})
	if err != nil {
		return nil, err
	}
	out, err := c.CS.CoreV1().Namespaces().Patch(ctx, ns.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: ManagedBy})
	if err != nil {
		return nil, fmt.Errorf("label the imported namespace %s %s=%s: %w", ns.Name, ManagedByLabel, ManagedBy, err)
	}
	return out, nil
}

func sameNamespaceOnly(ns string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName, Namespace: ns, Labels: map[string]string{ManagedByLabel: ManagedBy}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{}, // every pod of the namespace
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}, // pods of this namespace only
			}},
		},
	}
}

func (c *Client) ensureNetworkPolicy(ctx context.Context, ns string) error {
	want := sameNamespaceOnly(ns)
	api := c.CS.NetworkingV1().NetworkPolicies(ns)
	cur, err := api.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, err := api.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create NetworkPolicy %s/%s: %w", ns, want.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read NetworkPolicy %s/%s: %w", ns, want.Name, err)
	}
	cur.Spec = want.Spec
	if _, err := api.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update NetworkPolicy %s/%s: %w", ns, want.Name, err)
	}
	return nil
}

// NamespaceState is what Read needs to know.
type NamespaceState struct {
	Exists        bool
	Terminating   bool
	NetworkPolicy bool   // the same-namespace-only policy is present and unchanged
	UID           string // the namespace's UID: another than the state's means it was re-created
	Labeled       bool   // it carries ManagedByLabel
}

// GetNamespace reports whether the namespace and its policy are as the engine left them.
func (c *Client) GetNamespace(ctx context.Context, name string) (NamespaceState, error) {
	ns, err := c.CS.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return NamespaceState{}, nil
	}
	if err != nil {
		return NamespaceState{}, fmt.Errorf("read namespace %s: %w", name, err)
	}
	st := NamespaceState{Exists: true, Terminating: ns.DeletionTimestamp != nil, UID: string(ns.UID), Labeled: ns.Labels[ManagedByLabel] == ManagedBy}
	np, err := c.CS.NetworkingV1().NetworkPolicies(name).Get(ctx, NetworkPolicyName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return st, fmt.Errorf("read NetworkPolicy %s/%s: %w", name, NetworkPolicyName, err)
	default:
		want := sameNamespaceOnly(name)
		st.NetworkPolicy = len(np.Spec.Ingress) == 1 && len(np.Spec.Ingress[0].From) == 1 &&
			np.Spec.Ingress[0].From[0].NamespaceSelector == nil && np.Spec.Ingress[0].From[0].IPBlock == nil &&
			np.Spec.Ingress[0].From[0].PodSelector != nil && len(np.Spec.PodSelector.MatchLabels) == 0 &&
			len(np.Spec.PodSelector.MatchExpressions) == 0 && len(np.Spec.PolicyTypes) == len(want.Spec.PolicyTypes)
	}
	return st, nil
}

// ReplacedNamespaceError: the namespace of that name is not the one the state recorded
// (its UID differs): the provider's was deleted, and someone re-created the name since.
type ReplacedNamespaceError struct{ Name, StateUID, UID string }

func (e *ReplacedNamespaceError) Error() string {
	return fmt.Sprintf("namespace %s is not the one this state manages: its UID is %s, the state recorded %s, so the namespace the provider made was deleted and someone re-created the name since. "+
		"Nothing in it was changed or deleted. If it is not yours, remove the resource from the state (terraform state rm / tofu state rm of the fediversity_k8s_namespace resource) and the rest goes on without it; "+
		"to manage this namespace instead, remove it from the state and import it (ID %s)",
		e.Name, e.UID, e.StateUID, e.Name)
}

// UnlabeledNamespaceError: the namespace lacks ManagedByLabel (it was removed or changed,
// or an imported namespace was never applied), so it is not known to be the provider's.
type UnlabeledNamespaceError struct{ Name, Label string }

func (e *UnlabeledNamespaceError) Error() string {
	has := "has no such label"
	if e.Label != "" {
		has = fmt.Sprintf("has %s=%s", ManagedByLabel, e.Label)
	}
	return fmt.Sprintf("namespace %s does not carry the label %s=%s (it %s): something other than this provider manages it now, so it is not deleted. Nothing in it was changed or deleted. "+
		"If it is to be deleted with everything in it, label it (kubectl label namespace %s %s=%s --overwrite) and destroy again; "+
		"otherwise remove the resource from the state (terraform state rm / tofu state rm of the fediversity_k8s_namespace resource)",
		e.Name, ManagedByLabel, ManagedBy, has, e.Name, ManagedByLabel, ManagedBy)
}

// checkOurs: ns is the namespace the state manages: the UID the state recorded (when it
// recorded one: states written before the UID was kept have none) and ManagedByLabel.
func checkOurs(ns *corev1.Namespace, uid string) error {
	if uid != "" && string(ns.UID) != uid {
		return &ReplacedNamespaceError{Name: ns.Name, StateUID: uid, UID: string(ns.UID)}
	}
	if ns.Labels[ManagedByLabel] != ManagedBy {
		return &UnlabeledNamespaceError{Name: ns.Name, Label: ns.Labels[ManagedByLabel]}
	}
	return nil
}

// NamespaceDeletable fails when the namespace exists and is not the one the state manages
// (uid, ManagedByLabel): the plan of a destroy says so before anything is destroyed. A
// namespace that is gone is fine: there is nothing to delete.
func (c *Client) NamespaceDeletable(ctx context.Context, name, uid string) error {
	ns, err := c.CS.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("read namespace %s: %w", name, err)
	}
	return checkOurs(ns, uid)
}

// DeleteNamespace removes the namespace with everything in it (claims included), when it
// is the one the state manages (uid, ManagedByLabel; see checkOurs), and waits until it is
// gone, so that the same name can be created again right after. The delete carries the
// checked UID as its precondition: the check and the delete are one step, and a namespace
// re-created in between is refused by the apiserver, never deleted.
func (c *Client) DeleteNamespace(ctx context.Context, name, uid string) error {
	api := c.CS.CoreV1().Namespaces()
	ns, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read namespace %s: %w", name, err)
	}
	if err := checkOurs(ns, uid); err != nil {
		return err
	}
	ours := ns.UID
	if ns.DeletionTimestamp == nil {
		err = api.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ours}})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err):
			// The precondition failed, or ours began terminating meanwhile: read again.
			now, gerr := api.Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(gerr): // gone already
			case gerr != nil:
				return fmt.Errorf("delete namespace %s: %w", name, err)
			case now.UID != ours:
				return &ReplacedNamespaceError{Name: name, StateUID: string(ours), UID: string(now.UID)}
			case now.DeletionTimestamp == nil:
				return fmt.Errorf("delete namespace %s: %w", name, err)
			}
		case err != nil:
			return fmt.Errorf("delete namespace %s: %w", name, err)
		}
	}
	for {
		cur, err := api.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && cur.UID != ours {
			return nil // ours is gone (a namespace of the same name made since is not ours)
		}
		if err := sleep(ctx, c.poll()); err != nil {
			return fmt.Errorf("namespace %s is not gone yet (the namespace controller is still removing its objects): %w", name, err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
