package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// Another writer of a node's Deployment, on client-go's fake clientset: the writer's
// change has to land at an exact point of the engine's run (during the wait, between the
// failed wait and the rollback), which a real apiserver cannot be made to do on demand.
// The acceptance test TestAccK8sRollout_otherWriterDuringWait shows the same on the lab's
// kube-apiserver, through Terraform and OpenTofu.

const (
	goodImage  = "127.0.0.1:5000/fediversity/web01@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	otherImage = "127.0.0.1:5000/elsewhere/web01@sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

var deploymentsGVR = appsv1.SchemeGroupVersion.WithResource("deployments")

// apiserverGenerations makes the fake keep metadata.generation as the apiserver does: 1 on
// create, one more for every update that changes the spec. The fake alone never changes
// it, and the engine's check reads it.
func apiserverGenerations(cs *fake.Clientset) {
	cs.PrependReactor("create", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		a.(clienttesting.CreateAction).GetObject().(*appsv1.Deployment).Generation = 1
		return false, nil, nil
	})
	cs.PrependReactor("update", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		d := a.(clienttesting.UpdateAction).GetObject().(*appsv1.Deployment)
		cur, err := cs.Tracker().Get(deploymentsGVR, d.Namespace, d.Name)
		if err != nil {
			return false, nil, nil
		}
		old := cur.(*appsv1.Deployment)
		d.Generation = old.Generation
		if !equality.Semantic.DeepEqual(old.Spec, d.Spec) {
			d.Generation++
		}
		return false, nil, nil
	})
}

// deployedGood is web01's Deployment on goodImage, seen ready and recorded as the last
// good template, as an earlier apply left it.
func deployedGood(t *testing.T) *fake.Clientset {
	t.Helper()
	s := testSpec()
	s.Image = goodImage
	d := BuildDeployment(s)
	d.Generation = 3
	tpl, err := json.Marshal(d.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	d.Annotations = map[string]string{LastGoodAnnotation: string(tpl)}
	cs := fake.NewClientset(d)
	apiserverGenerations(cs)
	return cs
}

func getDeployment(t *testing.T, cs *fake.Clientset) *appsv1.Deployment {
	t.Helper()
	d, err := cs.AppsV1().Deployments("fediversity").Get(context.Background(), "web01", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// setImage is the other writer: `kubectl set image` (field manager kubectl-set).
func setImage(cs *fake.Clientset, image string) error {
	d, err := cs.AppsV1().Deployments("fediversity").Get(context.Background(), "web01", metav1.GetOptions{})
	if err != nil {
		return err
	}
	d.Spec.Template.Spec.Containers[0].Image = image
	_, err = cs.AppsV1().Deployments("fediversity").Update(context.Background(), d, metav1.UpdateOptions{FieldManager: "kubectl-set"})
	return err
}

// TestRolloutLeavesAnotherWritersChange: another writer sets the image while the wait of
// this run's rollout runs. The wait stops at once, nothing is set back (before, the
// engine rolled back to its last good template over that change), the Deployment keeps
// the other writer's image, and the error names that image and the writer's field manager.
func TestRolloutLeavesAnotherWritersChange(t *testing.T) {
	cs := deployedGood(t)
	c := &Client{CS: cs, Poll: 10 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wrote := make(chan error, 1)
	go func() { // once this run's image is in the Deployment, the other writer changes it
		for ctx.Err() == nil {
			if getDeployment(t, cs).Spec.Template.Spec.Containers[0].Image == testImage {
				wrote <- setImage(cs, otherImage)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		wrote <- ctx.Err()
	}()
	start := time.Now()
	out, err := c.Rollout(ctx, testSpec(), WaitOptions{Limit: 15 * time.Second, PullGrace: time.Second})
	if werr := <-wrote; werr != nil {
		t.Fatalf("the other writer: %v", werr)
	}
	var other *OtherWriterError
	if !errors.As(err, &other) {
		t.Fatalf("err = %v, want an OtherWriterError", err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("the wait went on for %s after the other writer's change", waited)
	}
	d := getDeployment(t, cs)
	if img := d.Spec.Template.Spec.Containers[0].Image; img != otherImage {
		t.Fatalf("the Deployment names %s after the rollout, want the other writer's %s left alone", img, otherImage)
	}
	if out.Running != otherImage || out.RolledBack || out.Ready {
		t.Errorf("outcome %+v: want Running = the other writer's image, no rollback", out)
	}
	msg := err.Error()
	for _, want := range []string{otherImage, `field manager kubectl-set`, "Nothing was set back", "web01"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q:\n%s", want, msg)
		}
	}
}

// TestRollbackOnlyOverOwnWrite: the wait failed (this run's pod crash-loops); whether the
// rollback happens depends on whether the Deployment still holds this run's write.
func TestRollbackOnlyOverOwnWrite(t *testing.T) {
	crashing := func(cs *fake.Clientset) {
		p := pod("a", waiting("CrashLoopBackOff"))
		if _, err := cs.CoreV1().Pods("fediversity").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("own write: set back to the last good template", func(t *testing.T) {
		cs := deployedGood(t)
		crashing(cs)
		c := &Client{CS: cs, Poll: 10 * time.Millisecond}
		out, err := c.Rollout(context.Background(), testSpec(), WaitOptions{Limit: 300 * time.Millisecond})
		var rerr *RolloutError
		if !errors.As(err, &rerr) || rerr.Reason != ReasonCrashLoop || !rerr.RolledBack || errors.As(err, new(*OtherWriterError)) {
			t.Fatalf("err = %v, want a crash loop set back", err)
		}
		if img := getDeployment(t, cs).Spec.Template.Spec.Containers[0].Image; img != goodImage || out.Running != goodImage {
			t.Fatalf("Deployment %s, outcome %s: want both on the last good %s", img, out.Running, goodImage)
		}
	})
	for _, change := range []struct {
		name    string
		change  func(*appsv1.Deployment)
		theirs  string
		message string
	}{
		{"another image", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = otherImage }, otherImage, "it now names image " + otherImage},
		{"same image, other spec", func(d *appsv1.Deployment) { d.Spec.Replicas = new(int32) }, testImage, "but its spec changed"},
	} {
		t.Run("changed between the wait and the rollback: "+change.name, func(t *testing.T) {
			cs := deployedGood(t)
			c := &Client{CS: cs}
			applied, err := c.ApplyDeployment(context.Background(), testSpec())
			if err != nil {
				t.Fatal(err)
			}
			d := getDeployment(t, cs)
			change.change(d)
			if _, err := cs.AppsV1().Deployments("fediversity").Update(context.Background(), d, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
				t.Fatal(err)
			}
			before := getDeployment(t, cs)
			_, err = c.Rollback(context.Background(), "fediversity", "web01", applied.Written, applied.LastGood)
			var other *OtherWriterError
			if !errors.As(err, &other) || other.Theirs != change.theirs {
				t.Fatalf("err = %v, want an OtherWriterError naming %s", err, change.theirs)
			}
			if !strings.Contains(err.Error(), change.message) || !strings.Contains(err.Error(), "kubectl-edit") {
				t.Errorf("the error lacks %q or the field manager:\n%v", change.message, err)
			}
			after := getDeployment(t, cs)
			if !equality.Semantic.DeepEqual(before.Spec, after.Spec) || after.Generation != before.Generation {
				t.Fatalf("the refused rollback changed the Deployment: %s -> %s", containerImage(before.Spec.Template.Spec), containerImage(after.Spec.Template.Spec))
			}
		})
	}
}

// TestRecordGoodOnlyOverOwnWrite: a template changed by another writer right after this
// run's pod was seen ready is not recorded as the last good one.
func TestRecordGoodOnlyOverOwnWrite(t *testing.T) {
	cs := deployedGood(t)
	c := &Client{CS: cs}
	applied, err := c.ApplyDeployment(context.Background(), testSpec())
	if err != nil {
		t.Fatal(err)
	}
	if err := setImage(cs, otherImage); err != nil {
		t.Fatal(err)
	}
	err = c.recordGood(context.Background(), "fediversity", "web01", applied.Written)
	if !errors.As(err, new(*OtherWriterError)) {
		t.Fatalf("err = %v, want an OtherWriterError", err)
	}
	if lg := lastGood(getDeployment(t, cs)); lg == nil || containerImage(lg.Spec) != goodImage {
		t.Fatalf("the last good record changed to %v", lg)
	}
	if err := c.recordGood(context.Background(), "fediversity", "web01", writtenBy(getDeployment(t, cs))); err != nil {
		t.Fatalf("a Deployment that holds the write: %v", err)
	}
}

// TestImageManagers reads the field manager from managedFields as a real apiserver
// writes them: an Update takes over the fields it changes.
func TestImageManagers(t *testing.T) {
	d := BuildDeployment(testSpec())
	t0 := metav1.NewTime(time.Unix(1_000_000, 0))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	d.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: ManagedBy, Operation: metav1.ManagedFieldsOperationUpdate, Time: &t0, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:replicas":{},"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"node\"}":{".":{},"f:env":{},"f:name":{}}}}}}}`)},
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &t1, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:replicas":{}}}`)},
		{Manager: "kubectl-set", Operation: metav1.ManagedFieldsOperationUpdate, Time: &t0, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"node\"}":{"f:image":{}}}}}}}`)},
	}
	if got := imageManagers(d); len(got) != 1 || got[0] != "kubectl-set" {
		t.Errorf("imageManagers = %v, want [kubectl-set]", got)
	}
	// Same image, another part of the spec: the latest writer of the spec (not of the status).
	d.ManagedFields[0].Time = &t1
	e := changedByOther(d, Written{Generation: 1, Template: d.Spec.Template.DeepCopy()})
	if len(e.Managers) != 1 || e.Managers[0] != ManagedBy {
		t.Errorf("managers %v, want [%s]", e.Managers, ManagedBy)
	}
	d.ManagedFields = nil
	if e := changedByOther(d, Written{Template: &corev1.PodTemplateSpec{}}); len(e.Managers) != 0 || !strings.Contains(e.Error(), "changed by another writer after") {
		t.Errorf("without managedFields: %v", e)
	}
}
