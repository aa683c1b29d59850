package deploybody

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

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
	b, err := json.Marshal(records.LastGood{Version: records.LastGoodVersion, Toplevel: res.Toplevel, At: now.UTC()})
	if err != nil {
		return nil // a struct of a string and a time: never
	}
	return b
}

// writeLastGood pins toplevel and writes rec as the node's last good system.
func writeLastGood(ctx context.Context, t Transport, toplevel string, rec []byte) error {
	out, err := t.Run(ctx, []string{"sh", "-c", records.WriteLastGoodScript, "sh", records.LastGoodFile, toplevel, records.LastGoodRoot, records.LegacyLastGoodFile},
		RunOptions{Path: records.ToolPath, Stdin: rec, Privileged: true})
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
func ReadLastGood(ctx context.Context, t Transport) (*records.LastGood, error) {
	var rec records.LastGood
	if found, err := readNodeRecord(ctx, t, records.LastGoodFile, records.LegacyLastGoodFile, "a record of the last good system", records.ToolPath, &rec); !found || err != nil {
		return nil, err
	}
	if !rec.Usable() {
		return nil, nil
	}
	return &rec, nil
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
		return "", &DeployError{Node: node, Phase: PhaseReadLastGood, Err: records.ErrNoLastGood, Hint: records.NoLastGoodHint}
	}
	return rec.Toplevel, nil
}

// PhaseReadLastGood is the phase a roll back to the last good system fails in when
// the node has none or does not answer.
const PhaseReadLastGood = "read-last-good"
