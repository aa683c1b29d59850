package deploybody

import (
	"context"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// Default timings (docs/design.md#timings). The provider exposes each one as a `timings` attribute.
const (
	DefaultNodeWait       = 2 * time.Minute
	DefaultSwitchTimeout  = 10 * time.Minute
	DefaultSettle         = 5 * time.Second
	DefaultWatch          = 10 * time.Second
	DefaultSampleInterval = 2 * time.Second
	DefaultStaleJob       = 60 * time.Second
	DefaultChainWait      = 5 * time.Minute
	DefaultNoProgress     = 60 * time.Second
	DefaultConfirmTimeout = 30 * time.Second
	DefaultLockWait       = 2 * time.Minute
)

// Timings are the waits and thresholds: one field per row of TimingTable. A zero field
// means "use the default"; call WithDefaults to fill them in.
type Timings struct {
	NodeWait       time.Duration // how long the node may take to answer before the deploy fails
	SwitchTimeout  time.Duration // time limit of switch-to-configuration on the node
	Settle         time.Duration // pause after the switch and the restarts, before the watch
	Watch          time.Duration // how long unit states are sampled for loops and cycling
	SampleInterval time.Duration // pause between two samples (watch, chain wait, node wait)
	StaleJob       time.Duration // a start job seen for longer than this is stale
	ChainWait      time.Duration // upper bound of the secret chain wait (and of a loop-budget extension)
	NoProgress     time.Duration // a chain member whose state does not change this long stops the wait
	ConfirmTimeout time.Duration // how long after the switch a new login may take before the node reverts itself
	LockWait       time.Duration // how long a run waits for another run's lock on the node
	// The k8s rollout's (the table holds every engine's timings; the body ignores these).
	RolloutWait time.Duration // how long the pod may take to become ready
	PullGrace   time.Duration // how long an image pull may fail before the wait stops
	// DegradedGrace is how long the pod may answer "degraded" before the wait stops.
	DegradedGrace time.Duration
	// RollbackWait bounds the wait for the previous image after a rollback.
	RollbackWait time.Duration
}

// WithDefaults returns t with every zero (or negative) field a node run reads set to
// its default (the k8s engine fills in its own two).
func (t Timings) WithDefaults() Timings {
	for _, row := range TimingTable {
		if row.NodeTiming() && *row.In(&t) <= 0 {
			*row.In(&t) = row.Default
		}
	}
	return t
}

// Level is the severity of a log line.
type Level string

// Log levels, matching tflog's Debug/Info/Warn.
const (
	LevelDebug Level = "debug"
	LevelInfo  Level = "info"
	LevelWarn  Level = "warn"
)

// Logger receives the body's progress. The provider adapts it to tflog; the body
// never logs secrets (it handles none).
type Logger interface {
	Log(ctx context.Context, level Level, phase, message string, fields map[string]any)
}

// LoggerFunc adapts a function to Logger.
type LoggerFunc func(ctx context.Context, level Level, phase, message string, fields map[string]any)

// Log calls f.
func (f LoggerFunc) Log(ctx context.Context, level Level, phase, message string, fields map[string]any) {
	f(ctx, level, phase, message, fields)
}

type discardLogger struct{}

func (discardLogger) Log(context.Context, Level, string, string, map[string]any) {}

// Clock is the body's sense of time. Tests inject a clock whose Sleep only advances
// Now, so no test sleeps for real.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx is done, whichever comes first, and returns ctx.Err()
	// in the second case.
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// ToplevelCache maps a node's evaluation key to the toplevel its build produced
// (nixeval.EvalCache is one). It is never a source of truth: Lookup ignores an entry
// whose toplevel the store does not hold (why says so), and a failed Store is a
// warning of the build phase only.
type ToplevelCache interface {
	Lookup(key string) (toplevel string, ok bool, why string)
	Store(key, toplevel string, now time.Time) error
}

// Options configure one run of the body.
type Options struct {
	// Node names the node in messages; empty means Transport.Node().
	Node string

	// Toplevel is a prebuilt system closure (a store path). When empty, Deploy takes it
	// from Cache (key CacheKey) or calls Build. VerdictOnly uses Toplevel, or the
	// system the node runs when Toplevel is empty; it never builds.
	Toplevel string
	// Build evaluates and builds the node's system and returns its toplevel.
	Build func(ctx context.Context) (toplevel string, err error)
	// Cache, if set, maps CacheKey to a toplevel so a node evaluated once (seed pass)
	// is not evaluated again (deploy pass). Never a source of truth.
	Cache ToplevelCache
	// CacheKey is the key of this node's evaluation (nixeval.MakeCacheKey).
	CacheKey string

	// Strict makes a failed unit (and a never-spawned unit the closure caused) fail the
	// run. Lenient (false) keeps every name in the verdict and turns the failure into a
	// warning.
	Strict bool

	// SelfRevert arms the node-side revert before the switch when the transport can
	// (SSH): a node that accepts no new login within Timings.ConfirmTimeout after the
	// switch puts itself back on its previous system (selfrevert.go).
	SelfRevert bool

	// Activation is how the node comes to run the new system: switch (""), boot (the
	// boot entry only), reboot-if-needed or reboot (activation.go).
	Activation Activation

	// SecretChain lists, in order, the units that bring the node's secrets up.
	SecretChain []string

	// LoopBudgets overrides per unit how many restarts a unit may take before its loop
	// counts against it. A unit file may declare its own with `X-LoopBudget=N` in
	// [Unit] or [Service]. The default budget is 0.
	LoopBudgets map[string]int

	// Timings are the waits and thresholds; zero fields take the defaults.
	Timings Timings

	// Logger receives progress; nil discards it.
	Logger Logger

	// LocalRoot is the directory that stands for / when the body reads the closure's
	// files on the deployer (units, link files). Empty means the deployer's own /.
	// Absolute symlinks inside the closure are resolved inside LocalRoot.
	LocalRoot string

	// Clock is the body's time source; nil means the wall clock.
	Clock Clock

	// Checks run on the node and Probes from the deployer after the settle; a failed
	// one fails a strict verdict and warns a lenient one (see ValidateChecks).
	Checks []judge.NodeCheck
	Probes []judge.Probe

	// LocalStore is the deployer's Nix store, read for the previous system's closure
	// when the summary of changes is made; nil leaves removed paths unknown.
	LocalStore LocalStore
	// Holder names this deployer in the node's lock (host, process); zero means
	// ThisProcess().
	Holder records.LockHolder
}

func (o Options) withDefaults(t Transport) Options {
	if o.Node == "" {
		o.Node = t.Node()
	}
	o.Timings = o.Timings.WithDefaults()
	if o.Logger == nil {
		o.Logger = discardLogger{}
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Holder.Host == "" && o.Holder.PID == 0 {
		o.Holder = records.ThisProcess()
	}
	return o
}
