package incus

// The journal of a restore. A restore stops the instance, restores the root disk and
// the custom volumes of a set, and starts the instance again; a run cut off in the
// middle (the plugin killed, the deployer's machine gone) leaves the instance stopped,
// restored by half, or still running the state that stopped answering. The next run
// must know that, which set was being restored, and how far the restore got.
//
// The journal is the name of the snapshot that keeps the bricked root disk aside:
// fediversity-restoring-<time>-<step>-from-<set>. It is taken at step "begun", after
// the volumes' bricked snapshots and before the instance is stopped; renamed to step
// "restored" once every member is restored, before the instance is started; and
// renamed to its kept name, fediversity-bricked-<time>, as the restore's very last
// step. So an instance that runs under a "begun" journal was never stopped by its
// restore: it runs the state that stopped answering, and the restore is owed; one that
// runs under a "restored" journal was started by it. A journal of an older version has
// no step: the instance's last start against the journal's time tells then. Not a
// config key: restoring the root disk rolls the instance's configuration back to the
// set's, which would drop a journal kept there half-way through. A snapshot's name
// outlives every step of a restore, and a rename touches no data.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
)

// restoringPrefix starts the name of a bricked root disk kept aside by a restore that
// has not finished (see the file comment).
const restoringPrefix = SnapshotPrefix + "restoring-"

// restoreBound bounds one restore (space check, keeping the bricked state aside, stop,
// restore, start, until the node answers). restoreLease is how long a pending restore
// may still be another live run's: past it, its run is gone.
const (
	restoreBound = 5 * time.Minute
	restoreLease = restoreBound + time.Minute
)

// brickedTimeFormat is the time in the names of the bricked states.
const brickedTimeFormat = "20060102t150405z"

// The steps a journal names (see the file comment).
const (
	journalBegun    = "begun"
	journalRestored = "restored"
)

// PendingRestoreName is the name the bricked root disk is kept under when the restore
// of set begins at at: its journal at step "begun".
func PendingRestoreName(at time.Time, set string) string {
	return journalName(at.UTC().Format(brickedTimeFormat), journalBegun, set)
}

func journalName(stamp, step, set string) string {
	return restoringPrefix + stamp + "-" + step + "-from-" + strings.TrimPrefix(set, SnapshotPrefix)
}

// PendingRestore is a restore that has not finished: its run is still at work, or was
// cut off.
type PendingRestore struct {
	// Snapshot is the journal: the bricked root disk under its pending name.
	Snapshot string
	// Set is the set being restored.
	Set string
	// Bricked is the name the bricked state is kept under once the restore finished
	// (the custom volumes' bricked snapshots have it from the start).
	Bricked string
	// Since is when the restore began.
	Since time.Time
	// Step is how far the restore got: journalBegun, journalRestored, or "" for a
	// journal of an older version, which does not say.
	Step string
}

// restoredName is the journal's name at step "restored".
func (p PendingRestore) restoredName() string {
	return journalName(strings.TrimPrefix(p.Bricked, BrickedPrefix), journalRestored, p.Set)
}

// parsePendingRestore reads a journal snapshot's name.
func parsePendingRestore(s incusapi.Snapshot) (PendingRestore, bool) {
	rest, ok := strings.CutPrefix(s.Name, restoringPrefix)
	if !ok {
		return PendingRestore{}, false
	}
	stamp, set, ok := strings.Cut(rest, "-from-")
	if !ok || set == "" {
		return PendingRestore{}, false
	}
	step := ""
	if t, st, found := strings.Cut(stamp, "-"); found {
		if st != journalBegun && st != journalRestored {
			return PendingRestore{}, false
		}
		stamp, step = t, st
	}
	at, err := time.Parse(brickedTimeFormat, stamp)
	if err != nil {
		return PendingRestore{}, false
	}
	since := s.CreatedAt
	if since.IsZero() {
		since = at
	}
	return PendingRestore{Snapshot: s.Name, Set: SnapshotPrefix + set, Bricked: BrickedPrefix + stamp, Since: since, Step: step}, true
}

// PendingRestores lists the restores of this instance that have not finished, oldest
// first.
func (t *Transport) PendingRestores(ctx context.Context) ([]PendingRestore, error) {
	out, err := ListPendingRestores(ctx, t.c, t.instance)
	if err != nil {
		return nil, t.classify(ctx, "list snapshots", err)
	}
	return out, nil
}

// PendingRestore describes the latest unfinished restore of the instance ("" when
// there is none): deploybody.PendingRestoreReader, which both front ends' drift
// decisions ask (deploybody.JudgeUnfinishedRestore).
func (t *Transport) PendingRestore(ctx context.Context) (string, error) {
	pending, err := t.PendingRestores(ctx)
	if err != nil || len(pending) == 0 {
		return "", err
	}
	return pending[len(pending)-1].Describe(t.instance), nil
}

// ListPendingRestores lists the restores of instance that have not finished, oldest
// first (for a reader that holds a client and no transport: fediversity_incus_node).
func ListPendingRestores(ctx context.Context, c *incusapi.Client, instance string) ([]PendingRestore, error) {
	snaps, err := c.ListSnapshots(ctx, instance)
	if err != nil {
		return nil, err
	}
	var out []PendingRestore
	for _, s := range snaps {
		if p, ok := parsePendingRestore(s); ok {
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out, nil
}

// Describe says what a pending restore means for the operator, for the plan's
// warnings: what was cut off, what the next deploy does, and how to do it by hand.
func (p PendingRestore) Describe(instance string) string {
	return fmt.Sprintf("a restore of rollback point %s began at %s and has not finished (its run is still at work or was cut off); "+
		"the state that stopped answering is kept as snapshot %s. The next deploy to this node finishes it first "+
		"(with snapshot.interrupted_restore = \"finish\", the default: it restores %s and starts the instance; with \"abort\", it puts the instance back "+
		"on the state kept aside instead). By hand: `incus snapshot restore %s %s`, `incus start %s`, then "+
		"`incus snapshot rename %s %s %s`",
		p.Set, p.Since.UTC().Format(time.RFC3339), p.Snapshot, p.Set, instance, p.Set, instance, instance, p.Snapshot, p.Bricked)
}

// SetInterruptedRestore chooses what ResumeRestore does with an earlier run's
// unfinished restore: nodespec.InterruptedRestoreFinish (or "") restores the set it
// was restoring, nodespec.InterruptedRestoreAbort the state it kept aside.
func (g *SnapshotGuard) SetInterruptedRestore(mode string) { g.interrupted = mode }

var (
	_ deploybody.RestoreResumer       = (*SnapshotGuard)(nil)
	_ deploybody.PendingRestoreReader = (*Transport)(nil)
)

// ResumeRestore finishes a restore that an earlier run left unfinished, before this
// run waits for the node; it returns what it did, for the run's warnings ("" when
// there was none).
//
//   - An instance that runs under a journal at step "restored" was started by that
//     restore (the start is its last step but one): only the journal is closed. So is
//     one under an older version's journal that it started after the journal was
//     written.
//   - An instance that runs under a journal at step "begun" (or an older version's, and
//     has run since before it) was never stopped by its restore: it runs the state that
//     stopped answering, and the restore is owed.
//   - Either that, or a stopped instance, may be in the hands of another run, still at
//     work: its steps are daemon operations back to back, so it is taken as gone once
//     the instance has had no running operation for restoreQuiet, or its journal is
//     older than restoreLease (whichever comes first; a journal closed meanwhile ends
//     the wait). Then it is restored again from the set and started (a stopped one whose
//     members are all restored is only started); with "abort", it is put back on the
//     state kept aside instead.
//
// Either way the bricked state stays, under its kept name.
func (g *SnapshotGuard) ResumeRestore(ctx context.Context) (string, error) {
	const phase = "finish an interrupted restore"
	pending, err := g.PendingRestores(ctx)
	if err != nil || len(pending) == 0 {
		// A list that fails is no reason to stop a deploy: the wait for the node
		// says what is wrong with it.
		return "", nil
	}
	p := pending[len(pending)-1]
	inst, err := g.c.GetInstance(ctx, g.instance)
	if err != nil {
		return "", g.classify(ctx, phase, err)
	}
	st, err := g.stateSettled(ctx)
	if err != nil {
		return "", g.classify(ctx, phase, err)
	}
	startedByIt := p.Step == journalRestored || (p.Step == "" && inst.LastUsedAt.After(p.Since))
	var did string
	switch {
	case st.Running() && startedByIt:
		did = fmt.Sprintf("the instance runs: the cut-off restore of %s had restored it and started it", p.Set)
	default:
		gone, err := g.waitUntilGone(ctx, p)
		if err != nil || !gone {
			return "", err
		}
		journal := p.Snapshot
		switch {
		case g.interrupted == nodespec.InterruptedRestoreAbort:
			if _, err := g.restoreFrom(ctx, p.Snapshot, p.Bricked, ""); err != nil {
				return "", err
			}
			did = fmt.Sprintf("snapshot.interrupted_restore = \"abort\": the instance was put back on the state kept aside (%s) and started, not on %s", p.Snapshot, p.Set)
		case !st.Running() && p.Step == journalRestored:
			if err := g.startRestored(ctx); err != nil {
				return "", err
			}
			did = fmt.Sprintf("every member of %s was restored already; the instance was started", p.Set)
		default:
			if journal, err = g.restoreFrom(ctx, p.Set, p.Set, p.Snapshot); err != nil {
				return "", err
			}
			did = fmt.Sprintf("%s was restored again and the instance started", p.Set)
			if st.Running() {
				did = fmt.Sprintf("the instance still ran the state that stopped answering (the cut-off restore had not stopped it yet): %s was restored and the instance started", p.Set)
			}
		}
		p.Snapshot = journal
	}
	pending[len(pending)-1] = p
	for _, other := range pending {
		if err := g.c.RenameSnapshot(ctx, g.instance, other.Snapshot, other.Bricked); err != nil {
			return "", g.classify(ctx, phase+": rename "+other.Snapshot, err)
		}
	}
	// The volumes kept aside with the root disk: the attached ones with a snapshot of
	// the bricked name (a list that fails names none; the root disk's is named anyway).
	var kept []SetVolume
	if inst, err := g.c.GetInstance(ctx, g.instance); err == nil {
		kept, _ = g.restoreVolumes(ctx, inst, p.Bricked)
	}
	return fmt.Sprintf("An earlier run's restore of rollback point %s (begun %s) did not finish: %s. %s",
		p.Set, p.Since.UTC().Format(time.RFC3339), did, KeptAsideText(g.instance, p.Bricked, kept)), nil
}

// restoreQuiet is how long a stopped instance under a journal must go without a running
// daemon operation before the run that wrote the journal is taken as gone: a live
// restore's steps follow each other within a round trip.
const restoreQuiet = 10 * time.Second

// waitUntilGone waits (bounded by the journal's lease) until the run that wrote journal
// p is gone: the instance has had no running operation for restoreQuiet, or the lease
// ran out. It returns false when that run closed the journal meanwhile.
func (g *SnapshotGuard) waitUntilGone(ctx context.Context, p PendingRestore) (bool, error) {
	quietSince := time.Now()
	for i := 0; i < int(restoreLease/time.Second)+1; i++ {
		if time.Since(p.Since) >= restoreLease {
			return true, nil
		}
		if n, err := g.c.OperationsOn(ctx, g.instance); err != nil || n > 0 {
			quietSince = time.Now() // busy, or unknown: not quiet
		} else if time.Since(quietSince) >= restoreQuiet {
			return true, nil
		}
		if i == 0 {
			g.logPrintf("restore: %s (begun %s) may still be another run's: waiting until the instance has been idle %s (at most until %s after its start)",
				p.Snapshot, p.Since.UTC().Format(time.RFC3339), restoreQuiet, restoreLease)
		}
		select {
		case <-ctx.Done():
			return false, g.errorf("finish an interrupted restore", "waiting for the restore of %s begun %s: %w", p.Set, p.Since.UTC().Format(time.RFC3339), ctx.Err())
		case <-time.After(time.Second):
		}
		pending, err := g.PendingRestores(ctx)
		if err != nil {
			continue
		}
		still := false
		for _, q := range pending {
			still = still || q.Snapshot == p.Snapshot
		}
		if !still {
			return false, nil
		}
	}
	return true, nil
}
