package fleet

import (
	"context"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// resumeNode lets a staged rollout resume where a halted one stopped. A node an
// earlier run already took to this run's system with an ok verdict is not copied to or
// switched again: it is judged afresh (verdict only), and that verdict counts against
// the budget like any other. Every other node is deployed (resumed false).
//
// Whether it is so is the drift decision the provider's Read makes
// (deploybody.JudgeDrift), asked knowing no system (the command keeps no record of
// what a node runs beside the node's own): a node is resumed when the decision adopts
// this run's system with its recorded ok verdict. A node that runs it but does not boot
// it (an earlier run cut off before its boot entry), holds no verdict of it, or one
// that failed it, is deployed again.
//
// It builds the node's system first (opts.Build; through the evaluation cache, so a
// node built before costs no evaluation) and leaves the toplevel in opts.Toplevel for
// the deploy that follows. notResumed says why a node that is not resumed is deployed
// again, when that is worth saying (notResumedWarning). An error is the build's.
func resumeNode(ctx context.Context, t deploybody.Transport, opts *deploybody.Options, report func(Event)) (resumed bool, notResumed string, res *deploybody.Result, err error) {
	if opts.Toplevel == "" && opts.Build != nil {
		report(Event{Node: opts.Node, Phase: deploybody.PhaseBuild})
		top, err := opts.Build(ctx)
		if err != nil {
			return false, "", nil, &deploybody.DeployError{Node: opts.Node, Phase: deploybody.PhaseBuild, Err: err}
		}
		opts.Toplevel, opts.Build = top, nil
	}
	if opts.Toplevel == "" {
		return false, "", nil, nil
	}
	d, s, readErr, ok := resumable(ctx, t, opts.Node, opts.Toplevel)
	if !ok {
		return false, notResumedWarning(ctx, t, opts.Node, d, s, readErr, opts.Toplevel, opts.Activation), nil, nil
	}
	res, err = deploybody.VerdictOnly(ctx, t, *opts)
	if res != nil {
		res.Warnings = append(res.Warnings, resumedWarning(d))
	}
	return true, "", res, err
}

// resumable reads the node and asks the drift decision whether an earlier run left it
// running and booting toplevel with an ok verdict on record. A node not reachable, or
// not there yet, is not: the deploy says which (the decision is then empty, and
// readErr the read's error).
func resumable(ctx context.Context, t deploybody.Transport, node, toplevel string) (_ deploybody.Drift, _ deploybody.NodeSystem, readErr error, ok bool) {
	q := deploybody.DriftQuestion{Node: node}
	// The record is read only when the node runs (and boots) this run's system: any
	// other system is deployed over whatever its record says.
	s, err := deploybody.ReadNodeSystem(ctx, t, func(s deploybody.NodeSystem) bool { return s.Running == toplevel && q.NeedsRecord(s) })
	if err != nil {
		return deploybody.Drift{}, s, err, false
	}
	d := deploybody.JudgeDrift(q, s)
	return d, s, nil, d.Decision == deploybody.DriftAdoptWithVerdict && d.Running == toplevel
}

// notResumedWarning says why a node an earlier run reached is deployed again rather
// than resumed: the drift decision's words, as the provider's refresh and plan show
// them, and what the command does about it. It is "" for a node no earlier run reached,
// one that runs and boots another system than this run's: that is what a rollout
// deploys over, every node of a first run, and its record was not read (so no decision
// over it names more than that). Also for a node that was not read (readErr): the
// deploy says why; unless an earlier run's restore of it did not finish
// (deploybody.JudgeUnfinishedRestore, which the provider's refresh asks too), which the
// deploy's first step finishes.
func notResumedWarning(ctx context.Context, t deploybody.Transport, node string, d deploybody.Drift, s deploybody.NodeSystem, readErr error, toplevel string, activation deploybody.Activation) string {
	if fact := deploybody.JudgeUnfinishedRestore(ctx, t, deploybody.DriftQuestion{Node: node, Known: toplevel}, s, readErr); fact != "" {
		return "not resumed: " + fact + " It is deployed again."
	}
	switch {
	case readErr != nil:
		return ""
	case activation == deploybody.ActivationBoot && s.Profile == toplevel && s.Running != toplevel:
		// An earlier run with activation = "boot" set this run's system as the boot
		// entry: the decision knowing that system says so, not "unfinished".
		d = deploybody.JudgeDrift(deploybody.DriftQuestion{Node: node, Known: toplevel, Activation: activation}, s)
	case d.Decision == deploybody.DriftUnfinishedSwitch, d.Running == toplevel:
	default:
		return ""
	}
	return "not resumed: " + d.Fact + " It is deployed again."
}

// resumedWarning says why a resumed node was judged rather than deployed: the drift
// decision's words, as the provider shows them.
func resumedWarning(d deploybody.Drift) string {
	return "resumed: " + d.Fact + " It was judged again, not copied to or switched."
}
