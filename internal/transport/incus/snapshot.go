package incus

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
)

// SnapshotPrefix starts the name of every snapshot this transport takes.
const SnapshotPrefix = "fediversity-"

// generationPrefix starts the rollback points taken before a switch. Rotation only
// ever deletes snapshots with this prefix: the operator's own snapshots and the bricked
// states kept aside (BrickedPrefix) are left alone.
const generationPrefix = SnapshotPrefix + "gen-"

// BrickedPrefix starts the snapshots of a node's state as it was when it stopped
// answering after a switch, kept aside before the rollback point is restored so the
// broken state can still be inspected (InspectCopy: `fediversity incus inspect-copy`).
// They are never rotated: remove them with `incus snapshot delete <instance> <snapshot>`.
const BrickedPrefix = SnapshotPrefix + "bricked-"

// GenerationSnapshotName is the snapshot name for system profile generation gen.
func GenerationSnapshotName(gen int) string {
	return fmt.Sprintf("%s%d", generationPrefix, gen)
}

// BrickedSnapshotName is the name the bricked state taken at t is kept under.
func BrickedSnapshotName(t time.Time) string {
	return BrickedPrefix + t.UTC().Format(brickedTimeFormat)
}

func validSnapshotName(name string) error {
	if !strings.HasPrefix(name, SnapshotPrefix) || len(name) == len(SnapshotPrefix) {
		return fmt.Errorf("snapshot name %q must start with %q and name something after it", name, SnapshotPrefix)
	}
	for _, c := range name {
		if !isASCIIAlnum(c) && !strings.ContainsRune("-_.", c) {
			return fmt.Errorf("snapshot name %q: only letters, digits, '-', '_' and '.' are allowed", name)
		}
	}
	return nil
}

// SnapshotBeforeSwitch takes the set called name (it must start with SnapshotPrefix,
// e.g. GenerationSnapshotName(n)) as a rollback point before a switch, replacing one of
// the same name, then deletes the oldest sets (GenerationSnapshotName) until at most
// keep of them remain (keep < 1 counts as 1: the one just taken always stays). No other
// snapshot is ever touched. See TakeSet.
func (t *Transport) SnapshotBeforeSwitch(ctx context.Context, name string, keep int) error {
	gen, _ := strconv.Atoi(strings.TrimPrefix(name, generationPrefix))
	_, err := t.TakeSet(ctx, name, gen, "", keep)
	return err
}

// OurSnapshots lists the snapshots with SnapshotPrefix (rollback points and bricked
// states), oldest first.
func (t *Transport) OurSnapshots(ctx context.Context) ([]incusapi.Snapshot, error) {
	return t.snapshotsWithPrefix(ctx, SnapshotPrefix)
}

func (t *Transport) snapshotsWithPrefix(ctx context.Context, prefix string) ([]incusapi.Snapshot, error) {
	snaps, err := t.c.ListSnapshots(ctx, t.instance)
	if err != nil {
		return nil, t.classify(ctx, "list snapshots", err)
	}
	var ours []incusapi.Snapshot
	for _, s := range snaps {
		if strings.HasPrefix(s.Name, prefix) {
			ours = append(ours, s)
		}
	}
	sort.SliceStable(ours, func(i, j int) bool {
		return ours[i].CreatedAt.Before(ours[j].CreatedAt)
	})
	return ours, nil
}

func (t *Transport) rotate(ctx context.Context, keepName string, keep int) error {
	ours, err := t.snapshotsWithPrefix(ctx, generationPrefix)
	if err != nil {
		return err
	}
	var others []incusapi.Snapshot
	for _, s := range ours {
		if s.Name != keepName {
			others = append(others, s)
		}
	}
	var errs []error
	if excess := len(others) - (keep - 1); excess > 0 {
		for _, s := range others[:excess] {
			// A whole set, never one member of it.
			if err := t.deleteSet(ctx, s.Name, nil); err != nil {
				errs = append(errs, t.classify(ctx, "rotate snapshots: delete set "+s.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// KeepAside snapshots the instance's current state: its root disk as root (the
// restore's journal, a PendingRestoreName) and every custom volume attached to it as
// volumes (a BrickedSnapshotName), so a restore does not destroy the evidence of what
// went wrong. It returns the volumes kept aside.
func (t *Transport) KeepAside(ctx context.Context, root, volumes string) ([]SetVolume, error) {
	for _, name := range []string{root, volumes} {
		if err := validSnapshotName(name); err != nil {
			return nil, t.errorf("keep bricked state", "%v", err)
		}
	}
	inst, err := t.c.GetInstance(ctx, t.instance)
	if err != nil {
		return nil, t.classify(ctx, "keep bricked state", err)
	}
	vols, _ := dataDisks(inst.ExpandedDevices)
	// The volumes first, the root disk last: the root disk's snapshot is the restore's
	// journal, and a journal must never name a bricked state that is not all kept (a
	// run cut off before it changed nothing yet).
	var kept []SetVolume
	for _, v := range vols {
		if err := t.c.CreateVolumeSnapshot(ctx, v.Pool, v.Volume, volumes); err != nil {
			return kept, t.classify(ctx, "keep bricked state: snapshot volume "+v.Volume, err)
		}
		kept = append(kept, v)
	}
	if err := t.c.CreateSnapshot(ctx, t.instance, root); err != nil {
		return kept, t.classify(ctx, "keep bricked state: create "+root, err)
	}
	return kept, nil
}

// RestoreSnapshot rolls the instance back to the set called name: it stops the instance
// (cleanly, then forcibly if that fails), restores the root disk and every custom volume
// the set's manifest names, writes back the manifests the root disk's restore rolled
// back with the instance's configuration, starts it and waits until its systemd answers
// again.
func (t *Transport) RestoreSnapshot(ctx context.Context, name string) error {
	if name == "" {
		return t.errorf("restore snapshot", "no snapshot name given")
	}
	_, err := t.restoreFrom(ctx, name, name, "")
	return err
}

// restoreFrom is RestoreSnapshot from root disk snapshot root and custom volume
// snapshots volumes (the same name for a set; a bricked state kept aside names them
// apart). The volumes are those the set's manifest names; without a manifest (a
// bricked state has none, and a restore cut off after the root disk's restore lost
// it with the configuration), every attached custom volume that has a snapshot called
// volumes. journal, when set, is the restore's journal (restore_journal.go): once every
// member is restored, before the start, it is renamed to step "restored"; its name
// then is returned.
func (t *Transport) restoreFrom(ctx context.Context, root, volumes, journal string) (string, error) {
	const phase = "restore snapshot"
	inst, err := t.c.GetInstance(ctx, t.instance)
	if err != nil {
		return journal, t.classify(ctx, phase, err)
	}
	keep := manifests(inst.Config)
	vols, err := t.restoreVolumes(ctx, inst, volumes)
	if err != nil {
		return journal, t.classify(ctx, phase, err)
	}
	st, err := t.stateSettled(ctx)
	if err != nil {
		return journal, t.classify(ctx, phase, err)
	}
	if st.Running() {
		if err := t.c.Stop(ctx, t.instance, false, 60); err != nil {
			if ctx.Err() != nil {
				return journal, t.classify(ctx, phase+": stop", err)
			}
			if ferr := t.c.Stop(ctx, t.instance, true, 0); ferr != nil {
				return journal, t.classify(ctx, phase+": stop", errors.Join(err, ferr))
			}
		}
	}
	if err := t.c.RestoreSnapshot(ctx, t.instance, root); err != nil {
		return journal, t.errorf(phase, "%w (the instance is left stopped; list snapshots with `incus snapshot list %s`)", err, t.instance)
	}
	for _, v := range vols {
		if err := t.c.RestoreVolume(ctx, v.Pool, v.Volume, volumes); err != nil {
			return journal, t.errorf(phase, "%w (the root disk is restored, the instance is left stopped: restore volume %s by hand with `incus storage volume snapshot restore %s %s %s`, then `incus start %s`)",
				err, v.Volume, v.Pool, v.Volume, volumes, t.instance)
		}
	}
	if len(keep) > 0 {
		if err := t.c.PatchInstanceConfig(ctx, t.instance, keep); err != nil {
			t.logPrintf("restore: writing back the set manifests failed: %v", err)
		}
	}
	if journal != "" {
		if p, ok := parsePendingRestore(incusapi.Snapshot{Name: journal}); ok {
			if err := t.c.RenameSnapshot(ctx, t.instance, journal, p.restoredName()); err != nil {
				// The next run restores once more what is restored already: no harm.
				t.logPrintf("restore: marking journal %s restored failed: %v", journal, err)
			} else {
				journal = p.restoredName()
			}
		}
	}
	return journal, t.startRestored(ctx)
}

// startRestored starts the instance whose members are restored and waits until it
// answers.
func (t *Transport) startRestored(ctx context.Context) error {
	const phase = "restore snapshot"
	if err := t.c.Start(ctx, t.instance); err != nil {
		return t.classify(ctx, phase+": start", err)
	}
	return t.waitReach(ctx, phase, 120)
}

// restoreVolumes are the custom volumes restored with the root disk from their
// snapshots called name: those the manifest of set name lists, or, without one, every
// attached custom volume that has such a snapshot.
func (t *Transport) restoreVolumes(ctx context.Context, inst *incusapi.Instance, name string) ([]SetVolume, error) {
	if m, ok := setManifest(inst.Config, name); ok {
		return m.Volumes, nil
	}
	attached, _ := dataDisks(inst.ExpandedDevices)
	var vols []SetVolume
	for _, v := range attached {
		snaps, err := t.c.ListVolumeSnapshots(ctx, v.Pool, v.Volume)
		if err != nil {
			return nil, err
		}
		for _, s := range snaps {
			if s == name {
				vols = append(vols, v)
				break
			}
		}
	}
	return vols, nil
}

// waitReach polls Reach about once a second, at most tries times (and within ctx).
func (t *Transport) waitReach(ctx context.Context, phase string, tries int) error {
	var last error
	for i := 0; i < tries; i++ {
		if last = t.Reach(ctx); last == nil {
			return nil
		}
		// A container that was just started answers before its systemd does ("Failed
		// to connect to bus"): that is waited for too, within the same bound.
		if !errors.Is(last, deploybody.ErrUnreachable) && !errors.Is(last, deploybody.ErrSystemdUnanswered) && !isTransient(last) {
			return last
		}
		select {
		case <-ctx.Done():
			return t.errorf(phase, "waiting for the instance to answer: %w (last: %v)", ctx.Err(), last)
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("%s: %s: the instance did not answer after %d tries: %w", t.where(), phase, tries, last)
}

// transientTries bounds how often a daemon error seen while an instance changes state is
// asked again (about one second apart).
const transientTries = 15

// isTransient tells a daemon-side error that an instance in the middle of a state change
// can cause: incusd 6.0.4 answers a state read of a container that is powering off with
// `500 Invalid PID` (seen in the lab, when a switch bricks the node and it shuts down).
func isTransient(err error) bool {
	var ae *incusapi.APIError
	return errors.As(err, &ae) && ae.StatusCode >= 500
}

// stateSettled reads the instance state, asking again while the daemon answers with a
// transient error.
func (t *Transport) stateSettled(ctx context.Context) (*incusapi.InstanceState, error) {
	var last error
	for i := 0; i < transientTries; i++ {
		st, err := t.c.GetInstanceState(ctx, t.instance)
		if err == nil || !isTransient(err) {
			return st, err
		}
		last = err
		select {
		case <-ctx.Done():
			return st, err
		case <-time.After(time.Second):
		}
	}
	return nil, last
}

func isASCIIAlnum(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
