package k8s

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OtherWriterError says that a node's Deployment was changed by another writer after this
// run wrote it (a `kubectl set image`, another tool, another state of this provider). The
// engine then sets nothing back: a rollback would overwrite that writer's change. The
// Deployment is left as that writer left it.
type OtherWriterError struct {
	Namespace, Node string
	// Ours is the image this run wrote; Theirs the image the Deployment names now (the
	// same when the other writer changed another part of the spec).
	Ours, Theirs string
	// Managers are the field managers of the change, from the Deployment's managedFields:
	// those owning the container's image when it changed, else the latest writer of the
	// spec. Empty when the managedFields do not say.
	Managers []string
	// Wrote and Found are the Deployment's generation after this run's write and now.
	Wrote, Found int64
}

// what is the change, in one sentence without the node's name.
func (e *OtherWriterError) what() string {
	by := "another writer"
	if len(e.Managers) > 0 {
		by = fmt.Sprintf("another writer (field manager %s)", strings.Join(e.Managers, ", "))
	}
	change := "it now names image " + e.Theirs
	if e.Theirs == e.Ours {
		change = fmt.Sprintf("it still names image %s, but its spec changed (generation %d; this run's write was %d)", e.Theirs, e.Found, e.Wrote)
	}
	return fmt.Sprintf("the Deployment %s/%s was changed by %s after this run rolled out %s: %s", e.Namespace, e.Node, by, e.Ours, change)
}

func (e *OtherWriterError) Error() string {
	return fmt.Sprintf("node %s: %s. Nothing was set back: the Deployment is left as that writer left it. "+
		"Find out who else changes it; the next plan shows the difference to the configured image, and the next apply rolls out %s again, over that change.",
		e.Node, e.what(), e.Ours)
}

// changedByOther describes d, which no longer holds what this run wrote (ours).
func changedByOther(d *appsv1.Deployment, ours Written) *OtherWriterError {
	e := &OtherWriterError{Namespace: d.Namespace, Node: d.Name, Ours: ours.Image(), Theirs: containerImage(d.Spec.Template.Spec),
		Wrote: ours.Generation, Found: d.Generation}
	if e.Theirs != e.Ours {
		e.Managers = imageManagers(d)
	}
	if len(e.Managers) == 0 {
		e.Managers = latestSpecManager(d)
	}
	return e
}

// imageManagers are the field managers that own the node container's image. A write that
// changes a field takes it over, so they are the last writers of the image.
func imageManagers(d *appsv1.Deployment) []string {
	var out []string
	for _, mf := range d.ManagedFields {
		if ownsImage(mf.FieldsV1) {
			out = append(out, mf.Manager)
		}
	}
	sort.Strings(out)
	return out
}

// latestSpecManager is the manager of the latest write that owns part of the spec.
func latestSpecManager(d *appsv1.Deployment) []string {
	var best *metav1.ManagedFieldsEntry
	for i := range d.ManagedFields {
		mf := &d.ManagedFields[i]
		if mf.Subresource != "" || mf.Time == nil || fieldsAt(mf.FieldsV1, "f:spec") == nil {
			continue
		}
		if best == nil || mf.Time.After(best.Time.Time) {
			best = mf
		}
	}
	if best == nil {
		return nil
	}
	return []string{best.Manager}
}

// ownsImage: the managed fields hold spec.template.spec.containers[name=node].image.
func ownsImage(f *metav1.FieldsV1) bool {
	containers := fieldsAt(f, "f:spec", "f:template", "f:spec", "f:containers")
	for key, v := range containers {
		var k struct{ Name string }
		raw, ok := strings.CutPrefix(key, "k:")
		if !ok || json.Unmarshal([]byte(raw), &k) != nil || k.Name != ContainerName {
			continue
		}
		if c, ok := v.(map[string]any); ok {
			if _, ok := c["f:image"]; ok {
				return true
			}
		}
	}
	return false
}

// fieldsAt walks a managedFields set (FieldsV1 JSON) along path; nil when it is not there.
func fieldsAt(f *metav1.FieldsV1, path ...string) map[string]any {
	if f == nil {
		return nil
	}
	var cur map[string]any
	if json.Unmarshal(f.GetRawBytes(), &cur) != nil {
		return nil
	}
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return nil
		}
		cur = next
	}
	return cur
}
