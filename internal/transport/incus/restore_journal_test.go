package incus

import (
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
)

// The journal's name says which set a cut-off restore was restoring and what its
// bricked state is kept as once finished; a name that is not a journal is no pending
// restore (the operator's own snapshots, the kept bricked states, the sets).
func TestPendingRestoreNameRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 2, 15, 30, 0, 0, time.UTC)
	name := PendingRestoreName(at, GenerationSnapshotName(7))
	if err := validSnapshotName(name); err != nil {
		t.Fatalf("journal name %q is no valid snapshot name: %v", name, err)
	}
	p, ok := parsePendingRestore(incusapi.Snapshot{Name: name})
	if !ok {
		t.Fatalf("%q not read back as a pending restore", name)
	}
	want := PendingRestore{Snapshot: name, Set: "fediversity-gen-7", Bricked: BrickedSnapshotName(at), Since: at, Step: journalBegun}
	if p != want {
		t.Fatalf("parsed %+v, want %+v", p, want)
	}
	// Once every member is restored, before the start, the journal says so; an older
	// version's journal says no step.
	restored, ok := parsePendingRestore(incusapi.Snapshot{Name: p.restoredName()})
	if !ok || restored.Step != journalRestored || restored.Set != p.Set || restored.Bricked != p.Bricked {
		t.Fatalf("%s read back as %+v (%v)", p.restoredName(), restored, ok)
	}
	older, ok := parsePendingRestore(incusapi.Snapshot{Name: "fediversity-restoring-20261202t153000z-from-gen-7"})
	if !ok || older.Step != "" || older.Set != p.Set || older.Bricked != p.Bricked {
		t.Fatalf("an older version's journal read as %+v (%v)", older, ok)
	}
	for _, other := range []string{"fediversity-gen-7", BrickedSnapshotName(at), "fediversity-restoring-junk", "fediversity-restoring-20261202t153000z-from-",
		"fediversity-restoring-20261202t153000z-other-from-gen-7", "mine"} {
		if _, ok := parsePendingRestore(incusapi.Snapshot{Name: other}); ok {
			t.Errorf("%q taken for a pending restore", other)
		}
	}
}

// What the plan says of a pending restore names the set, the journal, what the next
// deploy does and how to finish it by hand.
func TestPendingRestoreDescribe(t *testing.T) {
	at := time.Date(2026, 12, 2, 15, 30, 0, 0, time.UTC)
	p, _ := parsePendingRestore(incusapi.Snapshot{Name: PendingRestoreName(at, "fediversity-gen-3")})
	d := p.Describe("web")
	for _, want := range []string{"fediversity-gen-3", p.Snapshot, "2026-12-02T15:30:00Z", "next deploy", "interrupted_restore", "incus snapshot restore web fediversity-gen-3", "incus snapshot rename web " + p.Snapshot + " " + p.Bricked} {
		if !strings.Contains(d, want) {
			t.Errorf("description lacks %q:\n%s", want, d)
		}
	}
}
