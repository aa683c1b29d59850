package deploybody

import (
	"context"
	"errors"
	"time"
)

// Transport is what the deploy body needs from a way of reaching a node (docs/transports.md#transports). internal/transport/ssh and internal/transport/incus implement
// it; the body never imports them. Every method names the node in its errors.
type Transport interface {
	// Node is the node's name as the operator knows it (used in messages).
	Node() string

	// Reach returns nil when the node answers a trivial command (and, where the
	// transport can tell, its systemd answers). It returns an error wrapping
	// ErrUnreachable when the node cannot be reached at all.
	Reach(ctx context.Context) error

	// Run runs argv on the node. argv is never joined into a shell string without
	// quoting every element. opts.Path is put in front of the node's PATH so a node
	// whose own PATH resolves nothing still finds the closure's tools. A non-zero exit
	// is not an error: it is in RunResult.ExitCode. err is only for transport faults
	// (and wraps ErrUnreachable when the node cannot be reached).
	Run(ctx context.Context, argv []string, opts RunOptions) (RunResult, error)

	// CopyClosure makes the node's store hold the closure of storePath, sending only the
	// paths the node lacks. It returns what was sent.
	CopyClosure(ctx context.Context, storePath string) (CopyStats, error)

	// Switch runs `<toplevel>/bin/switch-to-configuration <action>` on the node detached
	// from the session (systemd-run or equivalent), bounded by limit. If the connection
	// drops while it runs, the transport reconnects and reads the result; it never
	// guesses. SwitchResult.ExitCode is switch-to-configuration's (switch_exit.go): 0 ok,
	// 2 the activation script failed, 4 some units failed, 11 another switch holds its
	// lock, 100 reboot needed. The deploy activates with `test`, which leaves the boot
	// loader alone (docs/activation.md#activation).
	Switch(ctx context.Context, toplevel, action string, limit time.Duration) (SwitchResult, error)

	// FinalizeBoot sets the system profile to toplevel (a new generation when it
	// differs) and runs `switch-to-configuration boot` detached like Switch (bounded by
	// limit), so the node boots toplevel; then it releases the pushed closure's GC root
	// (PushedRoot). A `boot` that exits non-zero is a *SwitchExitError. It returns the
	// generation number of the system profile afterwards.
	FinalizeBoot(ctx context.Context, toplevel string, limit time.Duration) (generation int, err error)

	// RevertBoot points the system profile and boot entry back at running (the system
	// the node runs now), its `boot` detached like Switch (bounded by limit).
	RevertBoot(ctx context.Context, running string, limit time.Duration) error

	// Close releases the connection. The body does not call it: the owner does.
	Close() error
}

// RunOptions tune one remote command.
type RunOptions struct {
	// Path entries to put before the node's PATH (e.g. <toplevel>/sw/bin).
	Path []string
	// Stdin, if not nil, is fed to the command.
	Stdin []byte
	// Privileged marks a command that changes the system (a unit restart): a transport
	// that deploys as an unprivileged user runs it with its privilege (sudo).
	Privileged bool
}

// RunResult is the outcome of one remote command.
type RunResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

// CopyStats says what a closure copy moved.
type CopyStats struct {
	PathsTotal   int   // paths in the closure
	PathsMissing int   // paths the node lacked and that were sent
	BytesSent    int64 // bytes of the export stream sent
	// Closure and Sent are the closure's paths and the ones sent (the answer of the
	// missing-path query), for the summary of what changed. Either may be nil when the
	// transport does not say.
	Closure []string
	Sent    []string
}

// SwitchResult is what switch-to-configuration reported.
type SwitchResult struct {
	ExitCode int
	Stdout   string
	Stderr   string
	// Reconnected is true when the connection dropped during the switch and the
	// result was read after reconnecting.
	Reconnected bool
}

// ErrUnreachable is wrapped by transport errors that mean the node did not answer.
var ErrUnreachable = errors.New("node unreachable")

// ErrSystemdUnanswered is wrapped by a Reach error when the node answered but its systemd
// did not (a severed system bus, systemd not PID 1): the node is reachable, its unit
// states are unread.
var ErrSystemdUnanswered = errors.New("systemd does not answer")

// ErrRefused is wrapped by transport errors that retrying cannot mend: the node refused
// its host key check or the credentials. The body fails at once instead of waiting for
// node_wait.
var ErrRefused = errors.New("refused")

// ErrMissingCommand is wrapped by the error of a node-side script that found a command
// it needs missing from the node's PATH: the error names the command.
var ErrMissingCommand = errors.New("a command is missing on the node")

// BatchRunner is implemented by transports that can run several commands in one round
// trip (one remote shell that frames each command's output). The body uses it for the
// reads it takes together (a watch sample, the snapshot); without it, the commands run
// one by one through Run. Each result is what Run would have returned for that
// command; err is only for transport faults.
type BatchRunner interface {
	RunBatch(ctx context.Context, cmds [][]string, opts RunOptions) ([]RunResult, error)
}

// GuardedBootFinalizer is implemented by transports that can run a guard on the node
// in the round trip that starts the boot entry's `boot`, before the system profile
// moves (FinalizeBoot's first round trip). The body hands it the lock script's record
// operation (confirmAndRecord): the lock's check and the verdict record then share the
// round trip of the boot entry, and the node still writes the record before the profile
// moves, and moves nothing when the lock is not this run's.
type GuardedBootFinalizer interface {
	// FinalizeBootGuarded runs guard on the node with guard.Stdin, then, only when the
	// guard's first line is "ok", does what FinalizeBoot does, in the same round trip.
	// It returns the guard's answer (its stdout, one element a line). An answer whose
	// first line is not "ok" (or a guard that exited non-zero: answer nil) started
	// nothing: generation 0, err nil. An answer lost to a transport fault is err
	// wrapping ErrGuardUnanswered: the caller knows nothing of what the node did.
	FinalizeBootGuarded(ctx context.Context, toplevel string, limit time.Duration, guard BootGuard) (answer []string, generation int, err error)
}

// BootGuard is a script FinalizeBootGuarded runs before the boot entry: sh -c Script
// sh Args…, with Path before the node's PATH and Stdin on its stdin. It must ignore
// arguments past its own.
type BootGuard struct {
	Script string
	Args   []string
	Path   []string
	Stdin  []byte
}

// ErrGuardUnanswered is wrapped by FinalizeBootGuarded's error when the round trip's
// answer was lost: whether the guard ran, and whether the boot started, is unknown.
var ErrGuardUnanswered = errors.New("the guard's answer was lost")
