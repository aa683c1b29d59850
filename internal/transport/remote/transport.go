package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// Transport implements deploybody.Transport for any Runner. Transports embed or wrap
// it and override what they do differently (e.g. Reach with their own dial check).
type Transport struct {
	NodeName string
	Runner   Runner
	Log      Logger
	// SwitchOpts tunes the detached switch polling.
	SwitchOpts SwitchOptions

	// revert is armed at the next Switch (ArmRevert).
	revert *deploybody.RevertArm
	// Sudo runs the commands that change the system through `sudo -n` (see sudo.go).
	Sudo        bool
	sudoChecked bool
}

var (
	_ deploybody.Transport   = (*Transport)(nil)
	_ deploybody.BatchRunner = (*Transport)(nil)
)

// NewTransport returns the deploybody.Transport of node over r. log may be nil.
func NewTransport(node string, r Runner, log Logger) *Transport {
	return &Transport{NodeName: node, Runner: r, Log: log}
}

func (t *Transport) Node() string { return t.NodeName }

// wrap names the node; the helpers' errors already name their phase.
func (t *Transport) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("node %s: %w", t.NodeName, err)
}

// Reach runs `systemctl is-system-running` on the node: any answer systemd gives
// (running, degraded, starting, …) means the node and its systemd answer; a transport
// fault means unreachable; "offline" or no answer means systemd does not answer.
func (t *Transport) Reach(ctx context.Context) error {
	out, err := runSys(ctx, t.Runner, nil, "/bin/sh", "-c", `systemctl is-system-running 2>&1; true`)
	if errors.Is(err, deploybody.ErrRefused) {
		return t.wrap(err) // the refusal says it all (host key, credentials)
	}
	if err != nil {
		return t.wrap(fmt.Errorf("reach: %w", err))
	}
	state := strings.TrimSpace(out)
	switch state {
	case "initializing", "starting", "running", "degraded", "maintenance", "stopping":
		return t.wrap(t.checkSudo(ctx))
	}
	return t.wrap(fmt.Errorf("reach: the node answers but its systemd does not (systemctl is-system-running said %q): %w", state, deploybody.ErrSystemdUnanswered))
}

func (t *Transport) Run(ctx context.Context, argv []string, opts deploybody.RunOptions) (deploybody.RunResult, error) {
	r := t.Runner
	if opts.Privileged {
		if err := t.checkSudo(ctx); err != nil {
			return deploybody.RunResult{}, t.wrap(err)
		}
		r = t.privileged()
	}
	res, err := Run(ctx, r, argv, opts)
	if err != nil {
		name := "(empty)"
		if len(argv) > 0 {
			name = argv[0]
		}
		return res, t.wrap(fmt.Errorf("run %s: %w", name, err))
	}
	return res, nil
}

func (t *Transport) CopyClosure(ctx context.Context, storePath string) (deploybody.CopyStats, error) {
	if err := t.checkSudo(ctx); err != nil {
		return deploybody.CopyStats{}, t.wrap(err)
	}
	st, err := CopyClosure(ctx, t.privileged(), storePath, t.logger())
	return st, t.wrap(err)
}

func (t *Transport) Switch(ctx context.Context, toplevel, action string, limit time.Duration) (deploybody.SwitchResult, error) {
	opts := t.SwitchOpts
	if opts.Log == nil {
		opts.Log = t.logger()
	}
	if err := t.checkSudo(ctx); err != nil {
		return deploybody.SwitchResult{}, t.wrap(err)
	}
	if t.revert != nil {
		opts.Revert, t.revert = t.revert, nil
	}
	res, err := Switch(ctx, t.privileged(), toplevel, action, limit, opts)
	return res, t.wrap(err)
}

// CanSelfRevert reports whether the node-side revert can be used: the runner must be
// able to open a new connection to disarm it.
func (t *Transport) CanSelfRevert() bool {
	_, ok := t.Runner.(FreshDialer)
	return ok
}

// ArmRevert arms the node-side revert at the next Switch (see selfrevert.go).
func (t *Transport) ArmRevert(arm deploybody.RevertArm) {
	t.revert = &arm
}

// RunFresh is Run over a new connection (a new login), closed afterwards.
func (t *Transport) RunFresh(ctx context.Context, argv []string, opts deploybody.RunOptions) (deploybody.RunResult, error) {
	var res deploybody.RunResult
	err := t.withFresh(func(r Runner) error {
		var e error
		res, e = Run(ctx, r, argv, opts)
		return e
	})
	return res, t.wrap(err)
}

func (t *Transport) withFresh(f func(Runner) error) error {
	fd, ok := t.Runner.(FreshDialer)
	if !ok {
		return errors.New("this transport cannot open a second connection")
	}
	r, err := fd.Fresh()
	if err != nil {
		return err
	}
	if c, ok := r.(io.Closer); ok {
		defer func() { _ = c.Close() }()
	}
	if t.Sudo {
		r = sudoRunner{inner: r} // the revert's guard and the lock are root's
	}
	return f(r)
}

func (t *Transport) FinalizeBoot(ctx context.Context, toplevel string, limit time.Duration) (int, error) {
	if err := t.checkSudo(ctx); err != nil {
		return 0, t.wrap(err)
	}
	gen, err := FinalizeBoot(ctx, t.privileged(), toplevel, limit, t.detachedOpts())
	return gen, t.wrap(err)
}

// FinalizeBootGuarded is FinalizeBoot with guard run first in its first round trip
// (deploybody.GuardedBootFinalizer).
func (t *Transport) FinalizeBootGuarded(ctx context.Context, toplevel string, limit time.Duration, guard deploybody.BootGuard) ([]string, int, error) {
	if err := t.checkSudo(ctx); err != nil {
		return nil, 0, t.wrap(err)
	}
	answer, gen, err := FinalizeBootGuarded(ctx, t.privileged(), toplevel, limit, t.detachedOpts(), guard)
	return answer, gen, t.wrap(err)
}

func (t *Transport) RevertBoot(ctx context.Context, running string, limit time.Duration) error {
	if err := t.checkSudo(ctx); err != nil {
		return t.wrap(err)
	}
	return t.wrap(RevertBoot(ctx, t.privileged(), running, limit, t.detachedOpts()))
}

// detachedOpts are the switch's polling options for the boot entry's detached runs.
func (t *Transport) detachedOpts() SwitchOptions {
	opts := t.SwitchOpts
	if opts.Log == nil {
		opts.Log = t.logger()
	}
	opts.Revert = nil
	return opts
}

// Close closes the Runner when it is an io.Closer.
func (t *Transport) Close() error {
	if c, ok := t.Runner.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (t *Transport) logger() Logger {
	if t.Log == nil {
		return nil
	}
	node := t.NodeName
	return func(format string, args ...any) { t.Log("node "+node+": "+format, args...) }
}
