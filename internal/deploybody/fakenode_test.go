package deploybody

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// This file simulates a node for the engine's unit tests. It is a fake, not a lab
// container, because the faults these tests need cannot be produced on demand by a
// real node: a system bus severed at a chosen moment, a connection that drops during
// the switch, a node that answers none of the samples, a switch that never activates,
// a unit that loops exactly N times or cycles without restarting, a start job that
// never finishes, a host that refuses SETSCHEDULER. The transports' own tests and the
// lab acceptance tests run the same phases against real sshd, Incus and systemd.

// fakeClock only moves when the body sleeps, so no test waits for real. mu makes the
// clock and, through revertNode, the fake node one line of events: the confirming login
// runs beside the phases after the switch.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept time.Duration
}

// hold takes the clock's lock and returns its release.
func (c *fakeClock) hold() func() {
	c.mu.Lock()
	return c.mu.Unlock
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 10, 7, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	defer c.hold()()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	defer c.hold()()
	if err := ctx.Err(); err != nil {
		return err
	}
	if d > 0 {
		c.now = c.now.Add(d)
		c.slept += d
	}
	return nil
}

// behaviour is what a simulated unit does once started.
type behaviour int

const (
	neverStarted  behaviour = iota // inactive/dead, conditions never checked
	runs                           // active/running
	exitsOK                        // oneshot: ran, inactive/dead, Result=success
	fails                          // failed, Result=exit-code, status 1
	loops                          // Restart=always on a crashing program: NRestarts rises every `every`
	cycles                         // started anew every `every` (socket/timer activation), NRestarts stays
	spawnFails                     // failed before exec: ExecMainStatus=status
	resources                      // failed with Result=resources
	conditionSkip                  // inactive/dead, ConditionResult=no after a check
	startsAfter                    // activating with a start job for `delay`, then running
	stuck                          // activating with a start job forever, no state change
)

type unitSpec struct {
	b         behaviour
	status    int
	every     time.Duration
	stopAfter int // loops: after this many restarts the unit runs (0: loops forever)
	delay     time.Duration
	onRestart *unitSpec // what an explicit restart turns the unit into (nil: the same)
}

type fakeUnit struct {
	name       string
	spec       unitSpec
	since      time.Time
	activation int // bumps on every (re)activation, for invocation ids
	jobID      int
}

type call struct {
	at   time.Time
	what string // "run", "switch", "copy", "finalize", "revert", "reach"
	argv []string
	path []string
}

// fakeNode models the node's store, /run/current-system, boot profile and systemd.
type fakeNode struct {
	name     string
	clock    *fakeClock
	boot     time.Time
	running  string
	profile  string
	gen      int
	store    map[string]bool
	units    map[string]*fakeUnit
	closures map[string]map[string]unitSpec // toplevel → units it activates
	macs     []string
	// randomMACs are addresses of interfaces the kernel gave a random address.
	randomMACs []string
	nextJob    int

	ownPathEmpty         bool // the node's own PATH resolves nothing (no /usr/bin tools)
	busSevered           bool
	refuses              bool // the transport refuses the node (host key, credentials)
	severBusAtSwitch     bool
	unreachable          bool
	unreachableAtSwitch  bool          // stops answering right after the switch
	goneAfterSwitch      time.Duration // stops answering this long after the switch (0: never)
	stoppingAfterSwitch  bool          // systemd says "stopping" after the switch (the new system powers the node off)
	stopping             bool
	goneAt               time.Time
	switchNeverActivates bool
	switchReconnects     bool
	invalidFailedNames   []string // extra lines in list-units --state=failed
	// onCheck answers an operator check (the argv inside `timeout -k 2 Ns …`).
	onCheck func(argv []string) RunResult
	// unitDigests answers cmdUnitDigests (the running system's unit files and
	// drop-ins, by their name under etc/systemd/system); nil: exit 1.
	unitDigests map[string]string
	// notRestarting are the changed units the switch says it did not restart.
	notRestarting []string
	// closurePaths is what CopyClosure says the closure holds (nil: it does not say).
	closurePaths []string

	calls []call

	mu sync.Mutex // calls and the lock: the lock's heartbeat runs beside the phases
	// stateMu guards the node's store and units between a command and the copy: the
	// snapshot's read runs beside the push.
	stateMu   sync.Mutex
	lockToken string
	// lockTakenAtSwitch, if set, is the token of another run that takes the node's lock
	// while this run switches (as one that saw this run's heartbeat stop would).
	lockTakenAtSwitch string
	// lockAnswerLost, if set, is what every acquire returns after it took the lock on
	// the node (a cancel or a cut connection while the script ran).
	lockAnswerLost error

	// The lock-out revert (fakerevert_test.go).
	armNext      *RevertArm
	reverts      map[string]*fakeRevert
	revertTakes  time.Duration // how long a begun revert takes to switch back
	revertsFired int
	// switchLostFor: the session loses the switch (Switch returns switchLostErr) while
	// it goes on on the node this long; switchGoesOn is its toplevel until then.
	switchLostFor     time.Duration
	switchLostErr     error
	switchGoesOn      string
	switchGoesOnUntil time.Time
	atSwitch          func() // called when the switch starts (an interrupt)
	// New logins: refused until freshRefusedUntil, each reaching the node freshDelay
	// late; onFresh is told every attempt (an interrupt).
	freshAttempts     int
	freshRefused      bool // every new login is refused (a system that locks them out)
	freshRefusedUntil time.Time
	freshDelay        time.Duration
	onFresh           func(attempt int)
	// freshGate, if set, is called as a new login is dialled, before it reaches the
	// node (a login whose handshake takes a while).
	freshGate func()

	// connectedAt is when the run's own connection was made (its first command): a
	// login that old settles no revert whose switch ended after it.
	connectedAt time.Time
	// lockFreeAt, if set, is when lockFreeToken's holder releases the lock.
	lockFreeAt    time.Time
	lockFreeToken string
	// pendingFails makes the guard's pending fail (a node fault on the run's transport).
	pendingFails bool
	// onLockAcquired is told when a run takes the lock (an interrupt right after).
	onLockAcquired func()
	// lockScriptFails, if set, is what every run of the lock script gives.
	lockScriptFails *RunResult
	// rebootsAt, if set, is when the node reboots by itself (a power cut, a watchdog):
	// /run is emptied, the boot entry's system runs.
	rebootsAt time.Time

	// lockHolderLines are the holder lines the lock script prints after "held"/"lost"
	// ("" gives host=other, pid=1).
	lockHolderLines string

	// verdictRecord is the node's verdict record file (nil: none); recordFails makes
	// writing it fail.
	verdictRecord []byte
	recordFails   bool
	// lastGood is the node's last good record, as the lock's record operation writes it
	// (nil: none); lastGoodFails makes that write fail.
	lastGood      []byte
	lastGoodFails bool

	// boots is the boot loader and the reboots (fakereboot_test.go).
	boots fakeBoot

	// switch-to-configuration's exits (switch_exit.go), as switch-to-configuration-ng
	// gives them: activationFails makes the activation script fail (exit 2, the node
	// runs the new system all the same); initInterfaceChanges makes the switch exit
	// 100 before it activates anything; notNixOS makes it refuse the node (die() after
	// the /etc/NIXOS check: exit 2); otherSwitchUntil is when another switch (held by
	// otherSwitchUnit, PID 4242) releases switch-to-configuration's lock: until then
	// every switch exits 11 and changes nothing.
	activationFails      bool
	initInterfaceChanges bool
	notNixOS             bool
	otherSwitchUntil     time.Time
	otherSwitchUnit      string
	// entryAtRecord is the boot loader's default when the verdict record was written
	// (the lock's record operation); recorded says it was.
	entryAtRecord string
	recorded      bool
	// pushedRoot is the pushed closure's GC root (PushedRoot): set by the copy,
	// released by FinalizeBoot or the run's end.
	pushedRoot string
}

func newFakeNode(clock *fakeClock) *fakeNode {
	return &fakeNode{
		name:     "fedi-n1",
		clock:    clock,
		boot:     clock.now.Add(-time.Hour),
		store:    map[string]bool{},
		units:    map[string]*fakeUnit{},
		closures: map[string]map[string]unitSpec{},
		macs:     []string{"00:16:3e:00:00:01"},
		gen:      1,
	}
}

func (n *fakeNode) mono(t time.Time) uint64 { return uint64(t.Sub(n.boot) / time.Microsecond) }

func (n *fakeNode) setUnit(name string, spec unitSpec) {
	n.nextJob++
	u := n.units[name]
	if u == nil {
		u = &fakeUnit{name: name}
		n.units[name] = u
	}
	u.spec = spec
	u.since = n.clock.now
	u.activation++
	u.jobID = n.nextJob
}

func (n *fakeNode) state(u *fakeUnit) judge.UnitState {
	now := n.clock.now
	elapsed := now.Sub(u.since)
	s := judge.UnitState{ID: u.name, LoadState: "loaded", ConditionResult: "yes", ConditionTimestampMono: n.mono(u.since),
		FragmentPath: "/etc/systemd/system/" + u.name}
	invocation := func(k int) string { return fmt.Sprintf("%x%04x%04x", len(u.name), u.activation, k) }
	switch u.spec.b {
	case neverStarted:
		s.ActiveState, s.SubState, s.Result, s.ConditionResult, s.ConditionTimestampMono = "inactive", "dead", "success", "no", 0
	case runs:
		s.ActiveState, s.SubState, s.Result = "active", "running", "success"
		s.ExecMainStartMono, s.InvocationID = n.mono(u.since), invocation(0)
	case exitsOK:
		s.ActiveState, s.SubState, s.Result = "inactive", "dead", "success"
		s.ExecMainStartMono, s.ExecMainCode, s.InvocationID = n.mono(u.since), 1, invocation(0)
	case fails:
		s.ActiveState, s.SubState, s.Result = "failed", "failed", "exit-code"
		s.ExecMainStartMono, s.ExecMainCode, s.ExecMainStatus, s.InvocationID = n.mono(u.since), 1, 1, invocation(0)
	case loops:
		k := int(elapsed / u.spec.every)
		if u.spec.stopAfter > 0 && k >= u.spec.stopAfter {
			k = u.spec.stopAfter
			s.ActiveState, s.SubState, s.Result = "active", "running", "success"
		} else {
			s.ActiveState, s.SubState, s.Result = "activating", "auto-restart", "exit-code"
			s.ExecMainCode, s.ExecMainStatus = 1, 1
		}
		s.NRestarts = k
		s.ExecMainStartMono = n.mono(u.since.Add(time.Duration(k) * u.spec.every))
		s.InvocationID = invocation(k)
	case cycles:
		k := int(elapsed / u.spec.every)
		s.ActiveState, s.SubState, s.Result = "active", "running", "success"
		s.ExecMainStartMono = n.mono(u.since.Add(time.Duration(k) * u.spec.every))
		s.InvocationID = invocation(k)
	case spawnFails:
		s.ActiveState, s.SubState, s.Result = "failed", "failed", "exit-code"
		s.ExecMainStartMono, s.ExecMainCode, s.ExecMainStatus, s.InvocationID = n.mono(u.since), 1, u.spec.status, invocation(0)
	case resources:
		s.ActiveState, s.SubState, s.Result, s.InvocationID = "failed", "failed", "resources", invocation(0)
	case conditionSkip:
		// As systemd 252 on the lab nodes shows it: the skipped unit was garbage-collected,
		// so nothing but ConditionResult=no remains; only the journal tells the skip.
		s.ActiveState, s.SubState, s.Result, s.ConditionResult, s.ConditionTimestampMono = "inactive", "dead", "success", "no", 0
	case startsAfter:
		if elapsed < u.spec.delay {
			s.ActiveState, s.SubState, s.Result = "activating", "start", "success"
		} else {
			s.ActiveState, s.SubState, s.Result = "active", "running", "success"
			s.ExecMainStartMono, s.InvocationID = n.mono(u.since.Add(u.spec.delay)), invocation(0)
		}
	case stuck:
		s.ActiveState, s.SubState, s.Result = "activating", "start", "success"
	}
	return s
}

func (n *fakeNode) hasStartJob(u *fakeUnit) bool {
	s := n.state(u)
	return s.ActiveState == "activating" && s.SubState == "start"
}

func (n *fakeNode) record(c call) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c.at = n.clock.now
	n.calls = append(n.calls, c)
	n.bootIfDue()
	n.advance()
}

func (n *fakeNode) callsOf(what string) []call {
	var out []call
	for _, c := range n.calls {
		if c.what == what {
			out = append(out, c)
		}
	}
	return out
}

// runsOf returns the remote commands whose argv starts with prefix.
func (n *fakeNode) runsOf(prefix ...string) []call {
	var out []call
	for _, c := range n.callsOf("run") {
		if len(c.argv) >= len(prefix) && strings.Join(c.argv[:len(prefix)], "\x00") == strings.Join(prefix, "\x00") {
			out = append(out, c)
		}
	}
	return out
}

// --- Transport ---

var errFakeUnreachable = fmt.Errorf("fedi-n1: dial tcp 127.0.0.1:2201: connection refused: %w", ErrUnreachable)

func (n *fakeNode) Node() string { return n.name }

func (n *fakeNode) isUnreachable() bool {
	return n.unreachable || (!n.goneAt.IsZero() && !n.clock.now.Before(n.goneAt)) || n.rebooting()
}

func (n *fakeNode) Reach(ctx context.Context) error {
	n.record(call{what: "reach"})
	n.mu.Lock()
	if n.connectedAt.IsZero() {
		n.connectedAt = n.clock.now
	}
	n.mu.Unlock()
	if n.refuses {
		return fmt.Errorf("ssh root@127.0.0.1:2201: host key SHA256:abc is not the pinned key (%w)", ErrRefused)
	}
	if n.isUnreachable() {
		return errFakeUnreachable
	}
	if n.busSevered {
		// As the SSH and Incus transports report it: the command ran, systemd is silent.
		return fmt.Errorf("reach: systemctl is-system-running said \"offline\": %w", ErrSystemdUnanswered)
	}
	return nil
}

func (n *fakeNode) Close() error { return nil }

func (n *fakeNode) CopyClosure(ctx context.Context, storePath string) (CopyStats, error) {
	n.stateMu.Lock()
	defer n.stateMu.Unlock()
	n.record(call{what: "copy", argv: []string{storePath}})
	if n.isUnreachable() {
		return CopyStats{}, errFakeUnreachable
	}
	n.pushedRoot = storePath // the first round trip of the copy (remote.RootAndMissingPaths)
	missing := 1
	if n.store[storePath] {
		missing = 0
	}
	stats := CopyStats{PathsTotal: 3, PathsMissing: missing, BytesSent: int64(missing) * 1024}
	if n.closurePaths != nil {
		stats.Closure = n.closurePaths
		for _, p := range n.closurePaths {
			if !n.store[p] {
				stats.Sent = append(stats.Sent, p)
			}
			n.store[p] = true
		}
	}
	n.store[storePath] = true
	return stats, nil
}

func (n *fakeNode) Switch(ctx context.Context, toplevel, action string, limit time.Duration) (SwitchResult, error) {
	n.record(call{what: "switch", argv: []string{toplevel, action, limit.String()}})
	if n.isUnreachable() {
		return SwitchResult{}, errFakeUnreachable
	}
	if !n.store[toplevel] {
		return SwitchResult{ExitCode: 1, Stderr: toplevel + ": No such file or directory"}, nil
	}
	if n.otherSwitchHolds() {
		return SwitchResult{ExitCode: switchExitLocked, Stderr: "Could not acquire lock\n"}, nil
	}
	if n.notNixOS {
		return SwitchResult{ExitCode: 2, Stderr: "This is not a NixOS installation!\n"}, nil
	}
	if action == "boot" {
		return n.bootSwitch(toplevel), nil
	}
	if n.initInterfaceChanges {
		n.armAtSwitch(n.clock.now)
		return SwitchResult{ExitCode: switchExitNeedsReboot, Stderr: "Warning: the new NixOS configuration has an ‘init’ that is\nincompatible with the current configuration.  The new configuration\nwon't take effect until you reboot the system.\n"}, nil
	}
	if msg := n.boots.refuse[toplevel]; msg != "" {
		n.armAtSwitch(n.clock.now)
		return SwitchResult{ExitCode: 1, Stderr: msg}, nil
	}
	if n.lockTakenAtSwitch != "" {
		n.mu.Lock()
		n.lockToken = n.lockTakenAtSwitch
		n.mu.Unlock()
	}
	defer func() {
		n.busSevered = n.busSevered || n.severBusAtSwitch
		n.unreachable = n.unreachable || n.unreachableAtSwitch
		n.stopping = n.stopping || n.stoppingAfterSwitch
		if n.goneAfterSwitch > 0 {
			n.goneAt = n.clock.now.Add(n.goneAfterSwitch)
		}
	}()
	if n.atSwitch != nil {
		n.atSwitch()
	}
	if n.switchLostFor > 0 {
		n.switchGoesOn, n.switchGoesOnUntil = toplevel, n.clock.now.Add(n.switchLostFor)
		n.armAtSwitch(n.switchGoesOnUntil)
		return SwitchResult{}, n.switchLostErr
	}
	n.armAtSwitch(n.clock.now)
	if n.switchNeverActivates {
		return SwitchResult{ExitCode: 1, Stderr: "error: activation script failed", Reconnected: n.switchReconnects}, nil
	}
	n.running = toplevel
	if action == "switch" {
		n.boots.entry = toplevel // GRUB-like: the switch's argument is the default entry at once
	}
	names := make([]string, 0, len(n.closures[toplevel]))
	for name := range n.closures[toplevel] {
		names = append(names, name)
	}
	sort.Strings(names)
	var failed []string
	for _, name := range names {
		n.setUnit(name, n.closures[toplevel][name])
		if n.state(n.units[name]).ActiveState == "failed" {
			failed = append(failed, name)
		}
	}
	if n.activationFails {
		return SwitchResult{ExitCode: 2, Stderr: "activating the configuration...\nsetting up /etc...\nsops-install-secrets: cannot read /run/secrets.d/age-keys.txt: no such file or directory\nActivation script snippet 'setupSecrets' failed (1)\nFailed to run activate script\n", Reconnected: n.switchReconnects}, nil
	}
	// What switch-to-configuration says before its result: the changed units it did
	// not restart, and a re-executed systemd.
	said := ""
	if len(n.notRestarting) > 0 {
		said += "NOT restarting the following changed units: " + strings.Join(n.notRestarting, ", ") + "\n"
	}
	if n.boots.reexec[toplevel] {
		said += systemdReexecuted + "\n"
	}
	if len(failed) > 0 {
		return SwitchResult{ExitCode: 4, Stderr: said + "warning: the following units failed: " + strings.Join(failed, ", "), Reconnected: n.switchReconnects}, nil
	}
	return SwitchResult{Stderr: said, Reconnected: n.switchReconnects}, nil
}

// otherSwitchHolds says whether another switch holds switch-to-configuration's lock now.
func (n *fakeNode) otherSwitchHolds() bool {
	return !n.otherSwitchUntil.IsZero() && n.clock.now.Before(n.otherSwitchUntil)
}

func (n *fakeNode) FinalizeBoot(ctx context.Context, toplevel string, limit time.Duration) (int, error) {
	n.record(call{what: "finalize", argv: []string{toplevel}})
	if n.isUnreachable() {
		return 0, errFakeUnreachable
	}
	if n.profile != toplevel {
		n.gen++
		n.profile = toplevel
	}
	if n.otherSwitchHolds() {
		return 0, &SwitchExitError{Action: "boot", Toplevel: toplevel, Result: SwitchResult{ExitCode: switchExitLocked, Stderr: "Could not acquire lock\n"}}
	}
	n.boots.entry = toplevel // its detached switch-to-configuration boot
	n.boots.pinned = ""      // ReleaseBootPin
	if n.pushedRoot == toplevel {
		n.pushedRoot = "" // ReleasePushedRootScript
	}
	return n.gen, nil
}

func (n *fakeNode) RevertBoot(ctx context.Context, running string, limit time.Duration) error {
	n.record(call{what: "revert", argv: []string{running}})
	if n.isUnreachable() {
		return errFakeUnreachable
	}
	n.profile = running
	n.boots.entry = running // its switch-to-configuration boot
	n.boots.pinned = ""     // ReleaseBootPin
	return nil
}

// resolves says whether a command other than the transport's sh can be found.
func (n *fakeNode) resolves(path []string) bool {
	for _, dir := range path {
		if !n.ownPathEmpty && (dir == "/usr/bin" || dir == "/bin") {
			return true
		}
		if dir == "/run/current-system/sw/bin" && n.running != "" {
			return true
		}
		if top, ok := strings.CutSuffix(dir, "/sw/bin"); ok && n.store[top] {
			return true
		}
	}
	return false
}

func (n *fakeNode) Run(ctx context.Context, argv []string, opts RunOptions) (RunResult, error) {
	n.stateMu.Lock()
	defer n.stateMu.Unlock()
	n.record(call{what: "run", argv: append([]string{}, argv...), path: append([]string{}, opts.Path...)})
	if n.isUnreachable() {
		return RunResult{}, errFakeUnreachable
	}
	n.mu.Lock()
	if n.connectedAt.IsZero() {
		n.connectedAt = n.clock.now // the run's connection is made at its first command
	}
	n.mu.Unlock()
	if len(argv) == 0 {
		return RunResult{ExitCode: 127}, nil
	}
	if n.boots.rebootLost && len(argv) > 2 && argv[2] == rebootScript {
		// The command never reached the node: the connection broke as it was sent.
		return RunResult{}, fmt.Errorf("ssh root@127.0.0.1:2201: connection reset by peer: %w", ErrUnreachable)
	}
	if res, ok := n.rebootCall(argv); ok {
		return res, nil
	}
	if argv[0] == "sh" && len(argv) >= 5 && argv[2] == records.LockScript {
		if n.lockScriptFails != nil {
			return *n.lockScriptFails, nil
		}
		res := n.lockCall(argv[4:], opts.Stdin)
		if argv[4] == "acquire" && n.lockAnswerLost != nil {
			return RunResult{}, n.lockAnswerLost // the lock is taken; its answer never arrives
		}
		return res, nil
	}
	if argv[0] == "sh" && len(argv) >= 5 && argv[2] == records.RevertGuardScript {
		return n.guardCall(argv[4:], time.Time{}), nil // over the run's own connection
	}
	if argv[0] == "sh" && len(argv) == 6 && argv[2] == records.WriteRecordScript && argv[4] == records.VerdictRecordFile {
		if n.recordFails {
			return RunResult{ExitCode: 1, Stderr: []byte("mkdir: cannot create directory '/var/lib/fediversity-deploy': Read-only file system\n")}, nil
		}
		n.verdictRecord = append([]byte(nil), opts.Stdin...)
		n.entryAtRecord, n.recorded = n.boots.entry, true
		return RunResult{}, nil
	}
	if argv[0] == "sh" && len(argv) == 6 && argv[2] == records.ReadRecordScript && argv[4] == records.VerdictRecordFile {
		if n.verdictRecord == nil {
			return RunResult{ExitCode: 3}, nil
		}
		return RunResult{Stdout: n.verdictRecord}, nil
	}
	if argv[0] == "sh" && len(argv) == 5 && argv[2] == switchLockHolderScript && argv[4] == SwitchLockFile {
		if n.otherSwitchHolds() {
			unit := n.otherSwitchUnit
			if unit == "" {
				unit = "-"
			}
			return RunResult{Stdout: []byte("held 4242 " + unit + " switch-to-confi\n")}, nil
		}
		return RunResult{Stdout: []byte("free\n")}, nil
	}
	if argv[0] == "sh" && len(argv) == 6 && argv[2] == ReleasePushedRootScript {
		if n.pushedRoot == argv[5] {
			n.pushedRoot = ""
		}
		return RunResult{}, nil
	}
	if argv[0] == "sh" && len(argv) == 3 && argv[2] == hardwareAddressScript {
		// What sysfs and `ip -o link` print: the NICs' addresses are their permanent
		// ones (addr_assign_type 0); randomMACs are a veth's, made up by the kernel (1).
		var b strings.Builder
		b.WriteString("sys lo 00:00:00:00:00:00 0\n")
		for i, mac := range n.macs {
			fmt.Fprintf(&b, "sys eth%d %s 0\n", i, mac)
		}
		for i, mac := range n.randomMACs {
			fmt.Fprintf(&b, "sys veth%d %s 1\n", i, mac)
		}
		b.WriteString("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n")
		return RunResult{Stdout: []byte(b.String())}, nil
	}
	if argv[0] == "sh" && len(argv) == 3 && argv[2] == cmdUnitDigests[2] {
		if n.unitDigests == nil {
			return RunResult{ExitCode: 1}, nil
		}
		var b strings.Builder
		for name, sum := range n.unitDigests {
			fmt.Fprintf(&b, "%s  %s\n", sum, name)
		}
		return RunResult{Stdout: []byte(b.String())}, nil
	}
	if !n.resolves(opts.Path) {
		return RunResult{ExitCode: 127, Stderr: []byte("sh: 1: " + argv[0] + ": not found")}, nil
	}
	switch {
	case len(argv) == 3 && argv[0] == "readlink" && argv[1] == "-f" && argv[2] == "/run/current-system":
		if n.running == "" {
			return RunResult{Stdout: []byte("/run/current-system\n")}, nil
		}
		return RunResult{Stdout: []byte(n.running + "\n")}, nil
	case argv[0] == "systemctl":
		return n.systemctl(argv[1:]), nil
	case argv[0] == "journalctl":
		return n.journal(argv[len(argv)-1]), nil
	case argv[0] == "timeout" && len(argv) > 4 && n.onCheck != nil:
		return n.onCheck(argv[4:]), nil
	}
	return RunResult{ExitCode: 127, Stderr: []byte(argv[0] + ": not found")}, nil
}

func (n *fakeNode) systemctl(args []string) RunResult {
	if n.busSevered {
		res := RunResult{ExitCode: 1, Stderr: []byte("Failed to connect to bus: No such file or directory\n")}
		if len(args) > 0 && args[0] == "is-system-running" {
			res.Stdout = []byte("offline\n")
		}
		return res
	}
	switch args[0] {
	case "show":
		if len(args) == 3 { // show -p <props>: the manager itself
			return n.managerShow()
		}
		var blocks []string
		units := args[4:] // show -p <props> -- units…
		for _, name := range units {
			var s judge.UnitState
			if u, ok := n.units[name]; ok {
				s = n.state(u)
			} else {
				s = judge.UnitState{ID: name, LoadState: "not-found", ActiveState: "inactive", SubState: "dead"}
			}
			blocks = append(blocks, renderShowBlock(s))
		}
		return RunResult{Stdout: []byte(strings.Join(blocks, "\n"))}
	case "list-units":
		var b strings.Builder
		for _, name := range n.sortedUnitNames() {
			if n.state(n.units[name]).ActiveState == "failed" {
				fmt.Fprintf(&b, "%s loaded failed failed %s\n", name, name)
			}
		}
		for _, bad := range n.invalidFailedNames {
			fmt.Fprintf(&b, "%s loaded failed failed bad\n", bad)
		}
		return RunResult{Stdout: []byte(b.String())}
	case "list-jobs":
		var b strings.Builder
		for _, name := range n.sortedUnitNames() {
			if u := n.units[name]; n.hasStartJob(u) {
				fmt.Fprintf(&b, "%d %s start running\n", u.jobID, name)
			}
		}
		return RunResult{Stdout: []byte(b.String())}
	case "is-system-running":
		res := RunResult{Stdout: []byte(n.systemState() + "\n")}
		if string(res.Stdout) != "running\n" {
			res.ExitCode = 1
		}
		return res
	case "restart":
		for _, name := range args[2:] { // restart --no-block -- units…
			if name == "--" {
				continue
			}
			u, ok := n.units[name]
			if !ok {
				return RunResult{ExitCode: 5, Stderr: []byte("Failed to restart " + name + ": Unit " + name + " not found.")}
			}
			spec := u.spec
			if spec.onRestart != nil {
				spec = *spec.onRestart
			}
			n.setUnit(name, spec)
		}
		return RunResult{}
	}
	return RunResult{ExitCode: 1, Stderr: []byte("Unknown command verb " + args[0])}
}

// systemState is what systemd says of itself: stopping, degraded (a unit failed) or
// running.
func (n *fakeNode) systemState() string {
	if n.stopping {
		return "stopping"
	}
	for _, u := range n.units {
		if n.state(u).ActiveState == "failed" {
			return "degraded"
		}
	}
	return "running"
}

// managerShow answers `systemctl show -p SystemState,NFailedUnits,NJobs` (no unit: the
// manager's own properties, in systemd's order), counting what list-units and
// list-jobs would list.
func (n *fakeNode) managerShow() RunResult {
	failed, jobs := len(n.invalidFailedNames), 0
	for _, u := range n.units {
		if n.state(u).ActiveState == "failed" {
			failed++
		}
		if n.hasStartJob(u) {
			jobs++
		}
	}
	return RunResult{Stdout: []byte(fmt.Sprintf("NFailedUnits=%d\nNJobs=%d\nSystemState=%s\n", failed, jobs, n.systemState()))}
}

func (n *fakeNode) sortedUnitNames() []string {
	names := make([]string, 0, len(n.units))
	for name := range n.units {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// renderShowBlock prints a unit the way `systemctl show -p …` does (systemd's own
// property order, not the -p order).
func renderShowBlock(s judge.UnitState) string {
	return fmt.Sprintf("Result=%s\nNRestarts=%d\nExecMainStartTimestampMonotonic=%d\nExecMainCode=%d\nExecMainStatus=%d\nId=%s\nLoadState=%s\nActiveState=%s\nSubState=%s\nFragmentPath=%s\nConditionResult=%s\nConditionTimestampMonotonic=%d\nInvocationID=%s\n",
		s.Result, s.NRestarts, s.ExecMainStartMono, s.ExecMainCode, s.ExecMainStatus, s.ID, s.LoadState, s.ActiveState, s.SubState,
		s.FragmentPath, s.ConditionResult, s.ConditionTimestampMono, s.InvocationID)
}

// --- closures on the deployer ---

const (
	testToplevel  = "/nix/store/0000000000000000000000000000000a-nixos-system-fedi-n1-26.05"
	testPrevious  = "/nix/store/0000000000000000000000000000000b-nixos-system-fedi-n1-26.05"
	testEtcOutput = "/nix/store/0000000000000000000000000000000c-etc"
)

// closureSpec describes a toplevel on the deployer's disk.
type closureSpec struct {
	units     map[string]string   // unit file name → contents
	wants     map[string][]string // target → units it wants
	linkFiles map[string]string   // etc/systemd/network/<name> → contents
}

// writeClosure lays the toplevel out under root the way NixOS does: <toplevel>/etc is
// an absolute symlink into another store path, and wants entries are relative
// symlinks, so the body's chroot-style resolver is exercised.
func writeClosure(t *testing.T, root, toplevel string, c closureSpec) {
	t.Helper()
	etc := filepath.Join(root, testEtcOutput, "etc")
	units := filepath.Join(etc, "systemd/system")
	must(t, os.MkdirAll(units, 0o755))
	must(t, os.MkdirAll(filepath.Join(root, toplevel, "sw/bin"), 0o755))
	if _, err := os.Lstat(filepath.Join(root, toplevel, "etc")); err != nil {
		must(t, os.Symlink(testEtcOutput+"/etc", filepath.Join(root, toplevel, "etc")))
	}
	for name, text := range c.units {
		// A name may be a drop-in: "web.service.d/overrides.conf".
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(units, name)), 0o755))
		must(t, os.WriteFile(filepath.Join(units, name), []byte(text), 0o644))
	}
	for target, wanted := range c.wants {
		dir := filepath.Join(units, target+".wants")
		must(t, os.MkdirAll(dir, 0o755))
		for _, w := range wanted {
			must(t, os.Symlink("../"+w, filepath.Join(dir, w)))
		}
	}
	if len(c.linkFiles) > 0 {
		network := filepath.Join(etc, "systemd/network")
		must(t, os.MkdirAll(network, 0o755))
		for name, text := range c.linkFiles {
			must(t, os.WriteFile(filepath.Join(network, name), []byte(text), 0o644))
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

const plainService = "[Unit]\nDescription=test unit\n\n[Service]\nExecStart=/run/current-system/sw/bin/true\n"

// scenario ties a fake node, a closure on disk and options together.
type scenario struct {
	t     *testing.T
	clock *fakeClock
	node  *fakeNode
	root  string
	opts  Options
	logs  []string
	logMu sync.Mutex // the confirming login logs beside the phases
	// onLog, if set, is told every log line (phase, message) as the run logs it.
	onLog func(phase, message string)
}

// newScenario makes a node that runs testPrevious and a closure testToplevel that
// owns the given units (all wanted by multi-user.target) and activates them with the
// given behaviours.
func newScenario(t *testing.T, units map[string]unitSpec) *scenario {
	t.Helper()
	clock := newFakeClock()
	node := newFakeNode(clock)
	node.running, node.profile = testPrevious, testPrevious
	node.store[testPrevious] = true
	s := &scenario{t: t, clock: clock, node: node, root: t.TempDir()}
	files := map[string]string{}
	var wanted []string
	for name, spec := range units {
		files[name] = plainService
		// A unit that is never started is one nothing pulls in: a wanted unit is
		// always started (or skipped on a condition) by the switch.
		if spec.b != neverStarted {
			wanted = append(wanted, name)
		}
	}
	writeClosure(t, s.root, testToplevel, closureSpec{units: files, wants: map[string][]string{"multi-user.target": wanted}})
	node.closures[testToplevel] = units
	s.opts = Options{
		Toplevel:  testToplevel,
		Strict:    true,
		LocalRoot: s.root,
		Clock:     clock,
		Logger: LoggerFunc(func(_ context.Context, level Level, phase, message string, _ map[string]any) {
			s.logMu.Lock()
			s.logs = append(s.logs, string(level)+" "+phase+" "+message)
			s.logMu.Unlock()
			if s.onLog != nil {
				s.onLog(phase, message)
			}
		}),
	}
	return s
}

// addOwnedUnitFile writes an extra unit file into the closure (not activated).
func (s *scenario) addOwnedUnitFile(name, text string) {
	writeClosure(s.t, s.root, testToplevel, closureSpec{units: map[string]string{name: text}})
}

func (s *scenario) deploy() (*Result, error) {
	return Deploy(context.Background(), s.node, s.opts)
}

func (s *scenario) verdictOnly() (*Result, error) {
	return VerdictOnly(context.Background(), s.node, s.opts)
}

// deployErr asserts err is a DeployError of phase and returns it.
func deployErr(t *testing.T, err error, phase string) *DeployError {
	t.Helper()
	wantDeployErr(t, err, phase)
	var de *DeployError
	errors.As(err, &de)
	return de
}

// wantDeployErr is deployErr for callers that only check the error.
func wantDeployErr(t *testing.T, err error, phase string) {
	t.Helper()
	var de *DeployError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *DeployError", err, err)
	}
	if de.Phase != phase {
		t.Fatalf("error phase = %q, want %q: %v", de.Phase, phase, err)
	}
	if de.Node != "fedi-n1" || !strings.Contains(err.Error(), "fedi-n1") || de.Hint == "" {
		t.Fatalf("error must name the node and say what to do: %v", err)
	}
}

// journal answers `journalctl -o cat -u <unit>` the way systemd words a start.
func (n *fakeNode) journal(unit string) RunResult {
	u, ok := n.units[unit]
	if !ok {
		return RunResult{Stdout: []byte("-- No entries --\n")}
	}
	switch u.spec.b {
	case conditionSkip:
		return RunResult{Stdout: []byte(unit + " was skipped because of an unmet condition check (ConditionPathExists=/x).\n")}
	case neverStarted:
		return RunResult{Stdout: []byte("-- No entries --\n")}
	}
	return RunResult{Stdout: []byte("Starting " + unit + "...\nStarted " + unit + ".\n")}
}

// lockCall plays the node lock script (lock.go; its real behaviour is proven on lab
// nodes): one holder token, kept in lockToken.
func (n *fakeNode) lockCall(args []string, stdin []byte) RunResult {
	n.mu.Lock()
	defer n.mu.Unlock()
	op, token := args[0], args[1]
	holder := n.lockHolderLines
	if holder == "" {
		holder = "token=" + n.lockToken + "\nhost=other\npid=1"
	}
	takeover := op == "acquire" && len(args) >= 5 && args[4] != "" && args[4] == n.lockToken
	switch {
	case op == "acquire" && (n.lockToken == "" || n.lockToken == token || takeover):
		out := "acquired\n"
		if takeover {
			out += "took-over 1\n" + holder + "\n"
		}
		n.lockToken = token
		if n.onLockAcquired != nil {
			n.onLockAcquired()
		}
		return RunResult{Stdout: []byte(out)}
	case op == "acquire":
		return RunResult{Stdout: []byte("held 1\n" + holder + "\n")}
	case n.lockToken == "" && op == "release":
		return RunResult{Stdout: []byte("released\n")}
	case n.lockToken == "":
		return RunResult{Stdout: []byte("gone\n")} // the node's /run was emptied
	case n.lockToken != token:
		return RunResult{Stdout: []byte("lost\n" + holder + "\n")}
	case op == "release":
		n.lockToken = ""
		return RunResult{Stdout: []byte("released\n")}
	case op == "record":
		n.entryAtRecord, n.recorded = n.boots.entry, true
		// As the script: the heartbeat's answer, then each record's.
		out := "ok\n"
		if n.recordFails {
			out += "unrecorded mkdir: cannot create directory '/var/lib/fediversity-deploy': Read-only file system\n"
		} else {
			n.verdictRecord = append([]byte(nil), stdin...)
			out += "recorded\n"
		}
		if len(args) >= 7 && args[3] != "" {
			if n.lastGoodFails {
				out += "unpinned ln: failed to create symbolic link: Read-only file system\n"
			} else {
				n.lastGood = []byte(args[6])
				out += "pinned\n"
			}
		}
		return RunResult{Stdout: []byte(out)}
	}
	return RunResult{Stdout: []byte("ok\n")}
}

// lockCalls are the runs of the lock script.
func (n *fakeNode) lockCalls() []call {
	var out []call
	for _, c := range n.callsOf("run") {
		if len(c.argv) > 2 && c.argv[0] == "sh" && c.argv[2] == records.LockScript {
			out = append(out, c)
		}
	}
	return out
}
