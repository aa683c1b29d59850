package incus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
)

// SnapshotGuard wraps an Incus transport for one deploy: before the switch it takes a
// native snapshot named after the generation the node runs (the rollback point) and
// rotates to the newest keep. After a run that left the node unreachable, the deploy
// body restores that snapshot (deploybody.Restorer), under the node lock, and never for
// a run that lost the lock. A node with a failed unit answers, so it is never restored:
// it keeps its new boot entry.
//
// The rollback point is known good: a snapshot of a node that runs what its boot entry
// points at. A node an earlier run left unfinished (it runs a system its profile does
// not point at) is not snapshotted over the known-good point of its generation: a retry
// keeps the point the unfinished run took.
type SnapshotGuard struct {
	*Transport
	keep  int
	taken string
	// kept is true when the rollback point is an earlier run's, kept because the node
	// was left unfinished.
	kept bool
	// restored says a restore ran; restoreErr is its failure. afterReboot says the
	// run rebooted the node (the node stopped answering after its reboot, not its
	// switch).
	afterReboot bool
	restored    bool
	restoreErr  error
	// bricked is the snapshot the bricked state was kept aside as ("" when none was
	// taken); brickedErr says why keeping it failed.
	bricked     string
	brickedVols []SetVolume
	brickedErr  error
	// brickedName is the name the volumes' bricked snapshots have when keeping the
	// bricked state aside failed half-way (bricked is "" then).
	brickedName string
	// set is the set taken before the switch (its manifest, and the host-path disks
	// it could not hold).
	set SetTaken
	// spaceUnknown names the members whose size the storage driver could not tell
	// (counted as 0 by the space check); restoreTook is how long the restore took,
	// space check included.
	spaceUnknown []string
	restoreTook  time.Duration
	// interrupted is what ResumeRestore does with an earlier run's unfinished restore.
	interrupted string
}

var (
	_ deploybody.Transport = (*SnapshotGuard)(nil)
	_ deploybody.Restorer  = (*SnapshotGuard)(nil)
)

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

// LostAfter names what the node stopped answering after, in the restore's messages:
// "the reboot" or "the switch".
func (g *SnapshotGuard) LostAfter() string {
	if g.afterReboot {
		return "the reboot"
	}
	return "the switch"
}

// Restored says whether the body restored the rollback point, and the restore's own
// failure.
func (g *SnapshotGuard) Restored() (bool, error) { return g.restored, g.restoreErr }

// KeptEarlierPoint says the rollback point is the one an earlier, unfinished run took
// (the node did not run what it boots, so its state was not snapshotted as known good).
func (g *SnapshotGuard) KeptEarlierPoint() bool { return g.kept }

// RestoreTook is how long the restore took (space check, keeping the bricked state
// aside, stop, restore, start, until the node answered).
func (g *SnapshotGuard) RestoreTook() time.Duration { return g.restoreTook }

// SpaceUnknown names the members whose size the storage driver could not tell, so the
// restore's space check counted them as 0.
func (g *SnapshotGuard) SpaceUnknown() []string { return g.spaceUnknown }

// Set is the set taken before the switch: its manifest (members, freeze window) and
// the disk devices that are host paths, which it cannot hold.
func (g *SnapshotGuard) Set() SetTaken { return g.set }

// BrickedVolumes are the custom volumes whose bricked state was kept aside as snapshots
// named Bricked().
func (g *SnapshotGuard) BrickedVolumes() []SetVolume { return g.brickedVols }

// Switch takes the snapshot, then switches. A snapshot that cannot be taken stops the
// deploy before anything changed on the node. A node whose system profile names no
// generation yet (a first deploy) gets the snapshot of generation 0.
func (g *SnapshotGuard) Switch(ctx context.Context, toplevel, action string, limit time.Duration) (deploybody.SwitchResult, error) {
	gen, err := g.Generation(ctx)
	if err != nil {
		gen = 0
	}
	name := GenerationSnapshotName(gen)
	keepEarlier, running := g.keepEarlierPoint(ctx, name)
	if keepEarlier {
		g.taken, g.kept = name, true
		g.logPrintf("snapshot: the node runs a system its boot entry does not point at (an unfinished earlier run): keeping %s as the rollback point", name)
		return g.Transport.Switch(ctx, toplevel, action, limit)
	}
	set, err := g.TakeSet(ctx, name, gen, running, g.keep)
	if err != nil {
		return deploybody.SwitchResult{}, fmt.Errorf("snapshot %s before the switch: %w (nothing was switched; fix the instance's storage or remove the snapshot block)", name, err)
	}
	g.taken, g.set = name, set
	g.logPrintf("snapshot: set %s taken (root disk and %d custom volumes) in %d ms, the instance frozen for %s",
		name, len(set.Manifest.Volumes), set.Manifest.TookMS, set.Manifest.FreezeWindow())
	return g.Transport.Switch(ctx, toplevel, action, limit)
}

// readFinished is one round trip: what the node runs and what its profile points at.
var readFinished = []string{"sh", "-c", `printf '%s\n' "$(readlink -e /run/current-system)" "$(readlink -e /nix/var/nix/profiles/system)"`}

// keepEarlierPoint tells whether the snapshot name, taken by an earlier run, must be
// kept instead of replaced: the node does not run what it boots, so its state now is
// not known good. A node whose state cannot be read is snapshotted as before.
//
// It also returns the system the node runs ("" when it cannot be read), for the set's
// manifest.
func (g *SnapshotGuard) keepEarlierPoint(ctx context.Context, name string) (bool, string) {
	res, err := g.Run(ctx, readFinished, deploybody.RunOptions{})
	if err != nil || res.ExitCode != 0 {
		return false, ""
	}
	lines := strings.Split(string(res.Stdout), "\n")
	for len(lines) < 2 {
		lines = append(lines, "")
	}
	running, profile := strings.TrimSpace(lines[0]), strings.TrimSpace(lines[1])
	if finishedNode(running, profile) {
		return false, running
	}
	snaps, err := g.snapshotsWithPrefix(ctx, generationPrefix)
	if err != nil {
		return false, running
	}
	return keepRollbackPoint(running, profile, name, snaps), running
}

// keepRollbackPoint decides whether the rollback point name, if already among snaps,
// stays as it is: the node does not run what it boots (an earlier run was cut off
// after its switch), so its state now is not known good, and the snapshot of that
// generation, taken before the unfinished switch, is. Without one there is nothing
// better to keep, and the state is snapshotted.
func keepRollbackPoint(running, profile, name string, snaps []incusapi.Snapshot) bool {
	if finishedNode(running, profile) {
		return false
	}
	for _, s := range snaps {
		if s.Name == name {
			return true
		}
	}
	return false
}

// finishedNode tells whether a node runs what its boot entry points at: the only state
// a rollback point may be taken of. A node that runs no system yet (a first deploy) is
// taken as finished: there is nothing better to keep.
func finishedNode(running, profile string) bool {
	return running == "" || running == profile
}

// NeedsRestore tells whether the run left the node unreachable after its switch: the
// run says so, or the run failed after the switch and the node then does not answer
// within nodeWait (polled every interval). A run without a rollback point needs none.
func (g *SnapshotGuard) NeedsRestore(ctx context.Context, res *deploybody.Result, runErr error, nodeWait, interval time.Duration) bool {
	if g.taken == "" {
		return false
	}
	g.afterReboot = res != nil && res.Reboot != nil || errors.Is(runErr, deploybody.ErrNotBack)
	if unreachableAfterSwitch(res, runErr) {
		return true
	}
	if !mayBeUnreachable(res, runErr) {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, nodeWait+time.Minute)
	defer cancel()
	return !g.answers(pctx, nodeWait, interval)
}

// Restore keeps the state that stopped answering aside as its own snapshot (Bricked),
// then restores the rollback point. Bringing the node back matters more, so a failure
// to keep the bricked state does not stop the restore; it is reported.
//
// Before anything changes, the space for a copy of the rollback point is checked
// (RestoreSpace): a pool or project quota too small refuses the restore with the
// figures, and the node is left as the failed run left it. A check that cannot be made
// (the daemon does not answer) refuses it too: nothing may change unchecked.
func (g *SnapshotGuard) Restore(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, restoreBound)
	defer cancel()
	g.restored = true
	start := time.Now()
	defer func() { g.restoreTook = time.Since(start) }()
	unknown, err := g.RestoreSpace(rctx, g.taken)
	g.spaceUnknown = unknown
	if err != nil {
		if !IsSpaceError(err) {
			err = fmt.Errorf("%w (the space for the restore could not be checked, so nothing was changed: restore by hand with `incus snapshot restore %s %s`, then `incus start %s`)", err, g.instance, g.taken, g.instance)
		}
		g.restoreErr = err
		return err
	}
	if len(unknown) > 0 {
		g.logPrintf("restore: the storage driver tells no size of %s: counted as 0 in the space check", strings.Join(unknown, ", "))
	}
	// The bricked root disk is kept under its pending name, the restore's journal
	// (restore_journal.go), until the restore finished: a run cut off in between
	// leaves the next one that name to finish from.
	now := time.Now()
	pending, name := PendingRestoreName(now, g.taken), BrickedSnapshotName(now)
	vols, err := g.KeepAside(rctx, pending, name)
	// The volumes kept aside before a failure are reported all the same (the error
	// names them, and how to remove them): rotation never deletes a bricked state.
	g.brickedVols = vols
	journal := ""
	if err != nil {
		g.brickedErr = err
		g.brickedName = name
	} else {
		g.bricked, journal = pending, pending
	}
	journal, g.restoreErr = g.restoreFrom(rctx, g.taken, g.taken, journal)
	if journal != "" {
		g.bricked = journal
	}
	if g.restoreErr == nil && journal != "" {
		if err := g.c.RenameSnapshot(rctx, g.instance, journal, name); err != nil {
			// The node runs its rollback point; the next run closes the journal.
			g.logPrintf("restore: renaming %s to %s failed (the next deploy does it): %v", journal, name, err)
		} else {
			g.bricked = name
		}
	}
	g.logPrintf("restore: set %s restored in %s (error: %v)", g.taken, time.Since(start).Round(time.Millisecond), g.restoreErr)
	return g.restoreErr
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
// probe: any error except a verdict the node answered to the end, up and not shutting
// down (a failed unit is never restored). A node that powers itself off still answers
// for a moment, the longer the busier its host: its verdict then saw systemd
// "stopping", or lost the node after the first samples, and the probe decides.
func mayBeUnreachable(res *deploybody.Result, runErr error) bool {
	if runErr == nil || !switched(res) {
		return false
	}
	var de *deploybody.DeployError
	if errors.As(runErr, &de) && de.Phase == deploybody.PhaseVerdict && res.Verdict != nil && answeredToTheEnd(res.Verdict) {
		return false
	}
	return true
}

// answeredToTheEnd tells whether a verdict's node answered every sample and never said
// it was shutting down.
func answeredToTheEnd(v *judge.Verdict) bool {
	return !v.Unreachable && !v.ShuttingDown && v.Answered == v.Samples
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
