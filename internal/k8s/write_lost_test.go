package k8s

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// A Deployment write whose answer is lost, on client-go's fake clientset: the answer has
// to be lost right after the apiserver applied the write (or with the write never
// applied), which a real apiserver cannot be made to do on demand. On the lab,
// TestAccK8sRollout_apiOutageDuringWait hits the first case by chance on a loaded machine
// (its cut can fall on the write's answer).
func TestRolloutWriteAnswerLost(t *testing.T) {
	for name, took := range map[string]bool{"the write took effect": true, "the write never arrived": false} {
		t.Run(name, func(t *testing.T) {
			cs := deployedGood(t)
			cs.PrependReactor("update", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
				if took {
					d := a.(clienttesting.UpdateAction).GetObject().(*appsv1.Deployment)
					if err := cs.Tracker().Update(deploymentsGVR, d, d.Namespace); err != nil {
						return true, nil, err
					}
				}
				return true, nil, errors.New("unexpected EOF")
			})
			s := testSpec()
			out, err := (&Client{CS: cs}).Rollout(context.Background(), s, WaitOptions{Limit: time.Minute})
			var lost *WriteAnswerLostError
			if !errors.As(err, &lost) {
				t.Fatalf("err = %v, want a WriteAnswerLostError", err)
			}
			want, words := goodImage, "did not take effect: the Deployment names "+goodImage
			if took {
				want, words = s.Image, "the write took effect: the Deployment names "+s.Image
			}
			if lost.Running != want || out.Running != want || !strings.Contains(err.Error(), words) {
				t.Fatalf("read back %q (outcome %q), want %q; message:\n%v", lost.Running, out.Running, want, err)
			}
			if got := containerImage(getDeployment(t, cs).Spec.Template.Spec); got != want {
				t.Fatalf("the Deployment names %s, want %s: nothing may be rolled back", got, want)
			}
		})
	}
}
