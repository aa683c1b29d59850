#!/bin/sh
# The stand-in systems' boot loader installer (config.system.build.installBootLoader),
# which switch-to-configuration runs for `switch` and `boot` with the new system as its
# argument. The node's boot loader (/boot/fediversity-standin-loader; see the lab's
# stand-in firmware, lab/nixos/firmware.sh) decides what that argument does:
#   systemd-boot  as systemd-boot-builder.py: an entry per generation of the system
#                 profile (nixos-generation-N.conf, `options init=<system>/init`), the
#                 entries of generations that are gone removed, and loader.conf's default
#                 set to the generation that is the argument; an argument that is no
#                 generation gets no entry and moves no default. With boot counting
#                 (/boot/fediversity-standin-boot-counting: the tries) a new entry is
#                 nixos-generation-N+<tries>.conf; an entry keeps its counter.
#   grub          as install-grub.pl: the argument is the default entry ("NixOS -
#                 Default") at once, whatever the profile says.
#   Both write /nix/var/nix/fediversity-boot-entry: the system the default entry boots
#   after this install (a record for the lab's tests older than labtest.BootDefault, which
#   also honours bootctl set-default; NixOS has no such file).
set -eu
PATH=/usr/bin
# (Run by switch-to-configuration, which ignores SIGPIPE as a unit does: no reader here
# ends a pipe early.)
record() { mkdir -p /nix/var/nix && echo "$1" >/nix/var/nix/fediversity-boot-entry.tmp && mv /nix/var/nix/fediversity-boot-entry.tmp /nix/var/nix/fediversity-boot-entry; }
system=$(readlink -f "$1")
profile=/nix/var/nix/profiles/system
case $(cat /boot/fediversity-standin-loader 2>/dev/null || echo systemd-boot) in
grub)
	mkdir -p /boot/grub
	{
		echo "# The lab's stand-in of GRUB's configuration (install-grub.pl)."
		echo "default-system $system"
		echo "menuentry NixOS - Default: init=$system/init"
		for g in $(nix-env --list-generations -p $profile | awk '{ print $1 }'); do
			echo "menuentry NixOS - Configuration $g: init=$(readlink -f $profile-$g-link)/init"
		done
	} >/boot/grub/grub.cfg.tmp
	mv /boot/grub/grub.cfg.tmp /boot/grub/grub.cfg
	record "$system"
	;;
*)
	entries=/boot/loader/entries
	mkdir -p $entries
	tries=$(cat /boot/fediversity-standin-boot-counting 2>/dev/null || true)
	gens=$(nix-env --list-generations -p $profile | awk '{ print $1 }')
	for f in $entries/nixos-generation-*.conf; do
		[ -f "$f" ] || continue
		g=$(printf '%s\n' "${f##*/}" | sed -nE 's/^nixos-generation-([0-9]+)(\+[0-9]+(-[0-9]+)?)?\.conf$/\1/p')
		[ -n "$g" ] || continue
		printf '%s\n' "$gens" | grep -x "$g" >/dev/null || rm -f "$f"
	done
	for g in $gens; do
		sys=$(readlink -f $profile-$g-link)
		name=""
		for f in $entries/nixos-generation-$g.conf $entries/nixos-generation-$g+*.conf; do
			[ -f "$f" ] && { name=${f##*/}; break; }
		done
		if [ -z "$name" ]; then
			name=nixos-generation-$g.conf
			[ -z "$tries" ] || name=nixos-generation-$g+$tries.conf
		fi
		printf 'title NixOS\nsort-key nixos\nversion Generation %s %s\nlinux /EFI/nixos/kernel.efi\ninitrd /EFI/nixos/initrd.efi\noptions init=%s/init\n' \
			"$g" "$(cat "$sys/nixos-version" 2>/dev/null)" "$sys" >$entries/.tmp
		mv $entries/.tmp "$entries/$name"
		if [ "$sys" = "$system" ]; then
			printf 'timeout 5\ndefault nixos-generation-%s.conf\nconsole-mode keep\n' "$g" >/boot/loader/loader.conf.tmp
			mv /boot/loader/loader.conf.tmp /boot/loader/loader.conf
			record "$sys"
		fi
	done
	;;
esac
