package deploybody

// The one-shot boot entry (docs/design.md#activation): a reboot boots the new system
// once, and the previous system stays the boot loader's default until the verdict of
// the booted system is ok. A node whose new system never comes back boots its previous
// system at its next power cycle; one whose verdict fails gets its boot entry pointed
// back at the previous system (remote.RevertBoot), and boots it at its next reboot.
//
// This is the Boot Loader Interface's LoaderEntryOneShot and LoaderEntryDefault, set
// with systemd's bootctl (systemd-boot, and GRUB builds that implement the interface).
// The default is pinned to the previous system's entry for the boot; the pin is this
// project's, recorded in BootPinFile, and released (bootctl set-default "") whenever
// the boot entry is finalized: the boot loader's own default (the system profile's
// newest generation, as switch-to-configuration boot writes it) then applies again.
// An operator's own pinned default is not kept across a reboot deploy.

import (
	"context"
	"fmt"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// BootPinFile records the boot entry this project pinned as the default for a
// one-shot boot. It outlives reboots, as the EFI variable it mirrors does.
const BootPinFile = "/nix/var/nix/fediversity-boot-pin"

// bootctlLookup sets $bc to the bootctl of the running system (NixOS puts systemd's
// tools in /run/current-system/sw/bin), else the one on PATH, else "".
const bootctlLookup = `bc=/run/current-system/sw/bin/bootctl; [ -x "$bc" ] || bc=$(command -v bootctl 2>/dev/null) || bc=""`

// ReleaseBootPin is shell that releases the default entry this project pinned, if any.
// It exits 12 when bootctl refuses. The transports run it when they finalize or revert
// the boot entry (remote.FinalizeBoot, remote.RevertBoot).
const ReleaseBootPin = `if [ -e ` + BootPinFile + ` ]; then ` + bootctlLookup + `; ` +
	`if [ -n "$bc" ]; then "$bc" set-default "" >&2 || exit 12; fi; rm -f ` + BootPinFile + `; fi`

// previousDefaultScript prints what decides the boot loader's default before this run
// changes anything: the system profile's target, and the entry a run pinned (an
// earlier one-shot boot that never came back leaves its pin), one a line ("" for none).
const previousDefaultScript = `readlink -e /nix/var/nix/profiles/system 2>/dev/null || echo; cat ` + BootPinFile + ` 2>/dev/null || echo`

// bootOnceScript makes the boot loader boot $1 once and keep the previous default as
// its default: the entry pinned before this run ($3) if there was one, else the entry
// of the profile's system before this run ($2). It prints "oneshot <new entry>
// <default entry> <default entry's system>", or "none <why>" when the boot loader
// cannot (no bootctl, no systemd-boot, no entry for either system, bootctl refused).
// An entry boots a system when its options line has init=<toplevel>/init, as NixOS
// writes them. Entries are named by their ID, what bootctl takes: with boot counting
// (boot.loader.systemd-boot.bootCounting) an entry's file name carries its counter,
// nixos-generation-5+3.conf or +2-1 after a try, and its ID drops it
// (nixos-generation-5.conf; systemd-boot-builder.py, the Boot Loader Specification).
// A pin is looked up by ID too: the counter in the file name moves at every boot. The
// pin is recorded before the default is set, so that no pin of ours is ever left
// unrecorded.
const bootOnceScript = bootctlLookup + `
[ -n "$bc" ] || { echo "none bootctl is not on the node"; exit 0; }
"$bc" is-installed >/dev/null 2>&1 || { echo "none systemd-boot is not installed"; exit 0; }
b=$("$bc" --print-boot-path 2>/dev/null) || b=/boot
e=$b/loader/entries
entryid() { printf '%s\n' "$1" | sed 's/+[0-9][0-9]*\(-[0-9][0-9]*\)\{0,1\}\.conf$/.conf/'; }
byinit() { [ -n "$1" ] || return 1; for f in "$e"/*.conf; do grep -qsF "init=$1/init" "$f" && { echo "${f##*/}"; return 0; }; done; return 1; }
byid() { [ -n "$1" ] || return 1; for f in "$e"/*.conf; do [ -f "$f" ] && [ "$(entryid "${f##*/}")" = "$1" ] && { echo "${f##*/}"; return 0; }; done; return 1; }
newf=$(byinit "$1") || { echo "none no boot entry boots the new system"; exit 0; }
new=$(entryid "$newf")
oldf=$(byid "$3") || oldf=$(byinit "$2") || { echo "none no boot entry boots the previous system"; exit 0; }
old=$(entryid "$oldf")
sys=$(sed -n 's|^options init=\(/nix/store/[^/ ]*\)/init.*|\1|p' "$e/$oldf" | head -n 1)
[ -n "$sys" ] || { echo "none the previous default entry names no system"; exit 0; }
[ "$sys" != "$1" ] || { echo "none ` + alreadyDefault + `"; exit 0; }
echo "$old" >` + BootPinFile + `.tmp && mv ` + BootPinFile + `.tmp ` + BootPinFile + ` || exit 12
"$bc" set-default "$old" >&2 || { rm -f ` + BootPinFile + `; echo "none bootctl set-default failed"; exit 0; }
"$bc" set-oneshot "$new" >&2 || { "$bc" set-default "" >&2; rm -f ` + BootPinFile + `; echo "none bootctl set-oneshot failed"; exit 0; }
echo "oneshot $new $old $sys"`

// alreadyDefault is why a reboot needs no one-shot entry: the new system was the
// default already (activation boot set it, say), so there is no other to fall back to.
const alreadyDefault = "the new system is already the default entry"

// previousDefault is what decides the boot loader's default before the run changes
// it: the system profile's target and the entry an earlier run left pinned.
type previousDefault struct{ profile, pinned string }

// readPreviousDefault reads it (previousDefaultScript).
func (e *runEnv) readPreviousDefault(ctx context.Context) (previousDefault, error) {
	res, err := e.t.Run(ctx, []string{"sh", "-c", previousDefaultScript}, RunOptions{Path: lockPath})
	if err != nil {
		return previousDefault{}, fmt.Errorf("reading the system profile and the boot loader's pinned default: %w", err)
	}
	lines := strings.Split(string(res.Stdout)+"\n\n", "\n")
	return previousDefault{profile: strings.TrimSpace(lines[0]), pinned: strings.TrimSpace(lines[1])}, nil
}

// bootOnce asks the boot loader to boot toplevel once, with the previous default kept
// as the default; rb records which entries, or why not.
func (e *runEnv) bootOnce(ctx context.Context, toplevel string, prev previousDefault, rb *Reboot) error {
	res, err := e.t.Run(ctx, []string{"sh", "-c", bootOnceScript, "sh", toplevel, prev.profile, prev.pinned}, RunOptions{Path: lockPath, Privileged: true})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exited %d: %s", res.ExitCode, judge.FirstLine(string(res.Stderr), "no output"))
	}
	if err != nil {
		return withHint(fmt.Errorf("setting the one-shot boot entry: %w", err),
			"the boot entry points at the new system, the node runs its previous one and has not rebooted: apply again")
	}
	f := strings.Fields(string(res.Stdout))
	switch {
	case len(f) == 4 && f[0] == "oneshot" && nixstore.CleanAbsolutePath(f[3]):
		rb.OneShotEntry, rb.DefaultEntry, rb.DefaultSystem = f[1], f[2], f[3]
	case len(f) > 1 && f[0] == "none":
		rb.NoOneShot = strings.Join(f[1:], " ")
	default:
		rb.NoOneShot = "the boot loader's answer was not understood"
	}
	return nil
}

// oneShotNote is the verdict's words of the boot entry after a reboot, given whether
// the verdict is ok.
func oneShotNote(rb *Reboot, ok bool) string {
	switch {
	case rb == nil:
		return ""
	case rb.OneShotEntry != "" && ok:
		return "booted once from a one-shot boot entry; the new system is the default entry now that the verdict is ok"
	case rb.OneShotEntry != "":
		return "booted once from a one-shot boot entry; the previous system stays the default entry (" + rb.DefaultEntry + "), so the node boots it at its next boot"
	case rb.NoOneShot == alreadyDefault:
		return "the new system was already the default boot entry"
	case rb.NoOneShot != "":
		return "no one-shot boot entry (" + rb.NoOneShot + "): the new system was made the default entry before the reboot"
	}
	return ""
}

// BootEntryAfterFailedVerdict says what a deploy whose verdict failed left as the
// node's boot entry (rb: the run's reboot, nil for none), in the words of both front
// ends' hints.
func BootEntryAfterFailedVerdict(rb *Reboot) string {
	if rb != nil && rb.OneShotEntry != "" {
		return "the node runs the new system until its next boot, then its previous one: the boot entry points back at " + rb.DefaultSystem
	}
	return "the node keeps the new boot entry"
}
