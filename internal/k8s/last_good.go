package k8s

// A node's last good template, as a roll back to it reads it: the pod template recorded
// on the Deployment (LastGoodAnnotation) after its pod was last seen ready. It is what
// `deploy = "last-good"` of fediversity_k8s_rollout rolls the node out to, the k8s
// counterpart of a NixOS node's last good system (deploybody.LastGoodToplevel).

import (
	"context"
	"errors"
	"fmt"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// ErrNoLastGood says the node has no last good template: no pod of it was ever seen
// ready by a rollout, or it has no Deployment. The words follow records.ErrNoLastGood,
// the NixOS nodes' (the provider adds the node and the attribute that asked).
var ErrNoLastGood = errors.New("the node has no last good template (annotation " + LastGoodAnnotation + " on its Deployment): no pod of it was ever seen ready")

// NoLastGoodHint is what to do about ErrNoLastGood.
const NoLastGoodHint = "roll out an image whose pod becomes ready first (a ready rollout records its template); the node was left untouched"

// PhaseReadLastGood is the phase a roll back to the last good template fails in: the
// NixOS nodes' phase name, so both say it alike.
const PhaseReadLastGood = deploybody.PhaseReadLastGood

// LastGoodImage is the image of the node's last good template: ErrNoLastGood (maybe
// wrapped) when there is none, another error when the Deployment cannot be read. The
// caller names the node.
func (c *Client) LastGoodImage(ctx context.Context, ns, node string) (string, error) {
	st, err := c.GetNode(ctx, ns, node)
	if err != nil {
		return "", err
	}
	if !st.Exists {
		return "", fmt.Errorf("no Deployment %s/%s exists: %w", ns, node, ErrNoLastGood)
	}
	if st.LastGoodImage == "" {
		return "", ErrNoLastGood
	}
	return st.LastGoodImage, nil
}
