package deploybody

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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

const (
	// LastGoodFile is the node's record of its last good system (node_record.go).
	LastGoodFile       = RecordsDir + "/last-good.json"
	legacyLastGoodFile = legacyRecordsDir + "/last-good.json"
	// LastGoodRoot is the GC root that keeps the last good system in the node's store.
	LastGoodRoot = "/nix/var/nix/gcroots/fediversity/last-good"
	// PhaseReadLastGood is the phase a roll back to the last good system fails in when
	// the node has none or does not answer.
	PhaseReadLastGood = "read-last-good"
)

const lastGoodVersion = 1

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

// writeLastGoodScript pins $2 (a GC root $3, replaced atomically) and then writes
// stdin to $1 as writeRecordScript does ($4: the older version's record, removed once
// the new one is written): the record never names a system that is not pinned.
const writeLastGoodScript = `set -eu; umask 077; r=$3; mkdir -p "${r%/*}"
ln -sfn "$2" "$r.tmp"; mv -fT "$r.tmp" "$r"
set -- "$1" "${4:-}"
` + writeRecordScript

var lastGoodToolPath = []string{"/run/current-system/sw/bin", "/usr/bin", "/bin"}

// CleanVerdict reports whether res judged the node good: ok, with no reason (a
// lenient verdict's reasons are failures it let pass), on the system it deployed
// (an `activation = "boot"` deploy judged the old system, not the new one).
func CleanVerdict(res *Result) bool {
	return res != nil && res.Verdict != nil && res.Verdict.OK && len(res.Verdict.Reasons) == 0 &&
		strings.HasPrefix(res.Toplevel, "/nix/store/") && res.RunningSystem == res.Toplevel
}

// RecordLastGood records res's toplevel as the node's last good system when its
// verdict was clean, on t (the node's unguarded transport). A failure is a warning
// added to res: the node keeps its previous record. A deploy records it itself, with
// its verdict record (confirmAndRecord); this is for a run that only judged a node
// (the command's resumed rollout).
func RecordLastGood(ctx context.Context, t Transport, res *Result, now time.Time) {
	rec := lastGoodRecord(res, now)
	if rec == nil {
		return
	}
	if err := writeLastGood(ctx, t, res.Toplevel, rec); err != nil {
		res.Warnings = append(res.Warnings, lastGoodWarning(res.Toplevel, err))
	}
}

// lastGoodRecord is the record of res's toplevel as the last good system, nil when
// res's verdict was not clean.
func lastGoodRecord(res *Result, now time.Time) []byte {
	if !CleanVerdict(res) {
		return nil
	}
	b, err := json.Marshal(LastGood{Version: lastGoodVersion, Toplevel: res.Toplevel, At: now.UTC()})
	if err != nil {
		return nil // a struct of a string and a time: never
	}
	return b
}

// writeLastGood pins toplevel and writes rec as the node's last good system.
func writeLastGood(ctx context.Context, t Transport, toplevel string, rec []byte) error {
	out, err := t.Run(ctx, []string{"sh", "-c", writeLastGoodScript, "sh", LastGoodFile, toplevel, LastGoodRoot, legacyLastGoodFile},
		RunOptions{Path: lastGoodToolPath, Stdin: rec, Privileged: true})
	if err == nil && out.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", out.ExitCode, strings.TrimSpace(string(out.Stderr)))
	}
	return err
}

func lastGoodWarning(toplevel string, err error) string {
	return fmt.Sprintf("the last good system %s was not recorded on the node (%v): a roll back to the last good system takes the node to the one recorded before", toplevel, err)
}

// recordLastGood writes rec (nil: not a clean verdict) on its own, in a run.
func (e *runEnv) recordLastGood(ctx context.Context, res *Result, rec []byte) {
	if rec == nil {
		return
	}
	if err := writeLastGood(ctx, e.t, res.Toplevel, rec); err != nil {
		e.warn(ctx, PhaseFinalizeBootEntry, lastGoodWarning(res.Toplevel, err))
	}
}

// ReadLastGood reads the node's last good system: nil (and no error) when the node
// has none.
func ReadLastGood(ctx context.Context, t Transport) (*LastGood, error) {
	var rec LastGood
	if found, err := readNodeRecord(ctx, t, LastGoodFile, legacyLastGoodFile, "a record of the last good system", lastGoodToolPath, &rec); !found || err != nil {
		return nil, err
	}
	if rec.Version != lastGoodVersion || !strings.HasPrefix(rec.Toplevel, "/nix/store/") {
		return nil, nil
	}
	return &rec, nil
}

// LastGoodReadScript prints one line: "last-good:" and the node's record of its last
// good system as it is on disk ("last-good:none" when there is none), or
// "last-good?" when this login cannot read the record (it is root's only: an SSH user
// other than root, whose reads run without sudo). A node an older version deployed has
// its record in the older place until the next deploy moves it. Read runs it in its one
// round trip, so that the plan of `deploy = "last-good"` takes the record the refresh
// saw.
var LastGoodReadScript = `f=` + LastGoodFile + `; if [ ! -e "$f" ] && [ -f ` + legacyLastGoodFile + ` ] && [ ! -L ` + legacyLastGoodFile + ` ]; then f=` + legacyLastGoodFile + `; fi; ` +
	`if [ -r "$f" ]; then printf 'last-good:%s\n' "$(cat "$f")"; ` +
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
	if rec.Version != lastGoodVersion || !strings.HasPrefix(rec.Toplevel, "/nix/store/") {
		return "", true
	}
	return rec.Toplevel, true
}

// LastGoodToplevel is the node's last good system, or a DeployError (phase
// PhaseReadLastGood) when the node does not answer or has none (ErrNoLastGood).
func LastGoodToplevel(ctx context.Context, t Transport, node string) (string, error) {
	rec, err := ReadLastGood(ctx, t)
	if err != nil {
		return "", &DeployError{Node: node, Phase: PhaseReadLastGood, Err: err,
			Hint: "check that the node answers (its transport and credentials)"}
	}
	if rec == nil {
		return "", &DeployError{Node: node, Phase: PhaseReadLastGood, Err: ErrNoLastGood, Hint: NoLastGoodHint}
	}
	return rec.Toplevel, nil
}
