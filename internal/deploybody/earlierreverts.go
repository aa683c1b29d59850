package deploybody

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// Reverts armed by earlier runs. A run that was killed or cut off after its switch
// started leaves its revert armed on the node. Every run that takes the lock deals with
// them before it changes anything, so none fires after this run released the lock and
// said ok, and none is disarmed by a login that proves nothing:
//   - while the switch a revert guards still runs, the revert stays armed and the run
//     waits (two switches never run at once);
//   - once that switch ended, only a login made after its end settles the revert (the
//     guard compares the two on the node's clock, revertguard.go); the run's own
//     connection is usually older, so it logs in anew, as often as it takes;
//   - when no new login gets through, the revert's window ends and it switches the node
//     back, taking the lock from this run: the run fails, saying that the node locks out
//     new logins and that it runs its previous system again;
//   - a revert that has begun is waited for; one whose unit died is reported, and the
//     node is deployable again.
// Each settled revert is a warning that names what the node runs afterwards.

// lockNodeSettlingEarlierRuns is the lock-node phase: take the lock, then settle what
// earlier runs left armed or running on the node. The lock is returned also when the
// settling fails: the caller releases it.
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

// earlierRuns is what settleEarlierReverts has seen so far.
type earlierRuns struct {
	final map[string]records.EarlierRevert
	// watched are the reverts this run found still armed: it holds the node's lock
	// meanwhile, and one that then begins takes the lock from it.
	watched map[string]records.EarlierRevert
	busy    []string
	running string
	profile string
	// lastLogin is the last new login's failure (nil: none failed, or none was made).
	lastLogin error
}

// settleEarlierReverts asks the node for the reverts and switches of earlier runs until
// none is left to settle, bounded by the earlier switch's limit, the revert's window
// and the node's wait (timings.switch_timeout + confirm_timeout + node_wait).
func (e *runEnv) settleEarlierReverts(ctx context.Context) (string, error) {
	start := e.o.Clock.Now()
	bound := e.o.Timings.SwitchTimeout + e.o.Timings.ConfirmTimeout + e.o.Timings.NodeWait
	limit := start.Add(bound)
	seen := earlierRuns{final: map[string]records.EarlierRevert{}, watched: map[string]records.EarlierRevert{}}
	waited := false
	for attempt := 1; attempt <= maxSamples; attempt++ {
		if err := e.askEarlierReverts(ctx, &seen); err != nil {
			return "", err
		}
		if len(seen.busy) == 0 {
			break
		}
		if !waited {
			waited = true
			e.log(ctx, LevelInfo, PhaseLockNode, "an earlier run's switch or revert is not settled yet; waiting for it", map[string]any{"running": strings.Join(seen.busy, ", ")})
		}
		if !e.o.Clock.Now().Before(limit) {
			return "", withHint(fmt.Errorf("%s of an earlier run is still not settled on node %s after %s (timings.switch_timeout + confirm_timeout + node_wait); this run does not switch beside it", strings.Join(seen.busy, " and "), e.o.Node, bound),
				"read the node's journal for that unit (journalctl -u <unit>), wait for it to end, then apply again")
		}
		if err := e.sleep(ctx, e.o.Timings.SampleInterval); err != nil {
			return "", err
		}
	}
	units := make([]string, 0, len(seen.final))
	for u := range seen.final {
		units = append(units, u)
	}
	sort.Strings(units)
	for _, u := range units {
		if err := e.tookTheNode(seen, seen.final[u]); err != nil {
			return "", err
		}
	}
	for _, u := range units {
		e.warn(ctx, PhaseLockNode, describeEarlierRevert(seen.final[u], seen.running))
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

// askEarlierReverts asks the guard once (pending), then settles over a new login each
// revert that the run's own login cannot (unconfirmed), and records what it saw.
func (e *runEnv) askEarlierReverts(ctx context.Context, seen *earlierRuns) error {
	out, err := e.revertGuard(ctx, nil, "pending")
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return guardError(fmt.Errorf("looking for reverts armed by earlier runs: %w", err))
	}
	p := records.ParsePendingAnswer(out)
	seen.running, seen.profile = p.Running, p.Profile
	seen.busy = seen.busy[:0]
	if p.Busy {
		seen.busy = append(seen.busy, "the node lock's guard")
	}
	for _, rv := range p.Reverts {
		switch rv.Answer.State {
		case records.RevertBegun:
			seen.busy = append(seen.busy, fmt.Sprintf("the revert %s (back to %s)", rv.Unit, rv.Previous))
		case records.RevertSwitching:
			seen.watched[rv.Unit] = rv
			if len(p.Switching) == 0 {
				seen.busy = append(seen.busy, fmt.Sprintf("the switch the revert %s guards", rv.Unit))
			}
		case records.RevertUnconfirmed:
			seen.watched[rv.Unit] = rv
			if err := e.confirmEarlierRevert(ctx, seen, rv); err != nil {
				return err
			}
		default:
			seen.final[rv.Unit] = rv
		}
	}
	for _, u := range p.Switching {
		seen.busy = append(seen.busy, "the switch "+u)
	}
	return nil
}

// confirmEarlierRevert tries to settle an earlier run's revert over a new login, made
// now, after its switch ended: the run's own connection was made before that end.
func (e *runEnv) confirmEarlierRevert(ctx context.Context, seen *earlierRuns, rv records.EarlierRevert) error {
	sr, ok := e.t.(SelfReverter)
	if !ok || !sr.CanSelfRevert() {
		seen.busy = append(seen.busy, fmt.Sprintf("the revert %s (only a new login can settle it, and this transport makes none: it decides by itself when its window ends)", rv.Unit))
		return nil
	}
	out, err := e.revertGuard(ctx, sr, "disarm", rv.Unit)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		seen.lastLogin = err
		e.log(ctx, LevelWarn, PhaseLockNode, "no new login yet to settle an earlier run's revert", map[string]any{"revert": rv.Unit, "error": err.Error()})
		seen.busy = append(seen.busy, fmt.Sprintf("the revert %s (no new login has got through since the switch it guards ended)", rv.Unit))
		return nil
	}
	ans := records.ParseRevertAnswer(out)
	seen.running, seen.profile = ans.Running, ans.Profile
	if !ans.Final() {
		seen.busy = append(seen.busy, fmt.Sprintf("the revert %s (%s)", rv.Unit, ans.State))
		return nil
	}
	rv.Answer = ans
	seen.final[rv.Unit] = rv
	return nil
}

// tookTheNode is the run's error when an earlier revert that this run found still armed
// switched the node back (or began to) while this run held the lock: the revert took
// the lock from it, and the node runs its previous system. When new logins failed, that
// is a lock-out, and the error says so.
func (e *runEnv) tookTheNode(seen earlierRuns, rv records.EarlierRevert) error {
	if _, ok := seen.watched[rv.Unit]; !ok {
		return nil
	}
	generation := records.RevertAnswer{Profile: seen.profile}.Generation()
	switch rv.Answer.State {
	case records.RevertReverted:
		back := fmt.Sprintf("that run's revert switched the node back to %s (generation %d)", describeSystem(seen.running), generation)
		if rv.Answer.Detail != "" && rv.Answer.Detail != "0" {
			back += fmt.Sprintf("; its switch-to-configuration exited %s", rv.Answer.Detail)
		}
		if seen.lastLogin != nil {
			return withHint(fmt.Errorf("%w: an earlier run switched node %s to %s and was cut off; after that switch ended, no new login reached the node (last attempt: %v), so %s: %w",
				ErrLockedOut, e.o.Node, describeSystem(rv.Guarded), seen.lastLogin, back, ErrSelfReverted),
				fmt.Sprintf("the system %s stops new logins (sshd, its port, a firewall or the network): fix that before applying again; the node runs and boots %s", describeSystem(rv.Guarded), describeSystem(rv.Previous)))
		}
		return withHint(fmt.Errorf("an earlier run switched node %s to %s and was cut off, and no new login settled its revert before its window ended, so %s: %w",
			e.o.Node, describeSystem(rv.Guarded), back, ErrSelfReverted),
			fmt.Sprintf("the node runs and boots %s; apply again", describeSystem(rv.Previous)))
	case records.RevertDied:
		return withHint(fmt.Errorf("an earlier run's revert on node %s began to switch the node back to %s while this run waited, and its unit stopped before it ended (its time limit, out of memory, or systemctl stop); the node runs %s: %w",
			e.o.Node, describeSystem(rv.Previous), describeSystem(seen.running), errRevertDied),
			"check the node's journal (journalctl -u "+rv.Unit+"), then apply again: the next run deploys the configuration over what the node runs")
	}
	return nil
}

// errRevertDied: a revert began and its unit stopped before it ended.
var errRevertDied = errors.New("the revert's unit stopped before it ended")

// guardError is a failed revert guard with what to do: the command it needs when one
// is missing, else the transport.
func guardError(err error) error {
	if errors.Is(err, ErrMissingCommand) {
		return withHint(err, "install it in the node's system (NixOS' default system packages have it), then apply again")
	}
	return withHint(err, "check the transport and that the node answers, then apply again")
}

// describeEarlierRevert is the warning about one earlier run's revert.
func describeEarlierRevert(e records.EarlierRevert, running string) string {
	what := fmt.Sprintf("an earlier run left a revert armed on the node (%s: back to %s unless a new login confirmed its switch)", e.Unit, describeSystem(e.Previous))
	switch e.Answer.State {
	case records.RevertDisarmed:
		return fmt.Sprintf("%s; a new login made after its switch ended disarmed it before it began, under this run's lock; the node runs %s", what, describeSystem(running))
	case records.RevertReverted:
		rc := ""
		if e.Answer.Detail != "" && e.Answer.Detail != "0" {
			rc = fmt.Sprintf(" (its switch-to-configuration exited %s)", e.Answer.Detail)
		}
		return fmt.Sprintf("%s; it had switched the node back%s before this run took the lock; the node runs %s", what, rc, describeSystem(running))
	case records.RevertDied:
		return fmt.Sprintf("%s; it began to switch the node back, and its unit stopped before it ended (its time limit, out of memory, or systemctl stop: journalctl -u %s); the node runs %s, and this run deploys over it", what, e.Unit, describeSystem(running))
	case records.RevertBroken:
		return fmt.Sprintf("%s; it could not run on the node (%s), so the node had no lock-out revert; the node runs %s", what, e.Answer.Detail, describeSystem(running))
	}
	return fmt.Sprintf("%s; it stood down by itself (%s); the node runs %s", what, strings.TrimSpace(e.Answer.State+" "+e.Answer.Detail), describeSystem(running))
}
