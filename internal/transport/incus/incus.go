// Package incus is the deploy body's transport to a node that is an Incus instance,
// reached through the Incus REST API (internal/incusapi) over the unix socket or HTTPS.
// Commands run through one exec session per deploy (a shell on the node fed framed
// commands over the exec's websockets, session.go), or with an exec with recorded
// output when no session can be had; closures are streamed from the local export into
// the node's nix-store --import over an exec's stdin (copy.go); the switch runs detached in systemd
// (internal/transport/remote) and is polled with short execs, so it outlives any API
// call. It also offers native snapshots as a rollback point before a switch.
//
// It must not import the plugin framework.
package incus

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
)

// Config says which instance a transport reaches.
type Config struct {
	// Client is required. The provider builds one per configuration and every transport
	// shares it (and so its HTTP connections and TLS session): a transport never makes its own.
	Client   *incusapi.Client
	Instance string // the instance name (required)
	Project  string // the Incus project ("" = default)
	Node     string // the node's name for messages (defaults to Instance)

	// Log, if set, receives progress messages (copy sizes, switch polling). Never secrets.
	Log func(format string, args ...any)
	// Switch tunes the polling of the detached switch; zero values take the defaults.
	Switch remote.SwitchOptions
	// RecordedExecOnly runs every command with its own recorded exec instead of
	// through one exec session per transport (session.go): slower, for comparison.
	RecordedExecOnly bool
}

// Transport reaches one Incus instance. It implements deploybody.Transport.
type Transport struct {
	c        *incusapi.Client
	instance string
	project  string
	node     string

	logf       func(format string, args ...any)
	switchOpts remote.SwitchOptions

	pathOnce sync.Once
	basePath string // the PATH commands get after the caller's entries

	smu       sync.Mutex
	sess      *shellSession // the open exec session, if any
	sessOpens int           // sessions opened so far (bounded by maxSessionOpens)
	noSession bool          // Config.RecordedExecOnly
	// nodeReady: the node's staging directory for stdin exists and holds no leftovers
	// of killed runs (nodeSetupScript; run by the session's opening, or else before the
	// first stdin).
	nodeReady atomic.Bool

	// Commands run through a session and with a recorded exec, for the log and tests.
	viaSession, viaRecorded atomic.Int64

	// exportPaths writes the stream that adds paths to the node's store
	// (nixstore.AddToStoreStream); a lab test wraps it to cut the copy's stream after a
	// given number of bytes.
	exportPaths func(ctx context.Context, paths []string, w io.Writer) error
}

var (
	_ deploybody.Transport   = (*Transport)(nil)
	_ deploybody.BatchRunner = (*Transport)(nil)
)

// New returns a transport for cfg.
func New(cfg Config) (*Transport, error) {
	if cfg.Client == nil {
		return nil, errors.New("incus transport: no Incus client configured")
	}
	if cfg.Instance == "" {
		return nil, fmt.Errorf("incus transport for node %q: instance name is empty", cfg.Node)
	}
	node := cfg.Node
	if node == "" {
		node = cfg.Instance
	}
	return &Transport{
		c:        cfg.Client.WithProject(cfg.Project),
		instance: cfg.Instance,
		project:  cfg.Project,
		node:     node,

		logf:       cfg.Log,
		switchOpts: switchDefaults(cfg.Switch),
		noSession:  cfg.RecordedExecOnly,

		exportPaths: nixstore.AddToStoreStream,
	}, nil
}

// Node is the node's name.
func (t *Transport) Node() string { return t.node }

// Instance is the name of the node's Incus instance.
func (t *Transport) Instance() string { return t.instance }

// Close ends the transport's exec session, if one is open. The Incus client belongs to
// whoever built it (the provider's configuration), and other transports go on using it.
func (t *Transport) Close() error {
	t.closeSession()
	return nil
}

func (t *Transport) where() string {
	p := t.project
	if p == "" {
		p = "default"
	}
	return fmt.Sprintf("node %s (Incus instance %s, project %s)", t.node, t.instance, p)
}

// errorf formats an error naming the node and the phase.
func (t *Transport) errorf(phase, format string, a ...any) error {
	return fmt.Errorf("%s: %s: %w", t.where(), phase, fmt.Errorf(format, a...))
}

// unreachable wraps deploybody.ErrUnreachable with the node, the phase and the cause.
func (t *Transport) unreachable(phase string, cause error, hint string) error {
	return &unreachableError{msg: fmt.Sprintf("%s: %s: %v (%s)", t.where(), phase, cause, hint), cause: cause}
}

type unreachableError struct {
	msg   string
	cause error
}

func (e *unreachableError) Error() string { return e.msg }
func (e *unreachableError) Unwrap() []error {
	return []error{deploybody.ErrUnreachable, e.cause}
}

// classify turns a client error into an unreachable error when the daemon cannot be
// reached or the instance is gone or not running; other errors keep their text.
func (t *Transport) classify(ctx context.Context, phase string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %s: %w", t.where(), phase, err)
	}
	var te *incusapi.TransportError
	if errors.As(err, &te) {
		return t.unreachable(phase, err, "check that incusd is running and the socket or remote address is right")
	}
	// A not-found is asked of the instance itself before it is said to be missing: the
	// daemon answers 404 for an operation it dropped too (an exec whose websockets came
	// late), on an instance that runs.
	var ae *incusapi.APIError
	var lost *sessionLostError
	if errors.As(err, &ae) || errors.As(err, &lost) {
		st, serr := t.c.GetInstanceState(ctx, t.instance)
		if serr == nil && !st.Running() {
			return t.unreachable(phase, err, "the instance is "+strings.ToLower(st.Status)+"; start it with `incus start "+t.instance+"`")
		}
		if incusapi.IsNotFound(serr) {
			return t.unreachable(phase, err, "the instance does not exist in this project")
		}
	}
	return fmt.Errorf("%s: %s: %w", t.where(), phase, err)
}

// Reach checks that the instance runs and that its systemd answers
// `systemctl is-system-running` (any state it prints is an answer: starting, degraded…).
func (t *Transport) Reach(ctx context.Context) error {
	const phase = "reach"
	// The instance itself (not its /state, which incusd computes at some cost) says
	// whether it runs, and gives the PATH commands get: one request for both.
	inst, err := t.c.GetInstance(ctx, t.instance)
	if err != nil {
		return t.classify(ctx, phase, err)
	}
	t.pathOnce.Do(func() { t.basePath = instancePath(inst) })
	if !inst.Running() {
		return t.unreachable(phase, fmt.Errorf("instance is %s", inst.Status),
			"start it with `incus start "+t.instance+"` or let the deploy wait for it")
	}
	res, err := t.exec(ctx, []string{"systemctl", "is-system-running"}, "", nil)
	if err != nil {
		return err
	}
	// Any state systemd reports about itself is an answer (degraded, starting,
	// maintenance…); "offline", "unknown" or nothing means systemd itself did not answer.
	state := strings.TrimSpace(string(res.Stdout))
	switch state {
	case "", "offline", "unknown":
		// The instance ran the command, so it is reachable; only systemd is silent.
		return fmt.Errorf("node %s: %s: systemctl is-system-running said %q (exit %d, stderr %q): %w; the instance runs but its systemd does not answer: is systemd PID 1 in it, and has it finished booting?",
			t.node, phase, state, res.ExitCode, trim(res.Stderr), deploybody.ErrSystemdUnanswered)
	}
	return nil
}

// defaultPath is what incusd gives a command when the request sets no PATH, plus the
// places a NixOS system keeps its tools.
const defaultPath = incusapi.NodePath

// nodePath is the PATH the instance's own configuration gives commands
// (environment.PATH), or defaultPath.
func (t *Transport) nodePath(ctx context.Context) string {
	t.pathOnce.Do(func() {
		inst, err := t.c.GetInstance(ctx, t.instance)
		if err != nil {
			inst = nil
		}
		t.basePath = instancePath(inst)
	})
	return t.basePath
}

// instancePath is the PATH inst's configuration gives commands, or defaultPath.
func instancePath(inst *incusapi.Instance) string {
	if inst != nil {
		if p := inst.Config["environment.PATH"]; p != "" {
			return p
		}
	}
	return defaultPath
}

// Run runs argv on the node. argv goes to the daemon as a list and is never joined
// into a shell string. opts.Path goes in front of the node's PATH (set in the exec's
// environment, no shell involved). opts.Stdin, when set, is pushed as a temporary file
// and redirected into the command by /bin/sh, with the file name and argv passed as
// positional parameters (never in the script).
func (t *Transport) Run(ctx context.Context, argv []string, opts deploybody.RunOptions) (deploybody.RunResult, error) {
	if len(argv) == 0 {
		return deploybody.RunResult{}, t.errorf("run", "empty command")
	}
	for _, p := range opts.Path {
		if p == "" || strings.ContainsAny(p, ":\x00\n") {
			return deploybody.RunResult{}, t.errorf("run "+argv[0], "PATH entry %q is empty or holds ':' or a control character", p)
		}
	}
	var stdin io.Reader
	if opts.Stdin != nil {
		stdin = bytes.NewReader(opts.Stdin)
	}
	return t.exec(ctx, argv, strings.Join(opts.Path, ":"), stdin)
}

// Where files pushed to the node are staged. importDir (/var/tmp) held closure exports
// before copies were streamed, and stdin files of older versions: nodeSetupScript
// still clears the latter from it. A command's stdin (join
// tokens, kube tokens) goes to stdinDir on /run's tmpfs, in a directory only root can
// enter: it is never on a disk, so no snapshot or backup of the instance holds it,
// and a reboot ends it.
const (
	importDir = "/var/tmp"
	stdinDir  = "/run/fediversity-stdin"
)

// tempName is a fresh file name in dir on the node.
func tempName(dir, kind string) (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return dir + "/fediversity-" + kind + "-" + hex.EncodeToString(b[:]), nil
}

// removeFile deletes a temporary file on the node, with its own short deadline so a
// cancelled deploy still cleans up.
func (t *Transport) removeFile(path string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = t.c.DeleteFile(ctx, t.instance, path)
}

func trim(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// switchDefaults polls the detached switch every 250 ms unless told otherwise: an exec
// poll costs the node about a tenth of a second, and a shorter interval shortens every
// switch by up to the interval.
func switchDefaults(o remote.SwitchOptions) remote.SwitchOptions {
	if o.PollInterval <= 0 {
		o.PollInterval = 250 * time.Millisecond
	}
	return o
}
