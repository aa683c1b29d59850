package acctest

import (
	"context"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Refusal is what an AdmissionPolicy refuses: every Op on Resource of APIGroup ("" for
// the core group) whose object the CEL Expression rejects, with Message, in the test's
// namespace (or in every namespace with AnyNamespace, for a policy written before the
// namespace exists: its expression then has to pick the test's objects).
type Refusal struct {
	Name                string // unique in the cluster
	Op                  admissionv1.OperationType
	APIGroup, Resource  string
	Expression, Message string
	AnyNamespace        bool
}

// AdmissionPolicy makes the apiserver refuse r, for real (a ValidatingAdmissionPolicy and
// its binding). Tests use it for what an operator's policy does and a fake could not
// show: a refused rollback, a refused pod. It returns remove, which deletes both (also
// done when the test ends). It does not wait: when a policy change is in force depends
// on the rule, so the caller probes for it.
func (k *K8s) AdmissionPolicy(r Refusal) (remove func()) {
	k.T.Helper()
	name := r.Name
	ctx := context.Background()
	api := k.C.CS.AdmissionregistrationV1()
	remove = func() {
		_ = api.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = api.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
	}
	remove() // one left by an earlier run of the same test
	fail := admissionv1.Fail
	pol := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{r.Op},
					Rule:       admissionv1.Rule{APIGroups: []string{r.APIGroup}, APIVersions: []string{"v1"}, Resources: []string{r.Resource}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: r.Expression, Message: r.Message}},
		},
	}
	if _, err := api.ValidatingAdmissionPolicies().Create(ctx, pol, metav1.CreateOptions{}); err != nil {
		k.T.Fatal(err)
	}
	bind := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	if !r.AnyNamespace {
		bind.Spec.MatchResources = &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{"kubernetes.io/metadata.name": k.Ns}}}
	}
	if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, bind, metav1.CreateOptions{}); err != nil {
		k.T.Fatal(err)
	}
	k.T.Cleanup(remove)
	return remove
}
