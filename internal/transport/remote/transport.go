package remote

import (
	"context"
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
	if err != nil {
		return t.wrap(fmt.Errorf("reach: %w", err))
	}
	state := strings.TrimSpace(out)
	switch state {
	case "initializing", "starting", "running", "degraded", "maintenance", "stopping":
		return nil
	}
	return t.wrap(fmt.Errorf("reach: the node answers but its systemd does not (systemctl is-system-running said %q): %w", state, deploybody.ErrSystemdUnanswered))
}

func (t *Transport) Run(ctx context.Context, argv []string, opts deploybody.RunOptions) (deploybody.RunResult, error) {
	res, err := Run(ctx, t.Runner, argv, opts)
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
	st, err := CopyClosure(ctx, t.Runner, storePath, t.logger())
	return st, t.wrap(err)
}

func (t *Transport) Switch(ctx context.Context, toplevel, action string, limit time.Duration) (deploybody.SwitchResult, error) {
	opts := t.SwitchOpts
	if opts.Log == nil {
		opts.Log = t.logger()
	}
	res, err := Switch(ctx, t.Runner, toplevel, action, limit, opts)
	return res, t.wrap(err)
}

func (t *Transport) FinalizeBoot(ctx context.Context, toplevel string) (int, error) {
	gen, err := FinalizeBoot(ctx, t.Runner, toplevel, t.logger())
	return gen, t.wrap(err)
}

func (t *Transport) RevertBoot(ctx context.Context, running string) error {
	return t.wrap(RevertBoot(ctx, t.Runner, running, t.logger()))
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
