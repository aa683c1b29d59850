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
func (t *Transport) exec(ctx context.Context, argv []string, prefix string, stdin io.Reader) (deploybody.RunResult, error) {
	phase := "run " + argv[0]
	path := t.nodePath(ctx)
	if prefix != "" {
		path = prefix + ":" + path
	}
	cmd := argv
	if stdin != nil {
		tmp, err := t.tempName("stdin")
		if err != nil {
			return deploybody.RunResult{}, t.errorf(phase, "%v", err)
		}
		if err := t.c.PushFile(ctx, t.instance, tmp, stdin, -1, incusapi.FileMode{Mode: 0o600}); err != nil {
			return deploybody.RunResult{}, t.classify(ctx, phase+" (stdin)", err)
		}
		defer t.removeFile(tmp)
		// $0 is the stdin file and "$@" is argv: data, never script text.
		cmd = append([]string{"/bin/sh", "-c", `exec "$@" < "$0"`, tmp}, argv...)
	}
	if res, handled, err := t.sessionExec(ctx, cmd, path); handled {
		t.viaSession.Add(1)
		if err != nil {
			return deploybody.RunResult{}, t.classify(ctx, phase, err)
		}
		return res, nil
	}
	t.viaRecorded.Add(1)
	res, err := t.c.Exec(ctx, t.instance, incusapi.ExecRequest{
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
	return deploybody.RunResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, nil
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
// `switch-to-configuration boot` (remote.FinalizeBoot).
func (t *Transport) FinalizeBoot(ctx context.Context, toplevel string) (int, error) {
	gen, err := remote.FinalizeBoot(ctx, t.runner(), toplevel, t.log())
	return gen, t.wrapErr("finalize boot entry", err)
}

// RevertBoot points the system profile and boot entry back at running
// (remote.RevertBoot).
func (t *Transport) RevertBoot(ctx context.Context, running string) error {
	return t.wrapErr("revert boot entry", remote.RevertBoot(ctx, t.runner(), running, t.log()))
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
