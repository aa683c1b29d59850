package deploybody

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// runEnv is what every phase of one run reads and none changes: the way to the node,
// the options, the mode and the deployer's view of the closure's files. The only thing
// a phase adds through it is a warning (warn), in the order the phases give them.
// What the phases hand on to each other is not here: each phase takes it as arguments
// and returns it, and the step table (deploy.go) carries it from one to the next.
type runEnv struct {
	t           Transport
	o           Options
	verdictOnly bool
	// readOnly (VerdictReadOnly, verdict-only too) restarts no failed unit.
	readOnly bool
	tree     localTree
	// warnings are the run's warnings, shared with the Result the run returns.
	warnings *[]string
}

// hintedError carries what the operator can do about an error.
type hintedError struct {
	err  error
	hint string
}

func (h *hintedError) Error() string { return h.err.Error() }
func (h *hintedError) Unwrap() error { return h.err }

func withHint(err error, hint string) error { return &hintedError{err: err, hint: hint} }

// interruptedHint is what to do after a run that was interrupted (Ctrl-C, the
// operator's tool stopping it), not one whose time ran out.
const interruptedHint = "the run was interrupted; apply again: the next plan says what is unfinished on the node"

func (e *runEnv) asDeployError(phase string, err error) *DeployError {
	var deployErr *DeployError
	if errors.As(err, &deployErr) {
		return deployErr
	}
	hint := ""
	var hinted *hintedError
	if errors.As(err, &hinted) {
		hint = hinted.hint
		err = hinted.err
	}
	if hint == "" && errors.Is(err, ErrUnreachable) {
		hint = "check that the node is running and reachable with the transport's settings, then apply again"
	}
	switch {
	case hint != "":
	case errors.Is(err, context.DeadlineExceeded):
		hint = "the operation's time limit ran out; raise the resource's timeouts or the matching timing"
	case errors.Is(err, context.Canceled):
		hint = interruptedHint
	}
	return &DeployError{Node: e.o.Node, Phase: phase, Err: err, Hint: hint}
}

func (e *runEnv) log(ctx context.Context, level Level, phase, message string, fields map[string]any) {
	if fields == nil {
		fields = map[string]any{}
	}
	fields["node"] = e.o.Node
	e.o.Logger.Log(ctx, level, phase, message, fields)
}

func (e *runEnv) warn(ctx context.Context, phase, message string) {
	*e.warnings = append(*e.warnings, message)
	e.log(ctx, LevelWarn, phase, message, nil)
}

// searchPath is put before the node's PATH for every remote command, so a node whose
// own PATH resolves nothing still finds the closure's tools (toplevel may be "").
func searchPath(toplevel string) []string {
	var p []string
	if toplevel != "" {
		p = append(p, toplevel+"/sw/bin")
	}
	return append(p, "/run/current-system/sw/bin", "/usr/bin", "/bin")
}

// remote runs argv on the node with the closure's tools (of toplevel, if known) first
// in PATH.
func (e *runEnv) remote(ctx context.Context, toplevel string, argv ...string) (RunResult, error) {
	return e.t.Run(ctx, argv, RunOptions{Path: searchPath(toplevel)})
}

// remoteBatch runs cmds in one round trip when the transport is a BatchRunner, else one
// by one. The results are in the order of cmds; err is only for transport faults.
func (e *runEnv) remoteBatch(ctx context.Context, toplevel string, cmds ...[]string) ([]RunResult, error) {
	if b, ok := e.t.(BatchRunner); ok && len(cmds) > 1 {
		res, err := b.RunBatch(ctx, cmds, RunOptions{Path: searchPath(toplevel)})
		if err == nil && len(res) != len(cmds) {
			err = fmt.Errorf("the transport answered %d of a batch of %d commands", len(res), len(cmds))
		}
		return res, err
	}
	out := make([]RunResult, 0, len(cmds))
	for _, c := range cmds {
		res, err := e.remote(ctx, toplevel, c...)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// The reads the body sends to a node.
var (
	cmdReadRunning = []string{"readlink", "-f", "/run/current-system"}
	cmdListFailed  = []string{"systemctl", "list-units", "--state=failed", "--no-legend", "--plain", "--full"}
	cmdListJobs    = []string{"systemctl", "list-jobs", "--no-legend", "--no-pager"}
	cmdSystemState = []string{"systemctl", "is-system-running"}
	// cmdManagerState asks systemd itself (show with no unit) for its state and how
	// many failed units and jobs it has: a watch sample lists the failed units and the
	// jobs only when there are some (sampleCommands).
	cmdManagerState = []string{"systemctl", "show", "-p", "SystemState,NFailedUnits,NJobs"}
)

func cmdShow(units []string) []string {
	return append([]string{"systemctl", "show", "-p", strings.Join(judge.ShowProperties, ","), "--"}, units...)
}

// sleep waits d on the run's clock, or until ctx is done.
func (e *runEnv) sleep(ctx context.Context, d time.Duration) error { return e.o.Clock.Sleep(ctx, d) }

// describeSystem names a system in a message ("" is none).
func describeSystem(s string) string {
	if s == "" {
		return "no NixOS system"
	}
	return s
}
