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
	want := PendingRestore{Snapshot: name, Set: "fediversity-gen-7", Bricked: BrickedSnapshotName(at), Since: at}
	if p != want {
		t.Fatalf("parsed %+v, want %+v", p, want)
	}
	for _, other := range []string{"fediversity-gen-7", BrickedSnapshotName(at), "fediversity-restoring-junk", "fediversity-restoring-20261202t153000z-from-", "mine"} {
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
