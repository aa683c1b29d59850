package incus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
)

// runner adapts the transport to remote.Runner, so the shared switch, boot-entry and
// missing-path logic runs over Incus exec.
type runner struct{ t *Transport }

func (t *Transport) runner() remote.Runner { return runner{t} }

// Exec runs argv with the node's PATH. A non-nil stdin is pushed as a temporary file
// (streamed, not held in memory) and redirected into the command.
func (r runner) Exec(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	res, err := r.t.exec(ctx, argv, "", stdin)
	if err != nil {
		return -1, err
	}
	if stdout != nil {
		if _, err := stdout.Write(res.Stdout); err != nil {
			return res.ExitCode, err
		}
	}
	if stderr != nil {
		if _, err := stderr.Write(res.Stderr); err != nil {
			return res.ExitCode, err
		}
	}
	return res.ExitCode, nil
}

// exec is the one place commands are sent: argv as a list, PATH = prefix + the node's
// PATH, stdin (if any) through a temporary file. It goes through the deploy's exec
// session (session.go) when there is one, and with a recorded exec otherwise. A command
// the node cannot find is exit code 127 with a message on stderr, as a shell would
// report it.
func (t *Transport) exec(ctx context.Context, argv []string, prefix string, stdin io.Reader) (_ deploybody.RunResult, runErr error) {
	phase := "run " + argv[0]
	path := t.nodePath(ctx)
	if prefix != "" {
		path = prefix + ":" + path
	}
	cmd := argv
	if stdin != nil {
		tmp, err := t.stageStdin(ctx, phase, stdin)
		if err != nil {
			return deploybody.RunResult{}, err
		}
		defer func() {
			if runErr != nil { // the command may not have begun: remove its stdin here
				t.removeFile(tmp)
			}
		}()
		cmd = append([]string{"/bin/sh", "-c", stdinScript, tmp}, argv...)
	}
	res, handled, claim, err := t.sessionExec(ctx, cmd, path)
	if handled {
		t.viaSession.Add(1)
		if err != nil {
			return deploybody.RunResult{}, t.classify(ctx, phase, err)
		}
		return res, nil
	}
	if claim != "" {
		// The session may have run it: the recorded exec runs it only under its claim.
		cmd = claimedArgv(claim, cmd)
	}
	t.viaRecorded.Add(1)
	rec, err := t.c.Exec(ctx, t.instance, incusapi.ExecRequest{
		Command:     cmd,
		Environment: map[string]string{"PATH": path},
	})
	if err != nil {
		var ae *incusapi.APIError
		if errors.As(err, &ae) && strings.Contains(ae.Message, "Command not found") {
			return deploybody.RunResult{ExitCode: 127, Stderr: []byte(argv[0] + ": command not found (incus: " + ae.Message + ")\n")}, nil
		}
		return deploybody.RunResult{}, t.classify(ctx, phase, err)
	}
	res = deploybody.RunResult{ExitCode: rec.ExitCode, Stdout: rec.Stdout, Stderr: rec.Stderr}
	if claim != "" && claimTaken(res, claim) {
		return deploybody.RunResult{}, t.classify(ctx, phase, &sessionLostError{
			err: fmt.Errorf("the exec session ended before the command's start was seen, and its claim %s is made (or gone with /run)", claim)})
	}
	return res, nil
}

// stdinScript runs "$@" with the staged file $0 as its stdin, and unlinks the file as
// soon as it is open, before the command runs: however the command or the run ends
// (even by SIGKILL, which no trap sees), the secret is no longer on the node. $0 and
// "$@" are data, never script text.
const stdinScript = `exec <"$0" || exit 125; rm -f -- "$0"; exec "$@"`

// stageStdin pushes a command's stdin to a fresh file in stdinDir (mode 0600), making
// the directory ready first if the run has not yet.
func (t *Transport) stageStdin(ctx context.Context, phase string, stdin io.Reader) (string, error) {
	if err := t.prepareNode(ctx); err != nil {
		return "", t.classify(ctx, phase+" (stdin)", err)
	}
	tmp, err := tempName(stdinDir, "stdin")
	if err != nil {
		return "", t.errorf(phase, "%v", err)
	}
	if err := t.c.PushFile(ctx, t.instance, tmp, stdin, -1, incusapi.FileMode{Mode: 0o600}); err != nil {
		t.removeFile(tmp) // a push cut off midway may have left part of it
		return "", t.classify(ctx, phase+" (stdin)", err)
	}
	return tmp, nil
}

// nodeSetupScript makes a node ready for a run's commands, at the run's start:
//   - the stdin staging directory $1 (mode 0700), emptied of files that killed runs
//     left (older than a minute: a live run's file lives for milliseconds), and of
//     those older versions left in $2 (/var/tmp);
//   - with $3 and $4 (a session): the session's claims directory $4 (mode 0700)
//     under $3, and the removal of those of sessions gone for an hour.
const nodeSetupScript = `mkdir -p -m 0700 "$1" && chmod 0700 "$1" || exit 1
find "$1" "$2" -maxdepth 1 -type f -name 'fediversity-stdin-*' -mmin +1 -delete 2>/dev/null
if [ -n "$4" ]; then
  mkdir -p -m 0755 "$3" && mkdir -m 0700 "$4" || exit 1
  find "$3" -mindepth 1 -maxdepth 1 -type d -mmin +60 -exec rm -rf {} + 2>/dev/null
fi
exit 0`

// nodeSetupArgv runs nodeSetupScript; claimsRoot and claims are empty without a
// session.
func nodeSetupArgv(claimsRoot, claims string) []string {
	return []string{"/bin/sh", "-c", nodeSetupScript, "sh", stdinDir, importDir, claimsRoot, claims}
}

// prepareNode runs nodeSetupScript (without a session) unless the run did already.
func (t *Transport) prepareNode(ctx context.Context) error {
	if t.nodeReady.Load() || (t.session(ctx) != nil && t.nodeReady.Load()) {
		return nil // a session's opening made the node ready
	}
	res, err := t.exec(ctx, nodeSetupArgv("", ""), "", nil)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("making the stdin staging directory %s exited %d: %s", stdinDir, res.ExitCode, trim(res.Stderr))
	}
	t.nodeReady.Store(true)
	return nil
}

// wrapErr names the node in an error of the remote package; it keeps the chain, so
// deploybody.ErrUnreachable stays visible to errors.Is.
func (t *Transport) wrapErr(phase string, err error) error {
	if err == nil {
		return nil
	}
	if strings.HasPrefix(err.Error(), t.where()) {
		return err
	}
	return fmt.Errorf("%s: %s: %w", t.where(), phase, err)
}

func (t *Transport) log() remote.Logger {
	if t.logf == nil {
		return nil
	}
	node := t.node
	return func(format string, args ...any) { t.logf("node "+node+": "+format, args...) }
}

// RunBatch runs cmds as one command (remote.BatchCommand): a watch sample's reads cost
// one round trip instead of one each, through the exec session or, without one, one
// recorded exec (about 50 ms). It implements deploybody.BatchRunner.
func (t *Transport) RunBatch(ctx context.Context, cmds [][]string, opts deploybody.RunOptions) ([]deploybody.RunResult, error) {
	var runErr error
	out, err := remote.BatchVia(cmds, opts, func(argv []string, o deploybody.RunOptions) (deploybody.RunResult, error) {
		res, err := t.Run(ctx, argv, o)
		runErr = err // already names the node and keeps ErrUnreachable
		return res, err
	})
	if err != nil && runErr == nil {
		return nil, t.errorf("run batch", "%v", err)
	}
	return out, err
}

// Switch runs switch-to-configuration detached in a transient systemd unit with a
// RuntimeMaxSec of limit and polls its result with short execs, so it does not depend
// on any one API call staying open (remote.Switch).
func (t *Transport) Switch(ctx context.Context, toplevel, action string, limit time.Duration) (deploybody.SwitchResult, error) {
	opts := t.switchOpts
	if opts.Log == nil {
		opts.Log = t.log()
	}
	res, err := remote.Switch(ctx, t.runner(), toplevel, action, limit, opts)
	return res, t.wrapErr("switch", err)
}

// FinalizeBoot sets the system profile to toplevel and runs its
// `switch-to-configuration boot` detached, like the switch (remote.FinalizeBoot).
func (t *Transport) FinalizeBoot(ctx context.Context, toplevel string, limit time.Duration) (int, error) {
	gen, err := remote.FinalizeBoot(ctx, t.runner(), toplevel, limit, t.detachedOpts())
	return gen, t.wrapErr("finalize boot entry", err)
}

// FinalizeBootGuarded is FinalizeBoot with guard run first in its first round trip
// (remote.FinalizeBootGuarded).
func (t *Transport) FinalizeBootGuarded(ctx context.Context, toplevel string, limit time.Duration, guard deploybody.BootGuard) ([]string, int, error) {
	answer, gen, err := remote.FinalizeBootGuarded(ctx, t.runner(), toplevel, limit, t.detachedOpts(), guard)
	return answer, gen, t.wrapErr("finalize boot entry", err)
}

// RevertBoot points the system profile and boot entry back at running
// (remote.RevertBoot).
func (t *Transport) RevertBoot(ctx context.Context, running string, limit time.Duration) error {
	return t.wrapErr("revert boot entry", remote.RevertBoot(ctx, t.runner(), running, limit, t.detachedOpts()))
}

// detachedOpts are the switch's polling options, for the boot entry's detached runs.
func (t *Transport) detachedOpts() remote.SwitchOptions {
	opts := t.switchOpts
	if opts.Log == nil {
		opts.Log = t.log()
	}
	return opts
}

// Generation is the system profile generation the node's profile points at now.
func (t *Transport) Generation(ctx context.Context) (int, error) {
	gen, err := remote.Generation(ctx, t.runner())
	return gen, t.wrapErr("read generation", err)
}

func (t *Transport) logPrintf(format string, args ...any) {
	if l := t.log(); l != nil {
		l(format, args...)
	}
}
