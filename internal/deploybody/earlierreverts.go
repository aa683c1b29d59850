package deploybody

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Reverts armed by earlier runs. A run that was killed or cut off after its switch
// started leaves its revert armed on the node. The revert itself stands down once a
// later run holds the lock (revertguard.go); besides that, every run that takes the
// lock deals with them at once, so none fires after this run released the lock and
// said ok: it disarms those that have not begun, waits for one that has begun (and
// for an earlier run's detached switch that still runs: two switches never run at
// once), and warns about each, naming what the node runs afterwards.

// lockNodeSettlingEarlierRuns is the lock-node phase: take the lock, then settle what
// earlier runs left armed or running on the node. The lock is returned also when the
// settling fails.
func (e *runEnv) lockNodeSettlingEarlierRuns(ctx context.Context, toplevel string, nodeSilent bool) (*nodeLock, string, error) {
	lock, note, err := e.lockNode(ctx, toplevel, nodeSilent)
	if err != nil || lock == nil {
		return lock, note, err
	}
	settled, err := e.settleEarlierReverts(ctx)
	if err != nil {
		return lock, "", err
	}
	if settled != "" {
		note += "; " + settled
	}
	return lock, note, nil
}

// settleEarlierReverts asks the node for the reverts and switches of earlier runs until
// none is still running, bounded by timings.switch_timeout (each of them is bounded by
// its own switch limit on the node).
func (e *runEnv) settleEarlierReverts(ctx context.Context) (string, error) {
	start := e.o.Clock.Now()
	limit := start.Add(e.o.Timings.SwitchTimeout)
	final := map[string]earlierRevert{}
	var busy []string
	var running string
	waited := false
	for attempt := 1; attempt <= maxSamples; attempt++ {
		out, err := e.revertGuard(ctx, nil, "pending")
		if err != nil {
			return "", withHint(fmt.Errorf("looking for reverts armed by earlier runs: %w", err),
				"the node needs sh, flock, readlink and systemctl in its PATH; check the transport, then apply again")
		}
		p := parsePendingAnswer(out)
		running = p.running
		busy = busy[:0]
		if p.busy {
			busy = append(busy, "the node lock's guard")
		}
		for _, rv := range p.reverts {
			if rv.answer.state == revertBegun {
				busy = append(busy, fmt.Sprintf("the revert %s (back to %s)", rv.unit, rv.previous))
				continue
			}
			final[rv.unit] = rv
		}
		for _, u := range p.switching {
			busy = append(busy, "the switch "+u)
		}
		if len(busy) == 0 {
			break
		}
		if !waited {
			waited = true
			e.log(ctx, LevelInfo, PhaseLockNode, "an earlier run's switch or revert still runs on the node; waiting for it", map[string]any{"running": strings.Join(busy, ", ")})
		}
		if !e.o.Clock.Now().Before(limit) {
			return "", withHint(fmt.Errorf("%s of an earlier run still runs on node %s after timings.switch_timeout (%s); this run does not switch beside it", strings.Join(busy, " and "), e.o.Node, e.o.Timings.SwitchTimeout),
				"read the node's journal for that unit (journalctl -u <unit>), wait for it to end, then apply again")
		}
		if err := e.sleep(ctx, e.o.Timings.SampleInterval); err != nil {
			return "", err
		}
	}
	units := make([]string, 0, len(final))
	for u := range final {
		units = append(units, u)
	}
	sort.Strings(units)
	for _, u := range units {
		e.warn(ctx, PhaseLockNode, describeEarlierRevert(final[u], running))
	}
	var notes []string
	if len(units) > 0 {
		notes = append(notes, fmt.Sprintf("settled %d revert(s) of earlier runs", len(units)))
	}
	if waited {
		notes = append(notes, fmt.Sprintf("waited %s for an earlier run's switch or revert", e.o.Clock.Now().Sub(start).Round(time.Second)))
	}
	return strings.Join(notes, "; "), nil
}

// describeEarlierRevert is the warning about one earlier run's revert.
func describeEarlierRevert(e earlierRevert, running string) string {
	what := fmt.Sprintf("an earlier run left a revert armed on the node (%s: back to %s unless a new login confirmed its switch)", e.unit, describeSystem(e.previous))
	switch e.answer.state {
	case revertDisarmed:
		return fmt.Sprintf("%s; this run holds the node's lock and disarmed it before it began; the node runs %s", what, describeSystem(running))
	case revertReverted:
		rc := ""
		if e.answer.detail != "" && e.answer.detail != "0" {
			rc = fmt.Sprintf(" (its switch-to-configuration exited %s)", e.answer.detail)
		}
		return fmt.Sprintf("%s; it had switched the node back%s before this run took the lock; the node runs %s", what, rc, describeSystem(running))
	}
	return fmt.Sprintf("%s; it stood down by itself (%s); the node runs %s", what, strings.TrimSpace(e.answer.state+" "+e.answer.detail), describeSystem(running))
}
