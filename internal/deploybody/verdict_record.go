package deploybody

// The node's record of its last deploy's verdict.
//
// A deployer killed between the boot entry and its own state write leaves a node that
// runs and boots the new system X while the deployer's state still holds the previous
// system and its verdict. The node itself therefore keeps the verdict of the run that
// deployed X, written just before the boot entry, so whoever reads the node next (the
// provider's Read, an import) can pair X with X's own verdict, or, when the node holds
// no record of X, deploy it again rather than guess.
//
// It lives on disk (RecordsDir), not in /run beside the lock: it must hold as long as
// the boot entry it speaks for, and the boot entry survives a reboot. It is written
// atomically (a fresh temporary file renamed over the old one) in a directory only root
// reads (node_record.go): it holds what the state holds, minus the summary of changes
// and the output of checks.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// VerdictRecord is the node's record of its last deploy.
type VerdictRecord struct {
	Version int `json:"version"`
	// Toplevel is the system the run deployed (and set the boot entry to, right after
	// writing this record).
	Toplevel string `json:"toplevel"`
	// At is when the verdict was taken; Holder names the run (as the node lock does).
	At     time.Time `json:"at"`
	Holder string    `json:"holder"`
	// Result is the run's result as far as the verdict: without the changes and without
	// check output.
	Result *Result `json:"result"`
}

// verdictRecordOf is the node's verdict record of this run (nil when the run has no
// verdict): the result as far as the verdict, without changes or check output.
func (e *runEnv) verdictRecordOf(res Result, toplevel string, lock *nodeLock) ([]byte, error) {
	if res.Verdict == nil {
		return nil, nil
	}
	res.Changes = nil
	v := *res.Verdict
	v.Checks = append([]judge.CheckResult(nil), v.Checks...)
	for i := range v.Checks {
		v.Checks[i].Output = ""
	}
	res.Verdict = &v
	holder := ""
	if lock != nil {
		holder = lock.holder.String()
	}
	return json.Marshal(VerdictRecord{Version: records.VerdictRecordVersion, Toplevel: toplevel, At: e.o.Clock.Now().UTC(), Holder: holder, Result: &res})
}

// recordVerdict writes the node's verdict record of this run on its own. A failure is a
// warning: without a record, a later Read deploys the system again instead of adopting it.
func (e *runEnv) recordVerdict(ctx context.Context, record []byte, err error, toplevel string) {
	if record == nil && err == nil {
		return
	}
	if err == nil {
		var out RunResult
		out, err = e.t.Run(ctx, []string{"sh", "-c", records.WriteRecordScript, "sh", records.VerdictRecordFile, records.LegacyVerdictRecordFile}, RunOptions{Path: records.ToolPath, Stdin: record, Privileged: true})
		if err == nil && out.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", out.ExitCode, judge.FirstLine(string(out.Stderr), "no output"))
		}
	}
	if err != nil {
		e.warnUnrecorded(ctx, err, toplevel)
	}
}

func (e *runEnv) warnUnrecorded(ctx context.Context, err error, toplevel string) {
	e.warn(ctx, PhaseFinalizeBootEntry, fmt.Sprintf("the verdict record %s was not written (%v): should this run be cut off before its state is written, the next plan deploys %s again", records.VerdictRecordFile, err, toplevel))
}

// confirmAndRecord asks the node whether this run still holds its lock and, unless
// another run took it, writes the run's verdict record and (a clean verdict) the node's
// last good system: one round trip, under the lock's guard, where the lock's check and
// each record were a round trip of their own. The records come before the boot entry:
// a run cut off between the two leaves a node whose boot entry does not point at what
// it runs yet (an unfinished deploy, planned again), never one that boots the new
// system with no verdict of it on record. A node whose answer settles nothing (no
// answer, or the guard busy) is asked again as before: the lock, then each record.
func (e *runEnv) confirmAndRecord(ctx context.Context, res Result, toplevel string, lock *nodeLock) error {
	record, recordErr := e.verdictRecordOf(res, toplevel, lock)
	lastGood := lastGoodRecord(&res, e.o.Clock.Now())
	// Each on its own: the lock's check, then each record.
	apart := func() error {
		if err := e.confirmLock(ctx, lock); err != nil {
			return err
		}
		e.recordVerdict(ctx, record, recordErr, toplevel)
		e.recordLastGood(ctx, &res, lastGood)
		return nil
	}
	if lock == nil || record == nil {
		return apart()
	}
	if err := lock.lostError(e.o.Node); err != nil {
		return err // the heartbeat saw it taken already
	}
	args := []string{"record", lock.holder.Token, records.VerdictRecordFile, "", "", "", ""}
	if lastGood != nil {
		copy(args[3:], []string{records.LastGoodFile, res.Toplevel, records.LastGoodRoot, string(lastGood)})
	}
	if err := lock.vanishedError(e.o.Node); err != nil {
		return err // the heartbeat saw the node's /run emptied
	}
	epoch := lock.currentEpoch()
	out, err := lockOpWith(ctx, e.t, record, args...)
	switch {
	case err == nil && out[0] == "lost":
		lock.recordLost(records.ParseLockHolder(out[1:], 0), true)
		return lock.lostError(e.o.Node)
	case err == nil && out[0] == "gone":
		// No lock at all: the node's /run was emptied since this run took it. Nothing
		// was written.
		lock.sawVanished(epoch)
		return lock.vanishedError(e.o.Node)
	case err == nil && out[0] == "ok":
		recorded, pinned := false, lastGood == nil
		for _, line := range out[1:] {
			word, why, _ := strings.Cut(line, " ")
			switch word {
			case "recorded":
				recorded = true
			case "unrecorded":
				recorded = true
				e.warnUnrecorded(ctx, errors.New(judge.FirstLine(why, "no output")), toplevel)
			case "pinned":
				pinned = true
			case "unpinned":
				pinned = true
				e.warn(ctx, PhaseFinalizeBootEntry, lastGoodWarning(res.Toplevel, errors.New(judge.FirstLine(why, "no output"))))
			}
		}
		if !recorded {
			e.warnUnrecorded(ctx, errors.New("the node did not say that it wrote it"), toplevel)
		}
		if !pinned {
			e.warn(ctx, PhaseFinalizeBootEntry, lastGoodWarning(res.Toplevel, errors.New("the node did not say that it wrote it")))
		}
		return lock.lostError(e.o.Node)
	}
	return apart() // no answer, or the guard was busy
}

// ReadVerdictRecord reads the node's verdict record: nil (and no error) when the node
// has none, or one of another format.
func ReadVerdictRecord(ctx context.Context, t Transport) (*VerdictRecord, error) {
	var rec VerdictRecord
	if found, err := readNodeRecord(ctx, t, records.VerdictRecordFile, records.LegacyVerdictRecordFile, "a verdict record", records.ToolPath, &rec); !found || err != nil {
		return nil, err
	}
	if rec.Version != records.VerdictRecordVersion || rec.Result == nil || rec.Result.Verdict == nil || strings.TrimSpace(rec.Toplevel) == "" {
		return nil, nil
	}
	return &rec, nil
}
