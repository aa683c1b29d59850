package deploybody

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The timing table: every wait and threshold an engine reads, once, with its name,
// default, documentation and the objects whose runs read it. The provider's `timings`
// blocks and their docs, the `fediversity` command's roster keys and the defaults are
// all made from it; there is no second list.
//
// It lives in the deploy body, a leaf package every front end already imports, and so
// also holds the k8s rollout's four timings: the k8s engine takes its defaults from here
// (importing internal/k8s from here would pull the Kubernetes client into the command).

// The objects that read timings, as the provider names them.
const (
	ObjectNodeSwitch = "fediversity_node_switch"
	ObjectVerdict    = "fediversity_verdict"
	// ObjectNodeHealth is the data source that runs the verdict pass read-only: it
	// reads the verdict's timings.
	ObjectNodeHealth = "fediversity_node_health"
	ObjectK8sRollout = "fediversity_k8s_rollout"
)

// Defaults of the k8s rollout's timings (the k8s engine's, kept in this table).
const (
	DefaultRolloutWait   = 5 * time.Minute
	DefaultPullGrace     = 20 * time.Second
	DefaultDegradedGrace = 10 * time.Second
	DefaultRollbackWait  = 2 * time.Minute
)

// Timing is one row of the table.
type Timing struct {
	Name    string
	Default time.Duration
	Doc     string
	// UsedBy are the objects whose runs read it.
	UsedBy []string
	field  func(*Timings) *time.Duration
}

// TimingTable defines every timing once.
var TimingTable = []Timing{
	{"node_wait", DefaultNodeWait,
		"How long to wait for the node to answer (SSH or Incus exec) before the run fails as unreachable.",
		[]string{ObjectNodeSwitch, ObjectVerdict, ObjectNodeHealth}, func(t *Timings) *time.Duration { return &t.NodeWait }},
	{"switch_timeout", DefaultSwitchTimeout,
		"Time limit of `switch-to-configuration` on the node.",
		[]string{ObjectNodeSwitch}, func(t *Timings) *time.Duration { return &t.SwitchTimeout }},
	{"settle", DefaultSettle,
		"How long to let units settle after the switch and after restarts, before the watch.",
		[]string{ObjectNodeSwitch, ObjectVerdict, ObjectNodeHealth}, func(t *Timings) *time.Duration { return &t.Settle }},
	{"watch", DefaultWatch,
		"How long to watch units for restart loops and cycling after settling. Samples are taken on a fixed grid (every `sample_interval` from the start of the watch), so slow samples do not stretch the watch: it lasts this long plus one sample.",
		[]string{ObjectNodeSwitch, ObjectVerdict, ObjectNodeHealth}, func(t *Timings) *time.Duration { return &t.Watch }},
	{"sample_interval", DefaultSampleInterval,
		"Interval between unit-state samples during the watch. Each sample reads the failed units, the states of the units the verdict looks at, the job queue and the system state in one round trip.",
		[]string{ObjectNodeSwitch, ObjectVerdict, ObjectNodeHealth}, func(t *Timings) *time.Duration { return &t.SampleInterval }},
	{"stale_job", DefaultStaleJob,
		"A start job older than this in `systemctl list-jobs` is named stale.",
		[]string{ObjectNodeSwitch, ObjectVerdict, ObjectNodeHealth}, func(t *Timings) *time.Duration { return &t.StaleJob }},
	{"chain_wait", DefaultChainWait,
		"How long a deploy, and the verdict-only pass, wait for the secret chain (`secret_chain`) to come up.",
		[]string{ObjectNodeSwitch, ObjectVerdict, ObjectNodeHealth}, func(t *Timings) *time.Duration { return &t.ChainWait }},
	{"no_progress", DefaultNoProgress,
		"A secret chain member that shows no progress for this long stops the chain wait early, in a deploy and in the verdict-only pass.",
		[]string{ObjectNodeSwitch, ObjectVerdict, ObjectNodeHealth}, func(t *Timings) *time.Duration { return &t.NoProgress }},
	{"confirm_timeout", DefaultConfirmTimeout,
		"SSH deploys: how long after the switch a new SSH login may take. Before the switch the deploy arms a revert on the node; only a login over a new connection after the switch disarms it. If none is accepted in time, the node switches itself back to the system it ran before (and its boot entry), and the apply fails saying so. See `ssh.revert_on_lockout`.",
		[]string{ObjectNodeSwitch}, func(t *Timings) *time.Duration { return &t.ConfirmTimeout }},
	{"lock_wait", DefaultLockWait,
		"How long a deploy or verdict pass waits for the node's lock while another run (from this or another deployer) holds it, before it fails naming the holder. A lock whose holder stopped is taken over: once its heartbeat is a minute old, or at once when its process is proven gone on this very machine (same machine id, boot id and PID namespace; a shared host name proves nothing).",
		[]string{ObjectNodeSwitch, ObjectVerdict, ObjectNodeHealth}, func(t *Timings) *time.Duration { return &t.LockWait }},
	{"rollout_wait", DefaultRolloutWait,
		"k8s rollout: how long to wait for the pod to become ready before rolling back.",
		[]string{ObjectK8sRollout}, func(t *Timings) *time.Duration { return &t.RolloutWait }},
	{"pull_grace", DefaultPullGrace,
		"k8s rollout: how long ErrImagePull/ImagePullBackOff is tolerated before failing early.",
		[]string{ObjectK8sRollout}, func(t *Timings) *time.Duration { return &t.PullGrace }},
	{"degraded_grace", DefaultDegradedGrace,
		"k8s rollout: how long the pod's readiness probe may answer `degraded` (systemd is up and a unit failed) before the wait stops early and rolls back. Two probe periods rule out a reading in flight.",
		[]string{ObjectK8sRollout}, func(t *Timings) *time.Duration { return &t.DegradedGrace }},
	{"rollback_wait", DefaultRollbackWait,
		"k8s rollout: after a rollback, how long to wait for the pod of the previous image to be ready again (at most `rollout_wait`). A rollback not ready in time is named in the error; the next plan shows what the cluster runs.",
		[]string{ObjectK8sRollout}, func(t *Timings) *time.Duration { return &t.RollbackWait }},
}

// In is the timing's field in s.
func (t Timing) In(s *Timings) *time.Duration { return t.field(s) }

// Description is the timing's documentation with its default.
func (t Timing) Description() string {
	return fmt.Sprintf("%s Default `%s`.", t.Doc, DurationWords(t.Default))
}

// UsedByObject says whether object's runs read the timing.
func (t Timing) UsedByObject(object string) bool { return slices.Contains(t.UsedBy, object) }

// NodeTiming says whether a node run (a deploy or a verdict pass) reads it: the
// timings a roster may set.
func (t Timing) NodeTiming() bool {
	return t.UsedByObject(ObjectNodeSwitch) || t.UsedByObject(ObjectVerdict)
}

// LookupTiming is the row named name.
func LookupTiming(name string) (Timing, bool) {
	for _, t := range TimingTable {
		if t.Name == name {
			return t, true
		}
	}
	return Timing{}, false
}

// ParseTiming reads one timing as an operator wrote it. Zero is refused: an unset
// timing already means the default, and a zero wait would mean "do not wait", which no
// timing supports.
func ParseTiming(name, v string) (time.Duration, error) {
	def := "the default"
	if t, ok := LookupTiming(name); ok {
		def = DurationWords(t.Default)
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a positive duration: %s = %q is not a Go duration. Write it like \"30s\", \"2m\" or \"1h30m\"", v, name, v)
	}
	if d == 0 {
		return 0, fmt.Errorf("%q is not a positive duration: %s = %q is zero, and a timing must be positive; remove it to use the default (%s)", v, name, v, def)
	}
	return d, nil
}

// Merge returns s with every unset field taken from def.
func (s Timings) Merge(def Timings) Timings {
	out := s
	for _, t := range TimingTable {
		if *t.In(&out) == 0 {
			*t.In(&out) = *t.In(&def)
		}
	}
	return out
}

// DurationWords writes a default as an operator would: 2m, 90s, 1h30m.
func DurationWords(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
