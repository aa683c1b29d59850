package records

// The node's last good system: the toplevel whose verdict was last clean (ok with no
// reason at all, so a lenient pass over a failed unit is not good), recorded on the
// node by every deploy that judged it so, and pinned against garbage collection, so
// that a roll back can always switch the node back to it.
//
// Both front ends record and read it through these functions (the command's group runs
// in internal/fleet, fediversity_node_switch in the provider), so `fediversity rollback
// --to last-good` and `deploy = "last-good"` mean the same system. The deploy body
// itself never calls them: recording is a step after a deploy, taken on the
// unguarded transport (a snapshot restore voids the run before it records).

import (
	"encoding/json"
	"errors"
	"strings"
	"time"
)

const (
	// LastGoodFile is the node's record of its last good system (node_record.go).
	LastGoodFile       = RecordsDir + "/last-good.json"
	LegacyLastGoodFile = legacyRecordsDir + "/last-good.json"
	// LastGoodRoot is the GC root that keeps the last good system in the node's store.
	LastGoodRoot = "/nix/var/nix/gcroots/fediversity/last-good"
)

const LastGoodVersion = 1

// LastGood is the node's record of its last good system.
type LastGood struct {
	Version  int       `json:"version"`
	Toplevel string    `json:"toplevel"`
	At       time.Time `json:"at"` // when its clean verdict was taken
}

// ErrNoLastGood says the node has no last good system: no deploy ever judged it clean.
// Both front ends say it in these words (the provider adds the attribute that asked).
var ErrNoLastGood = errors.New("the node has no last good system (" + LastGoodFile + "): it never had a clean verdict")

// NoLastGoodHint is what to do about ErrNoLastGood.
const NoLastGoodHint = "deploy a good system to it first (a deploy whose verdict is ok with no reason records it); it was left untouched"

// WriteLastGoodScript pins $2 (a GC root $3, replaced atomically) and then writes
// stdin to $1 as WriteRecordScript does ($4: the older version's record, removed once
// the new one is written): the record never names a system that is not pinned.
const WriteLastGoodScript = `set -eu; umask 077; r=$3; mkdir -p "${r%/*}"
ln -sfn "$2" "$r.tmp"; mv -fT "$r.tmp" "$r"
set -- "$1" "${4:-}"
` + WriteRecordScript

// LastGoodReadScript prints one line: "last-good:" and the node's record of its last
// good system as it is on disk ("last-good:none" when there is none), or
// "last-good?" when this login cannot read the record (it is root's only: an SSH user
// other than root, whose reads run without sudo). A node an older version deployed has
// its record in the older place until the next deploy moves it. Read runs it in its one
// round trip, so that the plan of `deploy = "last-good"` takes the record the refresh
// saw.
var LastGoodReadScript = `f=` + LastGoodFile + `; if [ ! -e "$f" ] && [ -f ` + LegacyLastGoodFile + ` ] && [ ! -L ` + LegacyLastGoodFile + ` ]; then f=` + LegacyLastGoodFile + `; fi; ` +
	`if [ -r "$f" ]; then l=; IFS= read -r l <"$f" || :; printf 'last-good:%s\n' "$l"; ` +
	`elif [ -e "$f" ] || { [ -d "${f%/*}" ] && [ ! -x "${f%/*}" ]; }; then echo 'last-good?'; else echo 'last-good:none'; fi`

// ParseLastGoodLine reads LastGoodReadScript's line: the last good system ("" when the
// node has none, or its record is not one this version reads, as ReadLastGood), and
// whether the line told (false: unreadable, not such a line, or a record that is not
// JSON, whose error a read of its own reports).
func ParseLastGoodLine(line string) (toplevel string, read bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "last-good:")
	if !ok {
		return "", false
	}
	if rest == "none" {
		return "", true
	}
	var rec LastGood
	if json.Unmarshal([]byte(rest), &rec) != nil {
		return "", false
	}
	if !rec.Usable() {
		return "", true
	}
	return rec.Toplevel, true
}

// Usable tells whether this version reads the record: its format, and a store path. A
// record it does not read is no record (the safe side).
func (rec LastGood) Usable() bool {
	return rec.Version == LastGoodVersion && strings.HasPrefix(rec.Toplevel, "/nix/store/")
}
