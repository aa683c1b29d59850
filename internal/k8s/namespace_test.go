package k8s

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// The namespace destroy on client-go's fake clientset: the engine's decisions and the
// delete it sends. The fake does not enforce delete preconditions, so the test that the
// apiserver refuses a stale UID is TestLabNamespaceDeleteChecksUID, on the lab's.

func namespace(uid string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme", UID: types.UID(uid), Labels: labels}}
}

var ourLabel = map[string]string{ManagedByLabel: ManagedBy}

// deletes are the namespace deletes the engine sent, with their UID preconditions.
func deletes(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		if d, ok := a.(clienttesting.DeleteAction); ok && a.GetResource().Resource == "namespaces" {
			uid := "<none>"
			if p := d.GetDeleteOptions().Preconditions; p != nil && p.UID != nil {
				uid = string(*p.UID)
			}
			out = append(out, uid)
		}
	}
	return out
}

func TestDeleteNamespaceOnlyOurs(t *testing.T) {
	cases := []struct {
		name     string
		ns       *corev1.Namespace
		stateUID string
		wantErr  string // "" means deleted
	}{
		{"ours: deleted with its UID as the precondition", namespace("u-1", ourLabel), "u-1", ""},
		{"a state without a UID (older version), labelled: deleted", namespace("u-1", ourLabel), "", ""},
		{"re-created by someone else with the label: refused", namespace("u-2", ourLabel), "u-1", "its UID is u-2, the state recorded u-1"},
		{"re-created by someone else without the label: refused", namespace("u-2", nil), "u-1", "deleted and someone re-created the name"},
		{"label removed: refused", namespace("u-1", nil), "u-1", "has no such label"},
		{"label taken over by another tool: refused", namespace("u-1", map[string]string{ManagedByLabel: "Helm"}), "u-1", ManagedByLabel + "=Helm"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := fake.NewClientset(c.ns)
			cl := &Client{CS: cs, Poll: 10 * time.Millisecond}
			planErr := cl.NamespaceDeletable(context.Background(), "acme", c.stateUID)
			err := cl.DeleteNamespace(context.Background(), "acme", c.stateUID)
			_, getErr := cs.CoreV1().Namespaces().Get(context.Background(), "acme", metav1.GetOptions{})
			if c.wantErr == "" {
				if err != nil || planErr != nil || !apierrors.IsNotFound(getErr) {
					t.Fatalf("plan %v, delete %v, namespace after: %v; want it deleted", planErr, err, getErr)
				}
				if d := deletes(cs); len(d) != 1 || d[0] != string(c.ns.UID) {
					t.Fatalf("deletes sent (UID preconditions): %v, want one with %s", d, c.ns.UID)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || planErr == nil || planErr.Error() != err.Error() {
				t.Fatalf("delete %v, plan %v: want both refused with %q", err, planErr, c.wantErr)
			}
			for _, want := range []string{"acme", "Nothing in it was changed or deleted", "state rm"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error lacks %q: %v", want, err)
				}
			}
			if getErr != nil || len(deletes(cs)) != 0 {
				t.Fatalf("the namespace that is not ours was deleted (deletes %v, get %v)", deletes(cs), getErr)
			}
		})
	}
	t.Run("gone already: nothing to do", func(t *testing.T) {
		cl := &Client{CS: fake.NewClientset()}
		if err := cl.DeleteNamespace(context.Background(), "acme", "u-1"); err != nil {
			t.Fatal(err)
		}
	})
}

// The name is deleted and re-created between the engine's check and its delete: the
// apiserver refuses the delete on its UID precondition (here the reactor answers as the
// apiserver does), and the engine reports the re-created namespace, not an API failure.
func TestDeleteNamespaceRecreatedAfterTheCheck(t *testing.T) {
	cs := fake.NewClientset(namespace("u-2", ourLabel))
	gets := 0
	cs.PrependReactor("get", "namespaces", func(clienttesting.Action) (bool, runtime.Object, error) {
		if gets++; gets == 1 { // the check still reads the one the state recorded
			return true, namespace("u-1", ourLabel), nil
		}
		return false, nil, nil
	})
	cs.PrependReactor("delete", "namespaces", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.DeleteAction).GetDeleteOptions().Preconditions
		if p == nil || p.UID == nil || *p.UID != "u-2" {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "namespaces"}, "acme",
				errors.New("Precondition failed: UID in precondition: u-1, UID in object meta: u-2"))
		}
		return false, nil, nil
	})
	err := (&Client{CS: cs}).DeleteNamespace(context.Background(), "acme", "u-1")
	var replaced *ReplacedNamespaceError
	if !errors.As(err, &replaced) || replaced.UID != "u-2" {
		t.Fatalf("err = %v, want a ReplacedNamespaceError naming u-2", err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "acme", metav1.GetOptions{}); err != nil {
		t.Fatalf("the re-created namespace is gone: %v", err)
	}
}

// An apply of a namespace in state (Update) never takes over one re-created by someone
// else; an imported one (adopt) gets the provider's label, so that its destroy knows it.
func TestEnsureNamespaceChecksUID(t *testing.T) {
	cs := fake.NewClientset(namespace("u-2", ourLabel))
	_, err := (&Client{CS: cs}).EnsureNamespace(context.Background(), "acme", "u-1", true)
	if !errors.As(err, new(*ReplacedNamespaceError)) {
		t.Fatalf("err = %v, want a ReplacedNamespaceError", err)
	}
	cs = fake.NewClientset(namespace("u-1", nil))
	uid, err := (&Client{CS: cs}).EnsureNamespace(context.Background(), "acme", "", true)
	if err != nil || uid != "u-1" {
		t.Fatalf("adopt: uid %q err %v", uid, err)
	}
	ns, _ := cs.CoreV1().Namespaces().Get(context.Background(), "acme", metav1.GetOptions{})
	if ns.Labels[ManagedByLabel] != ManagedBy {
		t.Fatalf("the adopted namespace has labels %v", ns.Labels)
	}
	cs = fake.NewClientset(namespace("u-1", nil))
	if _, err := (&Client{CS: cs}).EnsureNamespace(context.Background(), "acme", "", false); !errors.As(err, new(*NotOursError)) {
		t.Fatalf("err = %v, want a NotOursError for a namespace neither made nor imported", err)
	}
}
