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
// the deploy that follows. An error is the build's.
func resumeNode(ctx context.Context, t deploybody.Transport, opts *deploybody.Options, report func(Event)) (resumed bool, res *deploybody.Result, err error) {
	if opts.Toplevel == "" && opts.Build != nil {
		report(Event{Node: opts.Node, Phase: deploybody.PhaseBuild})
		top, err := opts.Build(ctx)
		if err != nil {
			return false, nil, &deploybody.DeployError{Node: opts.Node, Phase: deploybody.PhaseBuild, Err: err}
		}
		opts.Toplevel, opts.Build = top, nil
	}
	if opts.Toplevel == "" {
		return false, nil, nil
	}
	d, ok := resumable(ctx, t, opts.Node, opts.Toplevel)
	if !ok {
		return false, nil, nil
	}
	res, err = deploybody.VerdictOnly(ctx, t, *opts)
	if res != nil {
		res.Warnings = append(res.Warnings, resumedWarning(d))
	}
	return true, res, err
}

// resumable reads the node and asks the drift decision whether an earlier run left it
// running and booting toplevel with an ok verdict on record. A node not reachable, or
// not there yet, is not: the deploy says which.
func resumable(ctx context.Context, t deploybody.Transport, node, toplevel string) (deploybody.Drift, bool) {
	q := deploybody.DriftQuestion{Node: node}
	// The record is read only when the node runs (and boots) this run's system: any
	// other system is deployed over whatever its record says.
	s, err := deploybody.ReadNodeSystem(ctx, t, func(s deploybody.NodeSystem) bool { return s.Running == toplevel && q.NeedsRecord(s) })
	if err != nil {
		return deploybody.Drift{}, false
	}
	d := deploybody.JudgeDrift(q, s)
	return d, d.Decision == deploybody.DriftAdoptWithVerdict && d.Running == toplevel
}

// resumedWarning says why a resumed node was judged rather than deployed: the drift
// decision's words, as the provider shows them.
func resumedWarning(d deploybody.Drift) string {
	return "resumed: " + d.Fact + " It was judged again, not copied to or switched."
}
