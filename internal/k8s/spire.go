package k8s

import (
	"context"
	"fmt"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The cluster side of the SPIRE hand-off of one namespace (k8s-operator):
//
//   - the service account "spire-server" of the namespace, bound to a ClusterRole that
//     may create TokenReviews and read pods and nodes: the k8s_psat attestor on the spire
//     node reviews each agent's token and reads the agent's pod and node. Nodes are
//     cluster-scoped, so the role is a ClusterRole (one per namespace, named after it);
//   - a token of that service account from the TokenRequest API, returned to memory only,
//     to be written into the spire node's kubeconfig through stdin;
//   - the ConfigMap "spire-agent" with the server's trust bundle, mounted into the pods.

// SpireServerServiceAccount is the service account whose token the spire node uses.
const SpireServerServiceAccount = "spire-server"

// SpireAgentConfigMap holds the trust bundle for the pods' agents.
const SpireAgentConfigMap = "spire-agent"

// SpireBundleKey is the ConfigMap key of the bundle (PEM).
const SpireBundleKey = "bundle.crt"

// SpireRoleName is the ClusterRole and ClusterRoleBinding of a namespace's spire-server.
func SpireRoleName(namespace string) string { return "fediversity-spire-server-" + namespace }

func spireLabels(namespace string) map[string]string {
	return map[string]string{ManagedByLabel: ManagedBy, "fediversity.org/spire-handoff": namespace}
}

// EnsureSpireServerAccess creates (or repairs) the service account and its RBAC.
func (c *Client) EnsureSpireServerAccess(ctx context.Context, namespace string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: SpireServerServiceAccount, Namespace: namespace, Labels: spireLabels(namespace)}}
	if _, err := c.CS.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: create service account %s: %w", namespace, SpireServerServiceAccount, err)
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: SpireRoleName(namespace), Labels: spireLabels(namespace)},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list"}},
		},
	}
	roles := c.CS.RbacV1().ClusterRoles()
	if cur, err := roles.Get(ctx, role.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := roles.Create(ctx, role, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("namespace %s: create ClusterRole %s: %w", namespace, role.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("namespace %s: read ClusterRole %s: %w", namespace, role.Name, err)
	} else {
		cur.Rules, cur.Labels = role.Rules, role.Labels
		if _, err := roles.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("namespace %s: update ClusterRole %s: %w", namespace, role.Name, err)
		}
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: SpireRoleName(namespace), Labels: spireLabels(namespace)},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: SpireRoleName(namespace)},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: SpireServerServiceAccount, Namespace: namespace}},
	}
	if _, err := c.CS.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: create ClusterRoleBinding %s: %w", namespace, binding.Name, err)
	}
	return nil
}

// SpireServerAccessPresent reports whether the service account and the binding exist.
func (c *Client) SpireServerAccessPresent(ctx context.Context, namespace string) (bool, error) {
	if _, err := c.CS.CoreV1().ServiceAccounts(namespace).Get(ctx, SpireServerServiceAccount, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("namespace %s: read service account %s: %w", namespace, SpireServerServiceAccount, err)
	}
	if _, err := c.CS.RbacV1().ClusterRoleBindings().Get(ctx, SpireRoleName(namespace), metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("namespace %s: read ClusterRoleBinding %s: %w", namespace, SpireRoleName(namespace), err)
	}
	return true, nil
}

// SpireServerToken asks the TokenRequest API for a token of the namespace's spire-server
// service account, valid for lifetime. The token is returned to memory only.
func (c *Client) SpireServerToken(ctx context.Context, namespace string, lifetime time.Duration) (string, time.Time, error) {
	secs := int64(lifetime / time.Second)
	tr, err := c.CS.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, SpireServerServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("namespace %s: request a token for service account %s: %w", namespace, SpireServerServiceAccount, err)
	}
	return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
}

// NodePodToken asks for a token of node-<node> with the spire-server audience, bound to
// the given pod, as the kubelet projects it into the pod. Used to prove the hand-off
// with an agent outside the pod; the product never calls it.
func (c *Client) NodePodToken(ctx context.Context, namespace, node, pod string, lifetime time.Duration) (string, error) {
	p, err := c.CS.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	secs := int64(lifetime / time.Second)
	tr, err := c.CS.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, ServiceAccountName(node), &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{SpireAudience}, ExpirationSeconds: &secs,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// ApplySpireBundle puts the trust bundle into the ConfigMap spire-agent; it changes
// nothing when the bundle is the same.
func (c *Client) ApplySpireBundle(ctx context.Context, namespace, bundle string) error {
	api := c.CS.CoreV1().ConfigMaps(namespace)
	cur, err := api.Get(ctx, SpireAgentConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: SpireAgentConfigMap, Namespace: namespace, Labels: spireLabels(namespace)},
			Data: map[string]string{SpireBundleKey: bundle}}
		if _, err := api.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("namespace %s: create ConfigMap %s: %w", namespace, SpireAgentConfigMap, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("namespace %s: read ConfigMap %s: %w", namespace, SpireAgentConfigMap, err)
	}
	if cur.Data[SpireBundleKey] == bundle {
		return nil
	}
	if cur.Data == nil {
		cur.Data = map[string]string{}
	}
	cur.Data[SpireBundleKey] = bundle
	if _, err := api.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("namespace %s: update ConfigMap %s: %w", namespace, SpireAgentConfigMap, err)
	}
	return nil
}

// SpireBundle reads the bundle in the ConfigMap; found is false when there is none.
func (c *Client) SpireBundle(ctx context.Context, namespace string) (bundle string, found bool, err error) {
	cm, err := c.CS.CoreV1().ConfigMaps(namespace).Get(ctx, SpireAgentConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("namespace %s: read ConfigMap %s: %w", namespace, SpireAgentConfigMap, err)
	}
	b, ok := cm.Data[SpireBundleKey]
	return b, ok, nil
}

// DeleteSpireHandOff removes the ConfigMap, the service account (its tokens die with it)
// and the RBAC of the namespace's hand-off. Missing objects are fine.
func (c *Client) DeleteSpireHandOff(ctx context.Context, namespace string) error {
	ignore := func(what string, err error) error {
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace %s: delete %s: %w", namespace, what, err)
		}
		return nil
	}
	if err := ignore("ClusterRoleBinding", c.CS.RbacV1().ClusterRoleBindings().Delete(ctx, SpireRoleName(namespace), metav1.DeleteOptions{})); err != nil {
		return err
	}
	if err := ignore("ClusterRole", c.CS.RbacV1().ClusterRoles().Delete(ctx, SpireRoleName(namespace), metav1.DeleteOptions{})); err != nil {
		return err
	}
	if err := ignore("ConfigMap "+SpireAgentConfigMap, c.CS.CoreV1().ConfigMaps(namespace).Delete(ctx, SpireAgentConfigMap, metav1.DeleteOptions{})); err != nil {
		return err
	}
	return ignore("service account "+SpireServerServiceAccount,
		c.CS.CoreV1().ServiceAccounts(namespace).Delete(ctx, SpireServerServiceAccount, metav1.DeleteOptions{}))
}

// KubeConfigServer is the API server address of the kubeconfig's current context.
func KubeConfigServer(path string) (string, error) {
	cluster, _, err := currentCluster(path)
	if err != nil {
		return "", err
	}
	return cluster.Server, nil
}

func currentCluster(path string) (*clientcmdapi.Cluster, string, error) {
	if path == "" {
		return nil, "", ErrNoKubeConfig
	}
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig (%s) %s: %w", KubeConfigEnv, path, err)
	}
	ctxName := raw.CurrentContext
	kctx := raw.Contexts[ctxName]
	if kctx == nil {
		return nil, "", fmt.Errorf("kubeconfig (%s) %s has no current context", KubeConfigEnv, path)
	}
	cluster := raw.Clusters[kctx.Cluster]
	if cluster == nil {
		return nil, "", fmt.Errorf("kubeconfig (%s) %s: context %q names no known cluster", KubeConfigEnv, path, ctxName)
	}
	return cluster, kctx.Cluster, nil
}

// SpireKubeConfig is the kubeconfig for the spire node: the cluster of the operator's
// kubeconfig (its CA, and apiServer as the address when set) and the spire-server token.
// It is returned as bytes for stdin; nothing is written here.
func SpireKubeConfig(path, apiServer, token string) ([]byte, error) {
	cluster, name, err := currentCluster(path)
	if err != nil {
		return nil, err
	}
	ca := cluster.CertificateAuthorityData
	if len(ca) == 0 && cluster.CertificateAuthority != "" {
		if ca, err = os.ReadFile(cluster.CertificateAuthority); err != nil {
			return nil, fmt.Errorf("kubeconfig (%s) %s: read the cluster CA %s: %w", KubeConfigEnv, path, cluster.CertificateAuthority, err)
		}
	}
	server := cluster.Server
	if apiServer != "" {
		server = apiServer
	}
	out := clientcmdapi.NewConfig()
	out.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca, TLSServerName: cluster.TLSServerName,
		InsecureSkipTLSVerify: cluster.InsecureSkipTLSVerify && len(ca) == 0}
	out.AuthInfos[SpireServerServiceAccount] = &clientcmdapi.AuthInfo{Token: token}
	out.Contexts["spire"] = &clientcmdapi.Context{Cluster: name, AuthInfo: SpireServerServiceAccount}
	out.CurrentContext = "spire"
	return clientcmd.Write(*out)
}
