package deploybody

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// chainMemberUp: active, or a oneshot that ran and exited successfully.
func chainMemberUp(s judge.UnitState) bool {
	if s.ActiveState == "active" {
		return true
	}
	return s.ActiveState == "inactive" && s.Result == "success" && s.ExecMainStartMono > 0 && s.ExecMainStatus == 0
}

// chainMemberInProgress: systemd is bringing the member up (or will, after a restart).
func chainMemberInProgress(s judge.UnitState) bool {
	return s.ActiveState == "activating" || s.ActiveState == "reloading" || s.SubState == "auto-restart"
}

func progressKey(s judge.UnitState) string {
	return strings.Join([]string{s.ActiveState, s.SubState, fmt.Sprint(s.NRestarts), s.InvocationID, fmt.Sprint(s.ExecMainStartMono)}, "/")
}

func describeState(s judge.UnitState) string {
	d := s.ActiveState + "/" + s.SubState
	if s.Result != "" && s.Result != "success" {
		d += ", Result=" + s.Result
	}
	return d
}

// waitForSecretChain waits, in order, for the units that bring the node's secrets up.
//
// Verdict-only mode (docs/design.md#verdict-only): the wait is bounded by chain_wait and stops early,
// naming the member, when a member failed, is not loaded, or showed no progress (no
// state change) for no_progress. A node that answers none of a few samples is
// unreachable.
//
// Deploy mode: the wait runs before the switch, when the chain may not exist yet or
// wait for an attestation that comes later; members that are not loaded or not
// started are not waited for, and a chain that does not come up is a warning: only
// the verdict-only pass can say whether the chain converged.
//
// It returns the unreachable verdict when the node answered none of a few samples.
func (e *runEnv) waitForSecretChain(ctx context.Context, toplevel string, nodeSilent bool) (*judge.Verdict, string, error) {
	for _, u := range e.o.SecretChain {
		if !judge.ValidUnitName(u) {
			return nil, "", withHint(fmt.Errorf("secret chain member %q is not a valid unit name", u), "list the secret chain as systemd unit names, e.g. \"vault-agent.service\"")
		}
	}
	if len(e.o.SecretChain) == 0 && !nodeSilent {
		return nil, "no secret chain", nil
	}
	start := e.o.Clock.Now()
	deadline := start.Add(e.o.Timings.ChainWait)
	lastChange := start
	lastKey := ""
	unanswered := 0
	samples := 0
	for samples < maxSamples {
		samples++
		now := e.o.Clock.Now()
		states, unread, answered := e.sampleChain(ctx, toplevel)
		if !answered {
			unanswered++
			if unanswered >= unreachableSampleLimit {
				return e.chainUnreachable(samples)
			}
		} else {
			unanswered = 0
			if len(e.o.SecretChain) == 0 {
				return nil, "node answered", nil
			}
			member, state, done := e.chainPosition(states, unread)
			if done {
				return nil, fmt.Sprintf("chain up after %s", now.Sub(start).Round(time.Second)), nil
			}
			key := member + "|" + unread
			if states != nil {
				key = member + "|" + progressKey(state)
			}
			if key != lastKey {
				lastKey, lastChange = key, now
			}
			if stop := e.chainProblem(member, state, states == nil, unread, now.Sub(lastChange)); stop != nil {
				if e.verdictOnly {
					return nil, "", stop
				}
				e.warn(ctx, PhaseWaitForSecretChain, "secret chain not up before the switch (not an error in a deploy): "+stop.Error())
				return nil, "chain not up; continuing", nil
			}
		}
		if !now.Before(deadline) {
			err := fmt.Errorf("secret chain not up after chain_wait (%s)", e.o.Timings.ChainWait)
			if lastKey != "" {
				member, _, _ := strings.Cut(lastKey, "|")
				err = fmt.Errorf("secret chain member %s not up after chain_wait (%s)", member, e.o.Timings.ChainWait)
			}
			if e.verdictOnly {
				return nil, "", withHint(err, "check the member's journal and what it waits for; raise timings.chain_wait if the chain is slow")
			}
			e.warn(ctx, PhaseWaitForSecretChain, "not an error in a deploy: "+err.Error())
			return nil, "chain not up; continuing", nil
		}
		if err := e.sleep(ctx, e.o.Timings.SampleInterval); err != nil {
			return nil, "", err
		}
	}
	return nil, "", errors.New("secret chain wait exceeded its sample bound")
}

// sampleChain reads the chain members' states (or, with no chain, only whether the
// node answers). states is nil when systemd did not answer (unread says why).
func (e *runEnv) sampleChain(ctx context.Context, toplevel string) (states map[string]judge.UnitState, unread string, answered bool) {
	if len(e.o.SecretChain) == 0 {
		err := e.t.Reach(ctx)
		return nil, "", err == nil || errors.Is(err, ErrSystemdUnanswered)
	}
	states, unread, err := e.showUnits(ctx, toplevel, e.o.SecretChain)
	if err != nil {
		e.log(ctx, LevelDebug, PhaseWaitForSecretChain, "chain sample unanswered", map[string]any{"error": err.Error()})
		return nil, "", false
	}
	return states, unread, true
}

// chainPosition returns the first member that is not up. In deploy mode members that
// are not loaded or were never started are passed over.
func (e *runEnv) chainPosition(states map[string]judge.UnitState, unread string) (member string, state judge.UnitState, done bool) {
	if states == nil {
		return e.o.SecretChain[0], judge.UnitState{}, false
	}
	for _, u := range e.o.SecretChain {
		s, ok := states[u]
		if !ok {
			s = judge.UnitState{ID: u, LoadState: "not-found"}
		}
		if chainMemberUp(s) {
			continue
		}
		if !e.verdictOnly && (s.LoadState != "loaded" || (s.ActiveState == "inactive" && !chainMemberInProgress(s))) {
			continue
		}
		return u, s, false
	}
	return "", judge.UnitState{}, true
}

// chainProblem says why the wait stops early at member, or nil to keep waiting.
func (e *runEnv) chainProblem(member string, s judge.UnitState, statesUnread bool, unread string, unchangedFor time.Duration) error {
	hint := fmt.Sprintf("read `journalctl -u %s` on the node; the members after it were not waited for", member)
	switch {
	case !statesUnread && s.ActiveState == "failed":
		return withHint(fmt.Errorf("secret chain member %s failed (%s)", member, describeState(s)), hint)
	case !statesUnread && s.LoadState != "" && s.LoadState != "loaded":
		return withHint(fmt.Errorf("secret chain member %s is not loaded (LoadState=%s)", member, s.LoadState), "check that the closure defines "+member)
	case unchangedFor >= e.o.Timings.NoProgress:
		what := describeState(s)
		if statesUnread {
			what = "unit states unread: " + unread
		}
		return withHint(fmt.Errorf("secret chain member %s made no progress for %s (%s)", member, e.o.Timings.NoProgress, what), hint+"; raise timings.no_progress if it is slow but alive")
	}
	return nil
}

// chainUnreachable is the unreachable verdict of a node that answered none of the
// chain wait's samples, and the phase's error.
func (e *runEnv) chainUnreachable(samples int) (*judge.Verdict, string, error) {
	v := &judge.Verdict{Strict: e.o.Strict, VerdictOnly: e.verdictOnly, Unreachable: true, SystemState: "unreachable", Samples: samples}
	v.Reasons, _ = judge.Decide(v)
	return v, "", withHint(fmt.Errorf("node answered none of %d samples in the secret chain wait: unreachable", samples),
		"check that the node is running and reachable with the transport's settings, then apply again")
}
