package deploybody

import (
	"context"
	"fmt"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// revertGuard runs one operation of RevertGuardScript on the node: over a new
// connection of sr when sr is set (the arming run's confirming login), else over the
// run's own. ctx is not the run's: the node must be told also when the run was
// interrupted. One call is bounded like a lock operation.
func (e *runEnv) revertGuard(ctx context.Context, sr SelfReverter, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, lockCallLimit)
	defer cancel()
	argv := append([]string{"sh", "-c", records.RevertGuardScript, "sh"}, args...)
	opts := RunOptions{Path: records.ToolPath, Privileged: true} // the lock's directory is root's
	var res RunResult
	var err error
	if sr != nil {
		res, err = sr.RunFresh(ctx, argv, opts)
	} else {
		res, err = e.t.Run(ctx, argv, opts)
	}
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) == "" {
		return "", nodeScriptError("the revert guard", res)
	}
	return string(res.Stdout), nil
}

// nodeScriptError is the error of a node-side script (what: "the revert guard", "the
// lock script") that failed: the command it missed, when that was why (requireTools),
// else its exit code and first line of stderr.
func nodeScriptError(what string, res RunResult) error {
	stderr := string(res.Stderr)
	if i := strings.Index(stderr, "missing command "); i >= 0 && res.ExitCode == 127 {
		cmd, path, _ := strings.Cut(strings.TrimPrefix(judge.FirstLine(stderr[i:], ""), "missing command "), " ")
		path = strings.TrimSuffix(strings.TrimPrefix(path, "(PATH="), ")")
		return fmt.Errorf("%s on the node needs %s, which is not on its PATH (%s): %w", what, cmd, path, ErrMissingCommand)
	}
	return fmt.Errorf("%s on the node exited %d: %s", what, res.ExitCode, judge.FirstLine(stderr, "no output"))
}
