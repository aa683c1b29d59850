package deploybody

import (
	"path"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// The fake node's boot loader and reboots, for the engine's activation tests. A fake
// because a node that never comes back after its reboot, or one whose boot loader
// ignores the new entry, cannot be produced on demand by a lab container; the lab
// tests (activation_lab_test.go) reboot real Incus containers.

// fakeBoot is the fake node's boot side.
type fakeBoot struct {
	entry  string            // the boot loader's default entry (switch-to-configuration boot)
	booted string            // /run/booted-system
	kernel map[string]string // toplevel → its kernel (absent: the same kernel as any other)
	// triggers: toplevel → its reboot-triggers (absent: the toplevel has none, as a
	// system built before NixOS wrote them).
	triggers map[string]map[string]string
	// inhibitors: toplevel → its switch-inhibitors (absent: none).
	inhibitors map[string]map[string]string
	refuse     map[string]string // toplevel → the stderr of a switch its pre-switch checks refuse
	// reexec: toplevel → its switch re-executes systemd (a new systemd), as
	// switch-to-configuration says it ("restarting systemd...").
	reexec  map[string]bool
	takes   time.Duration // how long a reboot takes (0: 10s)
	never   bool          // the node never comes back after a reboot
	ignores bool          // the boot loader ignores the new entry (boots the old system)
	marker  string        // /run/fediversity/reboot-pending
	until   time.Time     // the reboot's end, while it runs
	count   int           // reboots done
	// The Boot Loader Interface (boot_once.go): oneShot is a boot loader that boots an
	// entry once (bootctl, systemd-boot); once is the entry booted at the next boot
	// only (LoaderEntryOneShot), pinned the default a run pinned (LoaderEntryDefault,
	// BootPinFile). Entries are named after their toplevels.
	oneShot bool
	once    string
	pinned  string
	next    string // the system the boot under way runs (chooseBoot)
	// diesOnceUp: the booted system answers once, then powers the node off.
	diesOnceUp bool
	// rebootLost: the reboot command never reaches the node (the connection breaks).
	rebootLost bool
}

// chooseBoot is the boot loader at the start of a boot: the one-shot entry (read
// once, whether or not the boot then comes up), else the pinned default, else the
// default entry.
func (n *fakeNode) chooseBoot() {
	switch {
	case n.boots.once != "":
		n.boots.next, n.boots.once = n.boots.once, ""
	case n.boots.pinned != "":
		n.boots.next = n.boots.pinned
	default:
		n.boots.next = n.boots.entry
	}
}

func (n *fakeNode) rebooting() bool {
	return !n.boots.until.IsZero() && (n.boots.never || n.clock.now.Before(n.boots.until))
}

// bootIfDue ends a reboot whose time is up: /run is emptied (the lock, the marker),
// the boot entry's system runs and its units start as its switch would start them.
// Called with n.mu held.
func (n *fakeNode) bootIfDue() {
	if n.boots.until.IsZero() || n.rebooting() {
		return
	}
	n.boots.until, n.boots.marker, n.lockToken = time.Time{}, "", ""
	n.boots.count++
	next := n.boots.next
	if n.boots.ignores || next == "" {
		next = n.running
	}
	n.running, n.boots.booted = next, next
	n.units = map[string]*fakeUnit{}
	for name, spec := range n.closures[next] {
		n.setUnit(name, spec)
	}
}

// bootSwitch is switch-to-configuration boot.
func (n *fakeNode) bootSwitch(toplevel string) SwitchResult {
	n.boots.entry = toplevel
	return SwitchResult{Stderr: "boot entry set to " + toplevel}
}

func (n *fakeNode) kernelOf(toplevel string) string {
	if k, ok := n.boots.kernel[toplevel]; ok {
		return k
	}
	return "/nix/store/00000000000000000000000000000000-linux-6.12"
}

// factsOf is what the node's rebootFactsFunctions print for a system and the system
// whose switch-inhibitors count (toplevel, as RebootFacts.String writes it).
func (n *fakeNode) factsOf(system, inhibitorsOf string) string {
	k := n.kernelOf(system)
	f := &RebootFacts{
		Parts:      map[string]string{"kernel": k + "/bzImage", "initrd": k + "/initrd", "kernel-modules": k + "/lib"},
		Triggers:   n.boots.triggers[system],
		Inhibitors: n.boots.inhibitors[inhibitorsOf],
	}
	return f.String()
}

// fakeEntry is the fake boot loader's entry of a toplevel.
func fakeEntry(toplevel string) string { return "entry-" + path.Base(toplevel) + ".conf" }

// fakeSystem is the toplevel of a fake entry.
func fakeSystem(entry string) string {
	return "/nix/store/" + strings.TrimSuffix(strings.TrimPrefix(entry, "entry-"), ".conf")
}

// rebootCall answers the activation's scripts; ok is false for any other command.
func (n *fakeNode) rebootCall(argv []string) (RunResult, bool) {
	if len(argv) == 3 && argv[0] == "sh" && argv[2] == records.PreviousDefaultScript {
		pinned := ""
		if n.boots.pinned != "" {
			pinned = fakeEntry(n.boots.pinned)
		}
		return RunResult{Stdout: []byte(n.profile + "\n" + pinned + "\n")}, true
	}
	if len(argv) < 5 || argv[0] != "sh" {
		return RunResult{}, false
	}
	switch argv[2] {
	case rebootNeedScript:
		booted := n.boots.booted
		if booted == "" {
			booted = n.running
		}
		return RunResult{Stdout: []byte(n.factsOf(booted, n.running) + "\n" + n.factsOf(argv[4], argv[4]) + "\n")}, true
	case rebootMarkScript:
		n.boots.marker = argv[4]
		return RunResult{Stdout: []byte(argv[4] + "\n")}, true
	case rebootScript:
		if n.boots.marker != argv[4] {
			return RunResult{ExitCode: 1}, true
		}
		takes := n.boots.takes
		if takes == 0 {
			takes = 10 * time.Second
		}
		n.boots.until = n.clock.now.Add(takes)
		n.chooseBoot()
		return RunResult{}, true
	case records.BootOnceScript:
		if !n.boots.oneShot {
			return RunResult{Stdout: []byte("none systemd-boot is not installed\n")}, true
		}
		old := argv[5]
		if argv[6] != "" {
			old = fakeSystem(argv[6])
		}
		if old == "" {
			return RunResult{Stdout: []byte("none no boot entry boots the previous system\n")}, true
		}
		if old == argv[4] {
			return RunResult{Stdout: []byte("none " + records.AlreadyDefault + "\n")}, true
		}
		n.boots.once, n.boots.pinned = argv[4], old
		return RunResult{Stdout: []byte("oneshot " + fakeEntry(argv[4]) + " " + fakeEntry(old) + " " + old + "\n")}, true
	case bootAnswerScript:
		if n.boots.marker == argv[4] {
			return RunResult{Stdout: []byte("pending\n")}, true
		}
		if n.boots.diesOnceUp {
			n.unreachable = true
		}
		return RunResult{Stdout: []byte("booted " + strings.TrimSpace(n.boots.booted) + "\n")}, true
	}
	return RunResult{}, false
}
