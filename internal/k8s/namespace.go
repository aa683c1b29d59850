package k8s

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// name) and then its NetworkPolicy, so the policy is in place before any Deployment.
// An existing namespace the provider did not create is refused unless adopt is set
// (the resource was imported).
func (c *Client) EnsureNamespace(ctx context.Context, name string, adopt bool) error {
	for {
		ns, err := c.CS.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.CS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
				Name: name, Labels: map[string]string{ManagedByLabel: ManagedBy},
			}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create namespace %s: %w", name, err)
			}
			break
		}
		if err != nil {
			return fmt.Errorf("read namespace %s: %w", name, err)
		}
		if ns.DeletionTimestamp == nil {
			if !adopt && ns.Labels[ManagedByLabel] != ManagedBy {
				return &NotOursError{Name: name}
			}
			break
		}
		// An earlier destroy is still removing it; creating now would fail.
		if err := sleep(ctx, c.poll()); err != nil {
			return fmt.Errorf("namespace %s is still being deleted: %w", name, err)
		}
	}
	return c.ensureNetworkPolicy(ctx, name)
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
	NetworkPolicy bool // the same-namespace-only policy is present and unchanged
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
	st := NamespaceState{Exists: true, Terminating: ns.DeletionTimestamp != nil}
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

// DeleteNamespace removes the namespace with everything in it (claims included) and
// waits until it is gone, so that the same name can be created again right after.
func (c *Client) DeleteNamespace(ctx context.Context, name string) error {
	err := c.CS.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	for {
		_, err := c.CS.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
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
