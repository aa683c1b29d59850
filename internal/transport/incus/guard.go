package incus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// SnapshotGuard wraps an Incus transport for one deploy: before the switch it takes a
// native snapshot named after the generation the node runs (the rollback point) and
// rotates to the newest keep. After a run that left the node unreachable,
// RestoreIfUnreachable restores that snapshot. A node with a failed unit answers, so it
// is never restored: it keeps its new boot entry.
type SnapshotGuard struct {
	*Transport
	keep  int
	taken string
	// bricked is the snapshot the bricked state was kept aside as ("" when none was
	// taken); brickedErr says why keeping it failed.
	bricked    string
	brickedErr error
}

var _ deploybody.Transport = (*SnapshotGuard)(nil)

// NewSnapshotGuard wraps t, which must be an Incus transport: an SSH node has no native
// snapshots.
func NewSnapshotGuard(t deploybody.Transport, keep int) (*SnapshotGuard, error) {
	it, ok := t.(*Transport)
	if !ok {
		return nil, fmt.Errorf("node %s: the snapshot block needs the incus transport (an ssh node has no native snapshots); remove the snapshot block or use an incus block", t.Node())
	}
	return &SnapshotGuard{Transport: it, keep: keep}, nil
}

// Taken is the name of the snapshot taken before the switch ("" before the switch).
func (g *SnapshotGuard) Taken() string { return g.taken }

// Bricked is the snapshot the bricked state was kept aside as before the restore (""
// when none was taken), and why keeping it failed.
func (g *SnapshotGuard) Bricked() (string, error) { return g.bricked, g.brickedErr }

// Instance is the name of the guarded Incus instance.
func (g *SnapshotGuard) Instance() string { return g.instance }

// Switch takes the snapshot, then switches. A snapshot that cannot be taken stops the
// deploy before anything changed on the node. A node whose system profile names no
// generation yet (a first deploy) gets the snapshot of generation 0.
func (g *SnapshotGuard) Switch(ctx context.Context, toplevel, action string, limit time.Duration) (deploybody.SwitchResult, error) {
	gen, err := g.Generation(ctx)
	if err != nil {
		gen = 0
	}
	name := GenerationSnapshotName(gen)
	if err := g.SnapshotBeforeSwitch(ctx, name, g.keep); err != nil {
		return deploybody.SwitchResult{}, fmt.Errorf("snapshot %s before the switch: %w (nothing was switched; fix the instance's storage or remove the snapshot block)", name, err)
	}
	g.taken = name
	return g.Transport.Switch(ctx, toplevel, action, limit)
}

// RestoreIfUnreachable restores the snapshot when the switch left the node unreachable:
// the run says so, or the run failed after the switch and the node then does not answer
// within nodeWait (polled every interval). Before restoring it keeps the bricked state
// aside (Bricked). restored says whether it restored; err is the restore's own failure.
func (g *SnapshotGuard) RestoreIfUnreachable(ctx context.Context, res *deploybody.Result, runErr error, nodeWait, interval time.Duration) (restored bool, err error) {
	if g.taken == "" {
		return false, nil
	}
	// The deploy's own deadline may be spent; probe and restore get their own bounded time.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nodeWait+5*time.Minute)
	defer cancel()
	if !unreachableAfterSwitch(res, runErr) {
		if !mayBeUnreachable(res, runErr) || g.answers(rctx, nodeWait, interval) {
			return false, nil
		}
	}
	// Restore aside: the state that stopped answering is kept as its own snapshot
	// first. Bringing the node back matters more, so a failure here does not stop
	// the restore; it is reported.
	name := BrickedSnapshotName(time.Now())
	if err := g.KeepAside(rctx, name); err != nil {
		g.brickedErr = err
	} else {
		g.bricked = name
	}
	return true, g.RestoreSnapshot(rctx, g.taken)
}

// switched reports whether the run reached the switch phase.
func switched(res *deploybody.Result) bool {
	if res == nil {
		return false
	}
	for _, p := range res.Phases {
		if p.Name == deploybody.PhaseSwitch && !strings.HasPrefix(p.Note, "skipped") {
			return true
		}
	}
	return false
}

// unreachableAfterSwitch reports whether a run switched and then, by its own account,
// lost the node (the verdict says unreachable, or an error wraps ErrUnreachable).
func unreachableAfterSwitch(res *deploybody.Result, runErr error) bool {
	if !switched(res) {
		return false
	}
	if res.Verdict != nil && res.Verdict.Unreachable {
		return true
	}
	return runErr != nil && errors.Is(runErr, deploybody.ErrUnreachable)
}

// mayBeUnreachable reports whether a failed run after the switch needs a reachability
// probe: any error except a verdict the node answered (a failed unit is never restored).
func mayBeUnreachable(res *deploybody.Result, runErr error) bool {
	if runErr == nil || !switched(res) {
		return false
	}
	var de *deploybody.DeployError
	if errors.As(runErr, &de) && de.Phase == deploybody.PhaseVerdict && res.Verdict != nil && !res.Verdict.Unreachable {
		return false
	}
	return true
}

// answers polls the node until it answers twice in a row, interval apart, with a
// systemd that is up (not "stopping": a node that powers itself off still answers for a
// moment), or until wait has passed.
func (g *SnapshotGuard) answers(ctx context.Context, wait, interval time.Duration) bool {
	if interval <= 0 {
		interval = time.Second
	}
	deadline := time.Now().Add(wait)
	good := 0
	for i := 0; i < 1000; i++ {
		if g.systemdUp(ctx) {
			good++
			if good >= 2 {
				return true
			}
		} else {
			good = 0
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(interval):
		}
	}
	return false
}

func (g *SnapshotGuard) systemdUp(ctx context.Context) bool {
	if g.Reach(ctx) != nil {
		return false
	}
	res, err := g.Run(ctx, []string{"systemctl", "is-system-running"}, deploybody.RunOptions{})
	if err != nil {
		return false
	}
	switch strings.TrimSpace(string(res.Stdout)) {
	case "running", "degraded", "starting", "initializing", "maintenance":
		return true
	}
	return false
}
