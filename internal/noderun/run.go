// Package noderun is one run of a deploy body against one node, for both front ends:
// the `fediversity` command's group run (internal/fleet) and the provider's node
// resources (internal/provider/node). It holds the whole sequence: open the node's
// transport, guard the run with the node's rollback point (Incus, when the spec asks),
// complete the options over the node's own connection (the last good system, a resumed
// node), run the body, and find out whether the guard restored the node and judge the
// system it restored. It returns one Outcome: the body's result, the guard's facts and
// the run's warnings, in one set of words that each front end only formats.
//
// It imports neither the plugin framework nor the provider (internal/archtest).
package noderun

import (
	"context"
	"fmt"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	incustransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/incus"
)

// PhaseConnect is the phase of a run whose node's transport could not be opened (or
// guarded): nothing was done on the node.
const PhaseConnect = "connect"

// PhaseRestoreSnapshot is the phase of a run whose node the guard restored to its
// rollback point: the node runs what the rollback point held.
const PhaseRestoreSnapshot = "restore-snapshot"

// Body is what a run does on the node: deploybody.Deploy, deploybody.VerdictOnly or
// deploybody.VerdictReadOnly.
type Body func(context.Context, deploybody.Transport, deploybody.Options) (*deploybody.Result, error)

// Run is one run against one node.
type Run struct {
	Node string
	// Open opens the node's transport, where every front end opens its nodes
	// (transport.Connections). Close is called on it after the run when CloseAfter is
	// set: the provider's connection is the run's own, while the command's pooled
	// connections outlive each node's run.
	Open       func() (deploybody.Transport, error)
	CloseAfter bool
	// ConnectHint is what the operator can do when Open fails, in the front end's terms
	// (the roster and environment, or the transport block and the provider's
	// credentials).
	ConnectHint string
	Options     deploybody.Options
	Body        Body
	// Prepare, if set, completes the options over the node's own connection (never the
	// guard's) before the body runs: the last good system's toplevel, a build, the
	// reboot notice. A result or an error from it ends the run there, the body not run:
	// an error leaves the node untouched; a result is the run's (a resumed node, judged
	// again rather than deployed).
	Prepare func(ctx context.Context, node deploybody.Transport, opts *deploybody.Options) (*deploybody.Result, error)
	// SnapshotKeep > 0 guards the run with the node's rollback point (Incus): a set
	// taken before the switch and restored when the switch leaves the node unreachable,
	// keeping that many (nodespec.Spec.SnapshotKeep).
	SnapshotKeep int
	// InterruptedRestore is what the guard does first with a restore an earlier run left
	// unfinished (nodespec.Spec.InterruptedRestore).
	InterruptedRestore string
}

// Outcome is what one node's run came to, the same for both front ends.
type Outcome struct {
	// Result is the body's (or Prepare's) result; nil when neither ran (the node was not
	// reached, or Prepare failed).
	Result *deploybody.Result
	// Err is the run's error: the transport's (phase connect), Prepare's, the body's, or,
	// when the guard restored the node, the restore's (phase restore-snapshot).
	Err error
	// Connected: the node's transport opened and the run went on; false when Err is the
	// connection's.
	Connected bool
	// Prepared: Prepare ended the run (its result or error is the run's).
	Prepared bool
	// Guard is the rollback point that guarded the run (nil: unguarded): which set it
	// took or kept, and, when Restored, how the restore went.
	Guard *incustransport.SnapshotGuard
	// Restored: the guard restored the node to its rollback point; the body's result is
	// void, the node runs what the rollback point held. RestoreErr is the restore's
	// failure (nil: restored); Judged is the restored system's verdict in words ("" when
	// the restore failed).
	Restored   bool
	RestoreErr error
	Judged     string
	// RunWarnings are the run's own: what the guard says (host-path disks it cannot
	// hold, an earlier rollback point kept). The body's are in Result.Warnings.
	RunWarnings []Warning
}

// Warning is one thing a run says that does not fail it.
type Warning struct {
	// Fact is its one line, without the node's name: a diagnostic's summary.
	Fact string
	// Detail is why, and what it means for the node.
	Detail string
}

// String is the warning as the command prints it.
func (w Warning) String() string { return w.Fact + ": " + w.Detail }

// Warnings are every warning of the run, in order: the run's own, then the body's.
func (o Outcome) Warnings() []string {
	var out []string
	for _, w := range o.RunWarnings {
		out = append(out, w.String())
	}
	if o.Result != nil {
		out = append(out, o.Result.Warnings...)
	}
	return out
}

// Do runs r and returns its outcome.
func (r Run) Do(ctx context.Context) (out Outcome) {
	t, err := r.Open()
	if err != nil {
		out.Err = &deploybody.DeployError{Node: r.Node, Phase: PhaseConnect, Err: err, Hint: r.ConnectHint}
		return out
	}
	if r.CloseAfter {
		defer func() { _ = t.Close() }()
	}
	guarded := t
	if r.SnapshotKeep > 0 {
		// Spec.Validate refuses a snapshot on a node that is not Incus; this is the
		// transport's own word on it.
		if out.Guard, err = incustransport.NewSnapshotGuard(t, r.SnapshotKeep); err != nil {
			out.Err = &deploybody.DeployError{Node: r.Node, Phase: PhaseConnect, Err: err}
			return out
		}
		out.Guard.SetInterruptedRestore(r.InterruptedRestore)
		guarded = out.Guard
	}
	out.Connected = true
	opts := r.Options
	if r.Prepare != nil {
		res, err := r.Prepare(ctx, t, &opts)
		if res != nil || err != nil {
			out.Result, out.Err, out.Prepared = res, err, true
			return out
		}
	}
	// The body restores the guard's rollback point itself, under the node lock
	// (deploybody.Restorer); here it is found out and judged.
	out.Result, out.Err = r.Body(ctx, guarded, opts)
	if out.Guard != nil {
		r.guardFacts(ctx, opts, &out)
	}
	return out
}

// guardFacts reads what the guard did: the host-path disks its rollback point cannot
// hold, an earlier rollback point it kept, and a restore, judged.
func (r Run) guardFacts(ctx context.Context, opts deploybody.Options, out *Outcome) {
	g := out.Guard
	if hp := g.Set().HostPaths; len(hp) > 0 {
		out.RunWarnings = append(out.RunWarnings, Warning{Fact: "the rollback point does not hold its host-path disks",
			Detail: incustransport.HostPathWarning(g.Instance(), hp)})
	}
	if restored, rerr := g.Restored(); restored {
		out.Restored, out.RestoreErr = true, rerr
		err := restoredError(g, rerr)
		if rerr == nil {
			out.Judged = g.JudgeRestored(ctx, opts)
			err = fmt.Errorf("%w. %s", err, out.Judged)
		}
		out.Err = &deploybody.DeployError{Node: r.Node, Phase: PhaseRestoreSnapshot, Err: err,
			Hint: "find out why the new system stops the node answering before deploying it again"}
		return
	}
	if g.KeptEarlierPoint() {
		out.RunWarnings = append(out.RunWarnings, Warning{Fact: "kept its earlier rollback point",
			Detail: fmt.Sprintf("node %s ran a system its boot entry does not point at (an earlier deploy did not finish), so its state was not known good: "+
				"snapshot %s, taken before that deploy, was kept as the rollback point instead of being replaced.", r.Node, g.Taken())})
	}
}

// restoredError says that the node did not answer after the switch and what became of
// its rollback point.
func restoredError(g *incustransport.SnapshotGuard, restoreErr error) error {
	if incustransport.IsSpaceError(restoreErr) {
		return fmt.Errorf("the node did not answer after %s; %w", g.LostAfter(), restoreErr)
	}
	aside := ""
	if text := g.AsideText(); text != "" {
		aside = ". " + strings.TrimSuffix(text, ".")
	}
	if restoreErr != nil {
		return fmt.Errorf("the node did not answer after %s, and restoring snapshot %s failed: %w; restore it by hand (incus snapshot restore %s %s)%s",
			g.LostAfter(), g.Taken(), restoreErr, g.Instance(), g.Taken(), aside)
	}
	return fmt.Errorf("the node did not answer after %s: snapshot %s was restored and the instance started again; it runs its previous system%s", g.LostAfter(), g.Taken(), aside)
}
