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
	op := e.recordOp(res, toplevel, lock)
	if !op.joint {
		return op.apart(ctx)
	}
	if err := op.guardErr(); err != nil {
		return err
	}
	epoch := lock.currentEpoch()
	out, err := lockOpWith(ctx, e.t, op.record, op.args...)
	if err == nil {
		if settled, err := op.answered(ctx, out, epoch); settled {
			return err
		}
	}
	return op.apart(ctx) // no answer, or the guard was busy
}

// recordOp is confirmAndRecord's work, prepared: the lock script's record operation
// (args, with the verdict record on stdin), what to do with its answer, and the same
// asked step by step.
type recordOp struct {
	e         *runEnv
	res       Result
	toplevel  string
	lock      *nodeLock
	record    []byte
	recordErr error
	lastGood  []byte
	args      []string
	// joint: the lock's check and the records can be one run of the lock script (a
	// lock and a verdict record to write).
	joint bool
}

func (e *runEnv) recordOp(res Result, toplevel string, lock *nodeLock) *recordOp {
	op := &recordOp{e: e, res: res, toplevel: toplevel, lock: lock}
	op.record, op.recordErr = e.verdictRecordOf(res, toplevel, lock)
	op.lastGood = lastGoodRecord(&res, e.o.Clock.Now())
	if lock == nil || op.record == nil {
		return op
	}
	op.joint = true
	op.args = []string{"record", lock.holder.Token, records.VerdictRecordFile, "", "", "", ""}
	if op.lastGood != nil {
		copy(op.args[3:], []string{records.LastGoodFile, res.Toplevel, records.LastGoodRoot, string(op.lastGood)})
	}
	return op
}

// apart is the lock's check, then each record, each on its own.
func (op *recordOp) apart(ctx context.Context) error {
	if err := op.e.confirmLock(ctx, op.lock); err != nil {
		return err
	}
	op.e.recordVerdict(ctx, op.record, op.recordErr, op.toplevel)
	op.e.recordLastGood(ctx, &op.res, op.lastGood)
	return nil
}

// guardErr is what the heartbeat already saw: the lock taken, or the node's /run
// emptied; nothing is asked of the node then.
func (op *recordOp) guardErr() error {
	if err := op.lock.lostError(op.e.o.Node); err != nil {
		return err
	}
	return op.lock.vanishedError(op.e.o.Node)
}

// answered reads the record operation's answer out (asked at epoch). settled is false
// when the answer settles nothing (the guard was busy): nothing was written, ask apart.
func (op *recordOp) answered(ctx context.Context, out []string, epoch int) (settled bool, err error) {
	e, lock, toplevel := op.e, op.lock, op.toplevel
	switch out[0] {
	case "lost":
		lock.recordLost(records.ParseLockHolder(out[1:], 0), true)
		return true, lock.lostError(e.o.Node)
	case "gone":
		// No lock at all: the node's /run was emptied since this run took it. Nothing
		// was written.
		lock.sawVanished(epoch)
		return true, lock.vanishedError(e.o.Node)
	case "ok":
		recorded, pinned := false, op.lastGood == nil
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
				e.warn(ctx, PhaseFinalizeBootEntry, lastGoodWarning(op.res.Toplevel, errors.New(judge.FirstLine(why, "no output"))))
			}
		}
		if !recorded {
			e.warnUnrecorded(ctx, errors.New("the node did not say that it wrote it"), toplevel)
		}
		if !pinned {
			e.warn(ctx, PhaseFinalizeBootEntry, lastGoodWarning(op.res.Toplevel, errors.New("the node did not say that it wrote it")))
		}
		return true, lock.lostError(e.o.Node)
	}
	return false, nil
}

// recordAndFinalizeBoot is confirmAndRecord and the first try of finalizeBoot in one
// round trip, on a transport that can run the record operation as the guard of the
// boot entry (GuardedBootFinalizer): the node runs the lock script's record operation
// and, only when it confirmed this run's lock, sets the system profile and starts the
// `boot`, so the verdict record is on the node before the boot loader's default moves,
// as it is when the two are round trips of their own. handled is false when this could
// not be done (no such transport, nothing to record jointly, or an answer that settles
// nothing): then nothing of the boot entry moved, and the caller goes the separate way.
// lockErr is the lock's error (the boot entry untouched); bootErr finalizeBoot's.
func (e *runEnv) recordAndFinalizeBoot(ctx context.Context, res Result, toplevel string, lock *nodeLock) (generation int, handled bool, lockErr, bootErr error) {
	g, ok := e.t.(GuardedBootFinalizer)
	if !ok {
		return 0, false, nil, nil
	}
	op := e.recordOp(res, toplevel, lock)
	if !op.joint {
		return 0, false, nil, nil
	}
	if err := op.guardErr(); err != nil {
		return 0, true, err, nil
	}
	epoch := lock.currentEpoch()
	guard := BootGuard{Script: records.LockScript, Args: op.args, Path: records.ToolPath, Stdin: op.record}
	out, gen, err := g.FinalizeBootGuarded(ctx, toplevel, e.o.Timings.SwitchTimeout, guard)
	if len(out) == 0 || out[0] == "" {
		// The guard's answer was lost, or the guard itself failed: nothing is known of
		// what it did, and a boot it may have started is met by the one that follows
		// (switch-to-configuration's lock, finalizeBoot).
		if err != nil && !errors.Is(err, ErrGuardUnanswered) {
			return 0, true, nil, err
		}
		return 0, false, nil, nil
	}
	settled, lerr := op.answered(ctx, out, epoch)
	switch {
	case !settled:
		return 0, false, nil, nil // the guard was busy: nothing written, nothing started
	case lerr != nil:
		return 0, true, lerr, nil // the node moved nothing
	case out[0] != "ok":
		return 0, true, nil, fmt.Errorf("the node's guard answered %q and started no boot", out[0])
	}
	// Another switch holding switch-to-configuration's lock: the records are written;
	// the boot entry is written again once it ends.
	gen, err = e.finalizeBootAfterLocked(ctx, toplevel, gen, err)
	return gen, true, nil, err
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
