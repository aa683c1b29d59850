package records

// The one-shot boot entry (docs/activation.md#activation): a reboot boots the new system
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

// PreviousDefaultScript prints what decides the boot loader's default before this run
// changes anything: the system profile's target, and the entry a run pinned (an
// earlier one-shot boot that never came back leaves its pin), one a line ("" for none).
const PreviousDefaultScript = `readlink -e /nix/var/nix/profiles/system 2>/dev/null || echo; cat ` + BootPinFile + ` 2>/dev/null || echo`

// BootOnceScript makes the boot loader boot $1 once and keep the previous default as
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
const BootOnceScript = bootctlLookup + `
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
[ "$sys" != "$1" ] || { echo "none ` + AlreadyDefault + `"; exit 0; }
echo "$old" >` + BootPinFile + `.tmp && mv ` + BootPinFile + `.tmp ` + BootPinFile + ` || exit 12
"$bc" set-default "$old" >&2 || { rm -f ` + BootPinFile + `; echo "none bootctl set-default failed"; exit 0; }
"$bc" set-oneshot "$new" >&2 || { "$bc" set-default "" >&2; rm -f ` + BootPinFile + `; echo "none bootctl set-oneshot failed"; exit 0; }
echo "oneshot $new $old $sys"`

// AlreadyDefault is why a reboot needs no one-shot entry: the new system was the
// default already (activation boot set it, say), so there is no other to fall back to.
const AlreadyDefault = "the new system is already the default entry"
