package fleet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixeval"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/noderun"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	sshtransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/ssh"
)

// DefaultParallel is how many nodes run at once unless told otherwise (colmena's
// default too).
const DefaultParallel = 10

// Group is one run of the `ssh` method over a group.
type Group struct {
	Roster *Roster
	// NodePlans maps each enabled node to its plan (canonical JSON), as the submission
	// data source publishes it. Nil means no submission: every roster node runs with no
	// plan.
	NodePlans map[string]string
	// VerdictOnly judges the running nodes: no build, no copy, no switch.
	VerdictOnly bool
	// ToLastGood deploys each node's last good system (records.LastGoodFile) instead of a
	// build: `fediversity rollback`. A node without one fails, untouched.
	ToLastGood bool
	Strict     bool
	// Activation, when set (the command's --activation), is every node's activation,
	// over its roster entry's.
	Activation string
	// Parallel bounds how many nodes run at once (DefaultParallel when 0).
	Parallel int
	// Rollout stages the run: a canary, waves and a failure budget. Nil (or zero):
	// one wave of every node, no budget.
	Rollout     *Rollout
	Credentials Credentials
	// Nix evaluates and builds the nodes' systems: the evaluation cache the provider
	// uses, and one build per derivation. Nil: one made for the run (nixeval.New).
	Nix *nixeval.Evaluator
	// Progress, if set, is told each phase a node starts and when it is done. It is
	// called from the nodes' goroutines, one call at a time.
	Progress func(Event)
	// WaveStarted, if set, is told when a wave of a staged rollout starts: its number
	// (from 1), how many waves there are, and its nodes.
	WaveStarted func(number, waves int, nodes []string)
}

// Event is one step of one node.
type Event struct {
	Node    string
	Phase   string
	Elapsed time.Duration // since the node's run began
	// Done is the node's last event; OK tells its verdict.
	Done bool
	OK   bool
	// Notice, when set, is a line to print as it is, before the deploy changes the
	// node: that it will reboot the node, and why (deploybody.RebootNotice).
	Notice string
}

// Outcome is what happened to one node.
type Outcome struct {
	Node string
	// Disabled: the roster has the node but the submission enables nothing on it; it
	// was not touched.
	Disabled bool
	// Outcome is the node's run, as the provider's node resources get it too: the
	// result, the error, the rollback point's facts and the run's warnings.
	noderun.Outcome
	Elapsed time.Duration
	// BuildWarnings are the build's own (the evaluation cache's); the run's are in
	// Outcome.Warnings.
	BuildWarnings []string
	// Wave is the node's wave in a staged rollout (from 1; the canary is wave 1).
	Wave int
	// NotAttempted, when set, says why the node was not touched: the rollout halted
	// before its turn (RolloutResult.HaltReason).
	NotAttempted string
	// Resumed: an earlier run had already deployed this run's system with an ok
	// verdict; the node was judged again (verdict only), not copied to or switched.
	Resumed bool
	// NotResumed, when set, says why a staged rollout deployed the node again though an
	// earlier run had reached it (it runs this run's system without booting it, or
	// without an ok verdict of it; it runs a system its boot entry does not point at):
	// the drift decision's words, as the provider's plan shows them. It is the first of
	// Warnings.
	NotResumed string
	// Interrupted: the run was interrupted (Ctrl-C, SIGTERM) while the node's run was
	// under way, and it ended with no verdict. It is neither ok nor a failed deploy: it
	// does not count against a rollout's failure budget, and the exports say
	// "interrupted". Err says where it stopped.
	Interrupted bool
}

// OK is true when the node's verdict does not fail the run.
func (o Outcome) OK() bool {
	return o.Disabled || (o.NotAttempted == "" && !o.Interrupted && o.Err == nil && o.Result != nil && o.Result.Verdict != nil && o.Result.Verdict.OK)
}

// CountsAgainstBudget reports whether the node counts as failed against a rollout's
// failure budget: a node deployed whose verdict failed, or that could not be deployed,
// and also one whose lenient verdict was ok with reasons (the failures it let pass): one
// rule for both front ends (FailsBudget). A node left alone (disabled, not attempted)
// or whose run was interrupted is not counted.
func (o Outcome) CountsAgainstBudget() bool {
	if o.Disabled || o.NotAttempted != "" || o.Interrupted {
		return false
	}
	if !o.OK() {
		return true
	}
	v := o.Result.Verdict
	return FailsBudget(v.OK, v.Reasons)
}

// FailsBudget is the failure budget's rule for one node's verdict, in the command's
// rollout and in the provider's gate (fediversity_rollout_gate, the group modules): a
// verdict that is not ok fails, and so does a lenient one that is ok with reasons.
// A lenient verdict keeps the apply (or the command) going over a failed unit; it does
// not make the node good, and a rollout's budget is about nodes that are not good.
func FailsBudget(ok bool, reasons []string) bool {
	return !ok || len(reasons) > 0
}

// interruptedOutcome tells whether o, returned while ctx (the group's) was done, is an
// interrupted run rather than a failed one: it ended with an error and no verdict.
func interruptedOutcome(ctx context.Context, o Outcome) bool {
	return ctx.Err() != nil && o.Err != nil && (o.Result == nil || o.Result.Verdict == nil)
}

// NotBack is true when the node was rebooted and did not come back within node_wait
// (deploybody.ErrNotBack): Err says so, with the last thing seen of it.
func (o Outcome) NotBack() bool {
	return errors.Is(o.Err, deploybody.ErrNotBack)
}

// Warnings are every warning of the node's run, in order: why it was not resumed,
// the build's, then the run's (the rollback point's, a lock taken over, a lenient
// verdict's reasons, a system judged that is not the one asked for, …).
func (o Outcome) Warnings() []string {
	out := []string{} // never nil: the JSON's "warnings" is a list, empty when none
	if o.NotResumed != "" {
		out = append(out, o.NotResumed)
	}
	return append(append(out, o.BuildWarnings...), o.Outcome.Warnings()...)
}

// Plan checks the group before anything runs and returns the nodes that will run, in
// order. Bad input is an InputError: nothing has been done on any node.
func (g *Group) Plan() (run []string, disabled []string, err error) {
	var problems []string
	if g.NodePlans == nil {
		run = g.Roster.NodeNames()
	} else {
		for node := range g.NodePlans {
			if _, ok := g.Roster.Nodes[node]; !ok {
				problems = append(problems, fmt.Sprintf("node %q: the submission enables it, but the roster has no entry for it: add it under \"nodes\"", node))
				continue
			}
			run = append(run, node)
		}
		sort.Strings(run)
		for _, node := range g.Roster.NodeNames() {
			if _, ok := g.NodePlans[node]; !ok {
				disabled = append(disabled, node)
			}
		}
	}
	overSSH := false
	for _, node := range run {
		spec := g.Roster.Spec(node)
		if !g.VerdictOnly && !g.ToLastGood && spec.Toplevel == "" && spec.Build == nil {
			problems = append(problems, fmt.Sprintf("node %q: build: nothing to deploy: give the roster a \"build\" (or the node a \"build\" or \"toplevel\")", node))
		}
		if t := spec.Target(); t.Kind == "incus" && t.Remote != nodespec.LocalRemote {
			problems = append(problems, fmt.Sprintf("node %q: incus.remote: %q: the command reaches Incus nodes through the local daemon (INCUS_SOCKET) only; leave remote out", node, t.Remote))
		}
		overSSH = overSSH || spec.SSH != nil
	}
	if overSSH && g.Credentials.PrivateKeyFile == "" && g.Credentials.AgentSocket == "" {
		problems = append(problems, "credentials: neither SSH_PRIVATE_KEY_FILE nor SSH_AUTH_SOCK is set: set one to authenticate to the nodes")
	}
	if g.Rollout.Staged() {
		_, rp := g.Rollout.Plan(run, g.Roster.NodeNames())
		problems = append(problems, rp...)
	}
	if len(problems) > 0 {
		return nil, nil, &InputError{problems}
	}
	return run, disabled, nil
}

// Run deploys (or judges) every enabled node, at most Parallel at once, and returns one
// outcome per roster node, sorted by name. Without a staged rollout a failing node
// never stops the others.
func (g *Group) Run(ctx context.Context) ([]Outcome, error) {
	outcomes, _, err := g.RunRollout(ctx)
	return outcomes, err
}

// RunRollout is Run that also says how the rollout went: its waves, its budget, and
// where it halted (one wave of every node and no budget without g.Rollout).
func (g *Group) RunRollout(ctx context.Context) ([]Outcome, *RolloutResult, error) {
	nodes, disabled, err := g.Plan()
	if err != nil {
		return nil, nil, err
	}
	plan, _ := g.Rollout.Plan(nodes, g.Roster.NodeNames()) // checked by g.Plan
	parallel := g.Parallel
	if parallel <= 0 {
		parallel = DefaultParallel
	}
	conns := &connections{ssh: &sshtransport.Pool{}}
	defer conns.close()
	nix := g.Nix
	if nix == nil {
		nix = nixeval.New()
	}

	var progressMu sync.Mutex
	report := func(e Event) {
		if g.Progress == nil {
			return
		}
		progressMu.Lock()
		defer progressMu.Unlock()
		g.Progress(e)
	}
	outcomes, result := runRollout(ctx, plan, parallel, func(ctx context.Context, node string) Outcome {
		return g.runNode(ctx, conns, nix, node, report)
	}, func(w WaveResult, waves int) {
		if g.WaveStarted != nil && g.Rollout.Staged() {
			progressMu.Lock()
			defer progressMu.Unlock()
			g.WaveStarted(w.Number, waves, w.Nodes)
		}
	})
	for _, node := range disabled {
		outcomes = append(outcomes, Outcome{Node: node, Disabled: true})
	}
	sort.Slice(outcomes, func(a, b int) bool { return outcomes[a].Node < outcomes[b].Node })
	return outcomes, result, nil
}

func (g *Group) runNode(ctx context.Context, conns *connections, nix *nixeval.Evaluator, node string, report func(Event)) (out Outcome) {
	start := time.Now()
	out = Outcome{Node: node}
	// out is the named result, so the elapsed time set here is the one returned.
	defer func() {
		out.Elapsed = time.Since(start)
		report(Event{Node: node, Elapsed: out.Elapsed, Done: true, OK: out.OK()})
	}()
	spec := g.Roster.Spec(node) // validated by LoadRoster
	if spec.Strict == nil {
		spec.Strict = &g.Strict
	}
	if g.Activation != "" {
		spec.Activation = g.Activation
	}
	opts := spec.Options(deploybody.Timings{})
	opts.LocalStore = nixstore.DeployerStore{}
	opts.Logger = deploybody.LoggerFunc(func(_ context.Context, _ deploybody.Level, phase, message string, _ map[string]any) {
		if message == "phase started" {
			report(Event{Node: node, Phase: phase, Elapsed: time.Since(start)})
		}
	})
	run := noderun.Run{Node: node, Options: opts, Body: deploybody.Deploy,
		Open:        func() (deploybody.Transport, error) { return conns.open(node, spec.Target(), g.Credentials) },
		ConnectHint: "check the node's roster entry and SSH_PRIVATE_KEY_FILE / SSH_AUTH_SOCK (INCUS_SOCKET for an Incus node)"}
	if g.VerdictOnly {
		run.Body = deploybody.VerdictOnly
		out.Outcome = run.Do(ctx)
		return out
	}
	// A deploy's switch is guarded by the node's rollback point (Incus, when the roster
	// asks).
	run.SnapshotKeep, run.InterruptedRestore = spec.SnapshotKeep(), spec.InterruptedRestore()
	cleanup := func() {}
	defer func() { cleanup() }()
	run.Prepare = func(ctx context.Context, t deploybody.Transport, opts *deploybody.Options) (*deploybody.Result, error) {
		switch {
		case g.ToLastGood:
			// A node without one fails, untouched (records.ErrNoLastGood).
			top, err := deploybody.LastGoodToplevel(ctx, t, node)
			if err != nil {
				return nil, err
			}
			opts.Toplevel, opts.Build = top, nil
		case opts.Toplevel == "":
			var err error
			cleanup, err = g.setBuild(opts, nix, spec, &out.BuildWarnings)
			if err != nil {
				return nil, &deploybody.DeployError{Node: node, Phase: deploybody.PhaseBuild, Err: err}
			}
		}
		if g.Rollout.Staged() {
			resumed, notResumed, res, err := resumeNode(ctx, t, opts, report)
			out.NotResumed = notResumed
			if resumed || err != nil {
				out.Resumed = resumed
				// Every clean verdict of a deploy becomes the node's last good system:
				// the deploy records it itself, with its verdict record; a resumed
				// node's pass only judged it.
				if resumed && err == nil {
					deploybody.RecordLastGood(ctx, t, res, time.Now())
				}
				return res, err
			}
		}
		foreseeReboot(ctx, opts, t, spec.Activation, func(notice string) {
			report(Event{Node: node, Notice: notice, Elapsed: time.Since(start)})
		})
		return nil, nil
	}
	out.Outcome = run.Do(ctx)
	return out
}

// foreseeReboot makes the deploy say, once its toplevel is known (given, or built) and
// before it copies or switches anything, that it will reboot the node and why: the
// words the provider's plan uses.
func foreseeReboot(ctx context.Context, opts *deploybody.Options, t deploybody.Transport, activation string, say func(string)) {
	a := deploybody.Activation(activation)
	if a != deploybody.ActivationReboot && a != deploybody.ActivationRebootIfNeeded {
		return
	}
	if opts.Toplevel != "" {
		if n := deploybody.ForeseeReboot(ctx, t, a, opts.Toplevel); n != "" {
			say(n)
		}
		return
	}
	build := opts.Build
	if build == nil {
		return
	}
	opts.Build = func(buildCtx context.Context) (string, error) {
		top, err := build(buildCtx)
		if err == nil {
			if n := deploybody.ForeseeReboot(buildCtx, t, a, top); n != "" {
				say(n)
			}
		}
		return top, err
	}
}

// setBuild makes opts build the node as the provider does: its node plan goes to the
// file (for a flake, the input directory) the engine's one writer names
// (nixeval.HandNodePlan), and the build is evaluated through the evaluation cache the provider uses
// (a node unchanged since its last evaluation runs no nix-instantiate) and built once
// per derivation however many nodes share it.
func (g *Group) setBuild(opts *deploybody.Options, nix *nixeval.Evaluator, spec nodespec.Spec, warnings *[]string) (cleanup func(), err error) {
	cleanup = func() {}
	node := spec.Node
	build := spec.NixBuild(g.Roster.dir)
	plan, ok := g.NodePlans[node]
	if ok {
		c, err := nixeval.HandNodePlan(&build, plan)
		cleanup = c
		if err != nil {
			return cleanup, err
		}
	}
	opts.Build = func(ctx context.Context) (string, error) {
		// A cache that cannot be written costs the next run an evaluation: the
		// command prints it with the node's other warnings.
		ev, err := nix.Evaluate(ctx, node, build, plan)
		if err != nil {
			return "", err
		}
		*warnings = append(*warnings, ev.Warnings...)
		top, _, err := nix.Build(ctx, ev.Derivation, nil)
		return top, err
	}
	return cleanup, nil
}
