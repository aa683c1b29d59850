package fleet

import (
	"context"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// resumeNode lets a staged rollout resume where a halted one stopped. A node an
// earlier run already took to this run's system with an ok verdict (the node's own
// verdict record, deploybody.ReadVerdictRecord, names the system it runs) is not copied
// to or switched again: it is judged afresh (verdict only), and that verdict counts
// against the budget like any other. Every other node is deployed (resumed false).
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
	running, err := t.Run(ctx, []string{"readlink", "-f", "/run/current-system"}, deploybody.RunOptions{Path: []string{"/run/current-system/sw/bin", "/usr/bin", "/bin"}})
	if err != nil || running.ExitCode != 0 || strings.TrimSpace(string(running.Stdout)) != opts.Toplevel {
		return false, nil, nil // not reachable or not there yet: the deploy says which
	}
	rec, err := deploybody.ReadVerdictRecord(ctx, t)
	if err != nil || rec == nil || rec.Toplevel != opts.Toplevel || !rec.Result.Verdict.OK {
		return false, nil, nil
	}
	res, err = deploybody.VerdictOnly(ctx, t, *opts)
	if res != nil {
		res.Warnings = append(res.Warnings, "resumed: an earlier run deployed this system with an ok verdict at "+
			rec.At.Format(time.RFC3339)+"; the node was judged again, not copied to or switched")
	}
	return true, res, err
}
