package incus

// The verdict of a restored node: after a restore the run's own verdict is void (the
// node no longer runs what it judged), so the restored system is judged on its own,
// for the run's error to say whether the rollback point the node is back on is healthy.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// JudgeRestored runs the read-only verdict pass (it restarts nothing) on the restored
// node, judging the system the rollback point's manifest names, with opts' timings,
// checks and strictness, and says what it found (RestoredVerdictText), for the run's
// error in either front end.
func (g *SnapshotGuard) JudgeRestored(ctx context.Context, opts deploybody.Options) string {
	return RestoredVerdictText(g.judgeRestored(ctx, opts))
}

func (g *SnapshotGuard) judgeRestored(ctx context.Context, opts deploybody.Options) (string, *deploybody.Result, error) {
	top := g.set.Manifest.Toplevel
	if top == "" {
		// A kept earlier point: its manifest is on the instance.
		if inst, err := g.c.GetInstance(ctx, g.instance); err == nil {
			if m, ok := setManifest(inst.Config, g.taken); ok {
				top = m.Toplevel
			}
		}
	}
	if top == "" {
		return "", nil, errors.New("the rollback point's manifest names no system (a set taken before manifests, or of a node that ran none)")
	}
	opts.Toplevel, opts.Build = top, nil
	g.waitBooted(ctx, top, opts.Timings.NodeWait)
	res, err := deploybody.VerdictReadOnly(ctx, g.Transport, opts)
	return top, res, err
}

// waitBooted waits, bounded by wait (30 s when unset), until the restored node runs top:
// the node answers as soon as its init does, and its system may come up a moment later
// (NixOS's stage 2 activates it before systemd starts; the lab's stand-in does it in a
// unit). A node that never runs top is judged as it is: the pass says what it runs.
func (g *SnapshotGuard) waitBooted(ctx context.Context, top string, wait time.Duration) {
	if wait <= 0 {
		wait = 30 * time.Second
	}
	deadline := time.Now().Add(wait)
	for i := 0; i < 600 && time.Now().Before(deadline); i++ {
		res, err := g.Run(ctx, []string{"readlink", "-e", "/run/current-system"}, deploybody.RunOptions{})
		if err == nil && strings.TrimSpace(string(res.Stdout)) == top {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// RestoredVerdictText is what the run's error adds about the restored system: judged
// ok, failing and why, or why it could not be judged.
func RestoredVerdictText(top string, res *deploybody.Result, err error) string {
	switch {
	case res != nil && res.Verdict != nil && res.Verdict.OK && len(res.Verdict.Reasons) == 0:
		return fmt.Sprintf("The restored system (%s) was judged after the restore: ok (system %s).", top, res.Verdict.SystemState)
	case res != nil && res.Verdict != nil:
		verdict := "ok, with warnings"
		if !res.Verdict.OK {
			verdict = "failing"
		}
		return fmt.Sprintf("The restored system (%s) was judged after the restore: %s: %s.", top, verdict, strings.Join(res.Verdict.Reasons, "; "))
	case err != nil:
		return fmt.Sprintf("The restored system could not be judged after the restore: %v.", err)
	}
	return "The restored system could not be judged after the restore: the pass reached no verdict."
}
