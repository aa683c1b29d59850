package k8s

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// LastGoodAnnotation, on a node's Deployment, holds the pod template (JSON) whose pod
// was last seen ready by this engine. It is the rollback target. It lives on the
// Deployment, not only in the Terraform state, so that an apply killed during its wait,
// or a rollback the apiserver refused, cannot lose it: the next apply reads it back and
// rolls back to it. Writing it changes no pod (it is on the Deployment's metadata).
const LastGoodAnnotation = "fediversity.org/last-good-template"

// NodeLabel selects the pods of one node.
const NodeLabel = "fediversity.org/node"

// ContainerName is the one container of a node's pod.
const ContainerName = "node"

// NodeSpec is everything the engine needs to apply one node.
type NodeSpec struct {
	Namespace     string
	Node          string
	Image         string // by digest: <registry>/<ns>/<node>@sha256:…
	RuntimeClass  string
	StorageClass  string // empty: the cluster's default StorageClass
	StorageSize   string // e.g. "1Gi"
	ContainerUUID string // the machine ID, as a UUID
	// ProgressDeadline goes into the Deployment's progressDeadlineSeconds.
	ProgressDeadline time.Duration
	// SpireAgent gives the pod the SPIRE agent's token and trust bundle (spire_agent.go).
	SpireAgent bool
}

// ClaimName is "<node>-state".
func ClaimName(node string) string { return node + "-state" }

// ServiceAccountName is "node-<node>".
func ServiceAccountName(node string) string { return "node-" + node }

// NewUUID returns a random (version 4) UUID from crypto/rand.
func NewUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// MachineID is the machine ID systemd derives from container_uuid: the 32 hex digits.
func MachineID(uuid string) string { return strings.ToLower(strings.ReplaceAll(uuid, "-", "")) }

// Validate checks a spec before anything touches the cluster.
func (s NodeSpec) Validate() error {
	if !strings.Contains(s.Image, "@sha256:") {
		return fmt.Errorf("node %s: image %q is not named by digest (<repository>@sha256:…); use fediversity_image's image_ref", s.Node, s.Image)
	}
	if _, err := resource.ParseQuantity(s.StorageSize); err != nil {
		return fmt.Errorf("node %s: storage_size %q is not a Kubernetes quantity such as 1Gi: %w", s.Node, s.StorageSize, err)
	}
	if len(MachineID(s.ContainerUUID)) != 32 {
		return fmt.Errorf("node %s: container_uuid %q is not a UUID", s.Node, s.ContainerUUID)
	}
	return nil
}

func labels(node string) map[string]string {
	return map[string]string{NodeLabel: node, ManagedByLabel: ManagedBy}
}

// BuildDeployment is the Deployment of one node; see the package comment for why each
// setting is there.
func BuildDeployment(s NodeSpec) *appsv1.Deployment {
	d := buildDeployment(s)
	if s.SpireAgent {
		withSpireAgent(&d.Spec.Template.Spec)
	}
	return d
}

func buildDeployment(s NodeSpec) *appsv1.Deployment {
	one := int32(1)
	hostUsers := false
	tty := true
	grace := int64(30)
	deadline := int32(s.ProgressDeadline / time.Second)
	if deadline < 10 {
		deadline = 600
	}
	rc := s.RuntimeClass
	mem := corev1.StorageMediumMemory
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: s.Node, Namespace: s.Namespace, Labels: labels(s.Node)},
		Spec: appsv1.DeploymentSpec{
			Replicas:                &one,
			Selector:                &metav1.LabelSelector{MatchLabels: map[string]string{NodeLabel: s.Node}},
			Strategy:                appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			ProgressDeadlineSeconds: &deadline,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(s.Node)},
				Spec: corev1.PodSpec{
					RuntimeClassName:              &rc,
					HostUsers:                     &hostUsers,
					ServiceAccountName:            ServiceAccountName(s.Node),
					TerminationGracePeriodSeconds: &grace,
					EnableServiceLinks:            new(bool),
					Containers: []corev1.Container{{
						Name:  ContainerName,
						Image: s.Image,
						TTY:   tty,
						Stdin: true,
						Env: []corev1.EnvVar{
							{Name: "container", Value: "fediversity"},
							{Name: "container_uuid", Value: s.ContainerUUID},
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "state", MountPath: "/var/lib"},
							{Name: "run", MountPath: "/run"},
							{Name: "tmp", MountPath: "/tmp"},
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"systemctl", "is-system-running"}}},
							PeriodSeconds:    5,
							TimeoutSeconds:   5,
							FailureThreshold: 3,
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "state", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ClaimName(s.Node)}}},
						{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: mem}}},
						{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: mem}}},
					},
				},
			},
		},
	}
}

// EnsureNodeObjects creates the claim and the service account of a node when they are
// missing. The claim is never recreated or deleted here: it holds /var/lib. A larger
// storage_size is applied to an existing claim (expansion, where the class allows it).
func (c *Client) EnsureNodeObjects(ctx context.Context, s NodeSpec) error {
	size, err := resource.ParseQuantity(s.StorageSize)
	if err != nil {
		return fmt.Errorf("node %s: storage_size %q: %w", s.Node, s.StorageSize, err)
	}
	claims := c.CS.CoreV1().PersistentVolumeClaims(s.Namespace)
	cur, err := claims.Get(ctx, ClaimName(s.Node), metav1.GetOptions{})
	for err == nil && cur.DeletionTimestamp != nil {
		// A claim on its way out (the node was just destroyed) cannot hold the new pod's
		// /var/lib: wait until it is gone, then make a new one.
		if serr := sleep(ctx, c.poll()); serr != nil {
			return fmt.Errorf("node %s: claim %s is still being deleted: %w", s.Node, ClaimName(s.Node), serr)
		}
		cur, err = claims.Get(ctx, ClaimName(s.Node), metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: ClaimName(s.Node), Namespace: s.Namespace, Labels: labels(s.Node)},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			},
		}
		if s.StorageClass != "" {
			sc := s.StorageClass
			pvc.Spec.StorageClassName = &sc
		}
		if _, err := claims.Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node %s: create claim %s/%s: %w", s.Node, s.Namespace, ClaimName(s.Node), err)
		}
	case err != nil:
		return fmt.Errorf("node %s: read claim %s: %w", s.Node, ClaimName(s.Node), err)
	default:
		if s.StorageClass != "" && cur.Spec.StorageClassName != nil && *cur.Spec.StorageClassName != s.StorageClass {
			return fmt.Errorf("node %s: claim %s has StorageClass %q, not %q; a claim's class cannot change. Move the data and delete the claim first", s.Node, ClaimName(s.Node), *cur.Spec.StorageClassName, s.StorageClass)
		}
		if have := cur.Spec.Resources.Requests[corev1.ResourceStorage]; have.Cmp(size) < 0 {
			cur.Spec.Resources.Requests[corev1.ResourceStorage] = size
			if _, err := claims.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("node %s: grow claim %s to %s: %w", s.Node, ClaimName(s.Node), s.StorageSize, err)
			}
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ServiceAccountName(s.Node), Namespace: s.Namespace, Labels: labels(s.Node)}}
	if _, err := c.CS.CoreV1().ServiceAccounts(s.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("node %s: create service account %s: %w", s.Node, sa.Name, err)
	}
	return nil
}

// Applied is what ApplyDeployment found before it changed anything.
type Applied struct {
	// Previous is the pod template the Deployment had, nil when it was created now.
	Previous *corev1.PodTemplateSpec
	// PreviousImage is the node container's image in Previous.
	PreviousImage string
	// Changed is false when the Deployment already had exactly this template: no new pod.
	Changed bool
	// LastGood is the template of LastGoodAnnotation, nil when none was recorded.
	LastGood *corev1.PodTemplateSpec
	// Current is the template the Deployment holds after the apply, as the apiserver
	// stored it (with its defaults), nil when it was created now.
	Current *corev1.PodTemplateSpec
	// Written is what this apply wrote (also when the write changed nothing): the wait,
	// the rollback and the record of the last good template act only on a Deployment
	// that still holds it.
	Written Written
}

// Written is what this run wrote to a node's Deployment: the generation the apiserver
// gave the write and the pod template as it stored it. The generation grows with every
// change of the spec (not with status or metadata writes, such as the last-good record),
// so a Deployment with another generation or template was changed by another writer since.
type Written struct {
	Generation int64
	Template   *corev1.PodTemplateSpec
}

func writtenBy(d *appsv1.Deployment) Written {
	return Written{Generation: d.Generation, Template: d.Spec.Template.DeepCopy()}
}

// Image is the node container's image of the template written.
func (w Written) Image() string {
	if w.Template == nil {
		return ""
	}
	return containerImage(w.Template.Spec)
}

// heldBy: d still holds what w wrote; no one changed its spec since.
func (w Written) heldBy(d *appsv1.Deployment) bool {
	return w.Template != nil && d.Generation == w.Generation && templatesEqual(&d.Spec.Template, w.Template)
}

// ApplyDeployment creates or updates the Deployment and returns; it does not wait.
func (c *Client) ApplyDeployment(ctx context.Context, s NodeSpec) (Applied, error) {
	if err := s.Validate(); err != nil {
		return Applied{}, err
	}
	want := BuildDeployment(s)
	api := c.CS.AppsV1().Deployments(s.Namespace)
	var out Applied
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := api.Get(ctx, s.Node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			out = Applied{Changed: true}
			made, err := api.Create(ctx, want, metav1.CreateOptions{FieldManager: ManagedBy})
			if err == nil {
				out.Written = writtenBy(made)
			}
			return err
		}
		if err != nil {
			return err
		}
		prev := cur.Spec.Template.DeepCopy()
		out = Applied{Previous: prev, PreviousImage: containerImage(prev.Spec), LastGood: lastGood(cur)}
		cur.Labels = want.Labels
		cur.Spec.Replicas = want.Spec.Replicas
		cur.Spec.Strategy = want.Spec.Strategy
		cur.Spec.ProgressDeadlineSeconds = want.Spec.ProgressDeadlineSeconds
		cur.Spec.Template = want.Spec.Template
		upd, err := api.Update(ctx, cur, metav1.UpdateOptions{FieldManager: ManagedBy})
		if err != nil {
			return err
		}
		out.Changed = upd.Generation != cur.Generation
		out.Current = upd.Spec.Template.DeepCopy()
		out.Written = writtenBy(upd)
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("node %s: apply Deployment %s/%s: %w", s.Node, s.Namespace, s.Node, err)
	}
	return out, nil
}

func containerImage(spec corev1.PodSpec) string {
	for _, c := range spec.Containers {
		if c.Name == ContainerName {
			return c.Image
		}
	}
	return ""
}

// lastGood decodes LastGoodAnnotation; a missing or unreadable one is nil.
func lastGood(d *appsv1.Deployment) *corev1.PodTemplateSpec {
	raw := d.Annotations[LastGoodAnnotation]
	if raw == "" {
		return nil
	}
	var t corev1.PodTemplateSpec
	if err := json.Unmarshal([]byte(raw), &t); err != nil || containerImage(t.Spec) == "" {
		return nil
	}
	return &t
}

// recordGood writes the Deployment's current template into LastGoodAnnotation, when the
// Deployment still holds what this run wrote (its pod was just seen ready). A merge patch
// of the metadata: no new pod, no conflict with the controllers' status writes.
func (c *Client) recordGood(ctx context.Context, ns, node string, ours Written) error {
	api := c.CS.AppsV1().Deployments(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := api.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !ours.heldBy(d) {
			return changedByOther(d, ours)
		}
		if lg := lastGood(d); lg != nil && templatesEqual(lg, &d.Spec.Template) {
			return nil
		}
		tpl, err := json.Marshal(d.Spec.Template)
		if err != nil {
			return err
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"annotations":     map[string]string{LastGoodAnnotation: string(tpl)},
			"resourceVersion": d.ResourceVersion, // never record over a template changed meanwhile
		}})
		if err != nil {
			return err
		}
		_, err = api.Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: ManagedBy})
		return err
	})
	if err != nil {
		return fmt.Errorf("node %s: record the last good template on Deployment %s/%s: %w", node, ns, node, err)
	}
	return nil
}

func templatesEqual(a, b *corev1.PodTemplateSpec) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// Rollback puts the previous pod template back, as `kubectl rollout undo` does, but only
// over what this run wrote (ours). When the Deployment's generation or template is no
// longer ours, another writer changed it since: Rollback then changes nothing and returns
// an *OtherWriterError, for setting it back would undo that writer's change. The check and
// the write are one step: the update carries the resourceVersion of the read it checked,
// so a change in between is a conflict, and the check runs again on a fresh read.
// It returns what the rollback wrote.
func (c *Client) Rollback(ctx context.Context, ns, node string, ours Written, prev *corev1.PodTemplateSpec) (Written, error) {
	api := c.CS.AppsV1().Deployments(ns)
	var out Written
	var other *OtherWriterError
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := api.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !ours.heldBy(cur) {
			other = changedByOther(cur, ours)
			return other
		}
		cur.Spec.Template = *prev.DeepCopy()
		upd, err := api.Update(ctx, cur, metav1.UpdateOptions{FieldManager: ManagedBy})
		if err != nil {
			return err
		}
		out = writtenBy(upd)
		return nil
	})
	switch {
	case other != nil && errors.Is(err, other):
		return Written{}, other
	case err != nil:
		return Written{}, fmt.Errorf("node %s: set Deployment %s/%s back to %s: %w", node, ns, node, containerImage(prev.Spec), err)
	}
	return out, nil
}

// NodeState is what Read needs: the image the cluster is set to run and whether it is up.
type NodeState struct {
	Exists        bool
	Image         string // the node container's image in the Deployment
	LastGoodImage string // the image of LastGoodAnnotation, empty when none was recorded
	Ready         bool   // the rollout of that template is complete and its pod ready
	ContainerUUID string
	RuntimeClass  string
	ClaimExists   bool
	ClaimPhase    string
	StorageClass  string
	StorageSize   string
}

// GetNode reads the Deployment and the claim of a node.
func (c *Client) GetNode(ctx context.Context, ns, node string) (NodeState, error) {
	d, err := c.CS.AppsV1().Deployments(ns).Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return NodeState{}, nil
	}
	if err != nil {
		return NodeState{}, fmt.Errorf("node %s: read Deployment %s/%s: %w", node, ns, node, err)
	}
	st := NodeState{Exists: true, Image: containerImage(d.Spec.Template.Spec), Ready: rolloutComplete(d)}
	if lg := lastGood(d); lg != nil {
		st.LastGoodImage = containerImage(lg.Spec)
	}
	if rc := d.Spec.Template.Spec.RuntimeClassName; rc != nil {
		st.RuntimeClass = *rc
	}
	for _, ct := range d.Spec.Template.Spec.Containers {
		for _, e := range ct.Env {
			if e.Name == "container_uuid" {
				st.ContainerUUID = e.Value
			}
		}
	}
	pvc, err := c.CS.CoreV1().PersistentVolumeClaims(ns).Get(ctx, ClaimName(node), metav1.GetOptions{})
	if err == nil {
		st.ClaimExists, st.ClaimPhase = true, string(pvc.Status.Phase)
		if pvc.Spec.StorageClassName != nil {
			st.StorageClass = *pvc.Spec.StorageClassName
		}
		if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			st.StorageSize = q.String()
		}
	} else if !apierrors.IsNotFound(err) {
		return st, fmt.Errorf("node %s: read claim %s: %w", node, ClaimName(node), err)
	}
	return st, nil
}

// DeleteNode removes the Deployment, the service account and the claim of a node (a
// node leaving the group loses its state), and waits until the
// Deployment and the claim are gone, so that a node of the same name can be made again.
func (c *Client) DeleteNode(ctx context.Context, ns, node string) error {
	fg := metav1.DeletePropagationForeground
	opts := metav1.DeleteOptions{PropagationPolicy: &fg}
	if err := c.CS.AppsV1().Deployments(ns).Delete(ctx, node, opts); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s: delete Deployment: %w", node, err)
	}
	if err := c.CS.CoreV1().ServiceAccounts(ns).Delete(ctx, ServiceAccountName(node), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s: delete service account: %w", node, err)
	}
	if err := c.CS.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, ClaimName(node), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s: delete claim: %w", node, err)
	}
	return c.waitGone(ctx, ns, node)
}

func (c *Client) waitGone(ctx context.Context, ns, node string) error {
	for {
		_, derr := c.CS.AppsV1().Deployments(ns).Get(ctx, node, metav1.GetOptions{})
		_, cerr := c.CS.CoreV1().PersistentVolumeClaims(ns).Get(ctx, ClaimName(node), metav1.GetOptions{})
		if apierrors.IsNotFound(derr) && apierrors.IsNotFound(cerr) {
			return nil
		}
		if err := sleep(ctx, c.poll()); err != nil {
			return fmt.Errorf("node %s: the Deployment or the claim %s is still being deleted: %w", node, ClaimName(node), err)
		}
	}
}

// rolloutComplete is `kubectl rollout status`'s test for one replica.
func rolloutComplete(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return d.Status.ObservedGeneration >= d.Generation &&
		d.Status.UpdatedReplicas == want &&
		d.Status.Replicas == want &&
		d.Status.AvailableReplicas == want &&
		d.Status.ReadyReplicas == want
}
