package provider

// The Incus snapshot guard of fediversity_node_switch (moves to the transport).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	incustransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/incus"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// snapshotGuard wraps an Incus transport: before the switch it takes a native snapshot
// named after the generation the node runs (the rollback point) and rotates to the
// newest keep. After a run that left the node unreachable it restores that snapshot.
type snapshotGuard struct {
	*incustransport.Transport
	keep     int
	instance string
	taken    string
}

func newSnapshotGuard(t deploybody.Transport, keep int, instance string) (*snapshotGuard, error) {
	it, ok := t.(*incustransport.Transport)
	if !ok {
		return nil, fmt.Errorf("node %s: the snapshot block needs the incus transport (an ssh node has no native snapshots); remove the snapshot block or use an incus block", t.Node())
	}
	return &snapshotGuard{Transport: it, keep: keep, instance: instance}, nil
}

// Switch takes the snapshot, then switches. A snapshot that cannot be taken stops the
// deploy before anything changed on the node.
func (g *snapshotGuard) Switch(ctx context.Context, toplevel, action string, limit time.Duration) (deploybody.SwitchResult, error) {
	gen := 0
	if res, err := g.Run(ctx, []string{"readlink", "/nix/var/nix/profiles/system"}, deploybody.RunOptions{}); err == nil && res.ExitCode == 0 {
		gen = parseGenerationLink(strings.TrimSpace(string(res.Stdout)))
	}
	name := incustransport.GenerationSnapshotName(gen)
	if err := g.SnapshotBeforeSwitch(ctx, name, g.keep); err != nil {
		return deploybody.SwitchResult{}, fmt.Errorf("snapshot %s before the switch: %w (nothing was switched; fix the instance's storage or remove the snapshot block)", name, err)
	}
	g.taken = name
	return g.Transport.Switch(ctx, toplevel, action, limit)
}

// parseGenerationLink reads N from "system-N-link" (the target of the system profile).
func parseGenerationLink(target string) int {
	base := target[strings.LastIndex(target, "/")+1:]
	s, ok := strings.CutPrefix(base, "system-")
	if !ok {
		return 0
	}
	s, ok = strings.CutSuffix(s, "-link")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
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
// probe: any error except a verdict the node answered (a failed unit is never restored,
// FR-004).
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

// restoreIfUnreachable restores the snapshot when the switch left the node unreachable:
// the run says so, or the run failed after the switch and the node then does not answer
// within nodeWait. A node with a failed unit answers, so it is never restored (FR-004).
func (g *snapshotGuard) restoreIfUnreachable(ctx context.Context, res *deploybody.Result, runErr error, nodeWait, interval time.Duration) (bool, error) {
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
	return true, g.RestoreSnapshot(rctx, g.taken)
}

// answers polls the node until it answers twice in a row, interval apart, with a
// systemd that is up (not "stopping": a node that powers itself off still answers for a
// moment), or until wait has passed.
func (g *snapshotGuard) answers(ctx context.Context, wait, interval time.Duration) bool {
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

func (g *snapshotGuard) systemdUp(ctx context.Context) bool {
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

func (g *snapshotGuard) diagnostic(node string, restoreErr error) diag.Diagnostics {
	var diags diag.Diagnostics
	if restoreErr != nil {
		diags.AddError(fmt.Sprintf("Node %s is unreachable after the switch and its snapshot could not be restored", node),
			fmt.Sprintf("Node %s, phase restore-snapshot: the node did not answer after the switch; restoring snapshot %s failed: %v. "+
				"Restore it by hand (`incus snapshot restore %s %s`) and start the instance.", node, g.taken, restoreErr, g.instance, g.taken))
		return diags
	}
	diags.AddError(fmt.Sprintf("Node %s was unreachable after the switch: snapshot %s restored", node, g.taken),
		fmt.Sprintf("Node %s, phase wait-for-node: the node did not answer after the switch, so the snapshot %s taken before it was restored "+
			"and the instance started again; it runs its previous system. Find out why the new closure bricks the node before applying it again.", node, g.taken))
	return diags
}
