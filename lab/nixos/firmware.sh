#!/bin/sh
# The lab's stand-in for a machine's firmware and boot loader, and for the kernel that
# hands over to NixOS's stage 2 (lab/lab.sh puts it in the node image as
# /usr/lib/fediversity-standin/firmware; fediversity-stage2.service runs `boot` at each
# boot). It is machinery of the lab, not of NixOS: it names Debian's tools.
#
# The boot loader is the node's, chosen in /boot/fediversity-standin-loader:
#   systemd-boot  (the default) the entries in /boot/loader/entries that the systemd-boot
#                 installer of the stand-in systems writes from the system profile's
#                 generations; what boots is the one-shot entry (LoaderEntryOneShot, read
#                 once), else the default entry (LoaderEntryDefault, else loader.conf's
#                 `default`). The EFI variables are files in /var/lib/fediversity-standin-efi
#                 (they outlive a reboot, as EFI variables do; the stand-in bootctl sets
#                 them). An entry is found by its ID: its file name without a boot
#                 counter. With boot counting (/boot/fediversity-standin-boot-counting holds
#                 the tries of a new entry) an entry `<id>+N-M.conf` is booted as
#                 `<id>+(N-1)-(M+1).conf`, one with no tries left (+0) is bad and never
#                 chosen while a good one remains, and a boot that comes up blesses the
#                 entry it booted (drops the counter), as systemd-bless-boot does.
#   grub          GRUB as NixOS installs it (install-grub.pl): /boot/grub/grub.cfg's
#                 default, which each switch and boot sets to its system.
# Usage: firmware boot      boot the entry (the stage-2 unit's command)
#        firmware default   print the system the node boots next, a one-shot apart
#        firmware next      print the system the node boots next
set -u
PATH=/usr/bin
efi=/var/lib/fediversity-standin-efi
entries=/boot/loader/entries

loader() { cat /boot/fediversity-standin-loader 2>/dev/null || echo systemd-boot; }

# id FILE_NAME: an entry's ID, its file name without the boot counter.
id() { printf '%s\n' "$1" | sed -E 's/\+[0-9]+(-[0-9]+)?\.conf$/.conf/'; }

# file ID: the entry file with that ID.
file() {
	[ -n "$1" ] || return 1
	for f in "$entries"/*.conf; do
		[ -f "$f" ] && [ "$(id "${f##*/}")" = "$1" ] && { echo "$f"; return 0; }
	done
	return 1
}

bad() { case ${1##*/} in *+0.conf | *+0-[0-9]*.conf) return 0 ;; *) return 1 ;; esac; }

# good_default: the newest entry with tries left (systemd-boot sorts bad entries last).
good_default() {
	for f in $(ls "$entries"/*.conf 2>/dev/null | sort -t- -k3,3nr); do
		bad "$f" || { echo "$f"; return 0; }
	done
	return 1
}

system_of() { sed -n 's|^options init=\(/nix/store/[^ /]*\)/init.*|\1|p; T; q' "$1" 2>/dev/null; }

# pick ONESHOT: the entry file systemd-boot would boot.
pick() {
	f=""
	[ "$1" = yes ] && f=$(file "$(cat $efi/LoaderEntryOneShot 2>/dev/null)")
	[ -n "$f" ] || f=$(file "$(cat $efi/LoaderEntryDefault 2>/dev/null)")
	[ -n "$f" ] || f=$(file "$(sed -n 's/^default //p' /boot/loader/loader.conf 2>/dev/null)")
	if [ -z "$f" ] || bad "$f"; then
		g=$(good_default) && f=$g
	fi
	echo "$f"
}

# next ONESHOT: the system the node boots next.
next() {
	case $(loader) in
	grub) sed -n 's/^default-system //p' /boot/grub/grub.cfg 2>/dev/null ;;
	*) f=$(pick "$1"); [ -z "$f" ] || system_of "$f" ;;
	esac
}

case "${1:-}" in
default) next no; exit ;;
next) next yes; exit ;;
boot) ;;
*) echo "usage: $0 boot|default|next" >&2; exit 2 ;;
esac

booted=""
case $(loader) in
grub) e=$(next no) ;;
*)
	f=$(pick yes)
	rm -f $efi/LoaderEntryOneShot
	e=""
	if [ -n "$f" ]; then
		e=$(system_of "$f")
		name=${f##*/}
		mkdir -p $efi
		id "$name" >$efi/LoaderEntrySelected
		left=$(printf '%s\n' "$name" | sed -nE 's/.*\+([0-9]+)(-[0-9]+)?\.conf$/\1/p')
		if [ -n "$left" ] && [ "$left" -gt 0 ]; then
			done=$(printf '%s\n' "$name" | sed -nE 's/.*\+[0-9]+-([0-9]+)\.conf$/\1/p')
			booted=$entries/$(id "$name" | sed 's/\.conf$//')+$((left - 1))-$((${done:-0} + 1)).conf
			mv "$f" "$booted"
		fi
	fi
	;;
esac
[ -n "$e" ] || e=$(readlink -f /nix/var/nix/profiles/system)
echo "stand-in boot loader ($(loader)): system $e" >&2
if [ -e "$e/etc/fediversity-boot-bricks" ]; then
	# A boot that never comes up: off before the boot ends and before
	# /run/booted-system exists, so the node never says it booted.
	systemctl poweroff --no-block
	exec sleep infinity
fi
"$e/bin/switch-to-configuration" stage2
rc=$?
# The boot came up (failed units of the system do not stop it, as boot-complete.target
# is reached without them): bless a counted entry.
if [ -n "$booted" ] && [ -f "$booted" ]; then
	mv "$booted" "$entries/$(id "${booted##*/}")"
fi
case $rc in 0 | 4) exit 0 ;; *) exit $rc ;; esac
