#!/bin/sh
# Lab stand-in for NixOS's switch-to-configuration (see lab/closures/default.nix).
# It runs on a Debian lab node and does what a deployer can observe of the real one:
#   switch|test   run $out/activate (if any), point /run/current-system at $out, install
#                 the closure's units from $out/etc/systemd/system into
#                 /run/systemd/system (removing units the previously installed closure
#                 had and this one has not), daemon-reload, start the units the closure
#                 wants (restart the ones whose unit file changed), and report failures:
#                 "warning: the following units failed: a.service b.service" and exit 4.
#   boot          records $out as the boot entry (/nix/var/nix/fediversity-boot-entry, and
#                 a systemd-boot style entry in /boot/loader/entries, loader.conf's
#                 default), and installs fediversity-stage2.service, which boots an entry
#                 at the node's next boot (what the boot loader and NixOS' stage 2 do): the
#                 one-shot entry, else the pinned default, else loader.conf's (the stand-in
#                 bootctl in the closure's sw/bin sets the first two);
#                 /run/booted-system and /run/current-system point at it, its units start.
#   stage2        (that service) /run/booted-system := $out, then as switch.
#   dry-activate  prints what it would start.
#   check         runs the pre-switch checks only.
# The switch inhibitors are checked as nixpkgs' pre-switch check does
# (nixos/modules/system/activation/switchable-system.nix): for switch, test and check, a
# key present in both $out/switch-inhibitors and the running system's (JSON objects)
# with another value refuses, in nixpkgs' words ("There are changes to critical
# components of the system:", then "<name> : <old> -> <new>" a line), exit 1, before
# anything changes. Like switch-to-configuration-ng (src/main.rs): a changed unit whose
# file or drop-ins say X-RestartIfChanged=false is not restarted ("NOT restarting the
# following changed units: a, b"); a unit's drop-ins (<unit>.d) are installed with it;
# a system whose systemd differs from the running one's re-executes PID 1
# ("restarting systemd..."), no reboot. A system with etc/fediversity-boot-counting
# (boot.loader.systemd-boot.bootCounting) gets a boot entry whose file name carries its
# tries (nixos-<hash>+3.conf), and the stand-in boot loader counts one at each boot of
# it (+2-1); entries are chosen by ID, the name without the counter. A node that never
# booted a stand-in takes the first one it switches to as its booted system
# (/run/booted-system), so a later one's kernel can be compared with it.
set -u
# Only the system's own tools: a unit's PATH on NixOS is systemd's bin directory alone.
PATH=@out@/sw/bin
export PATH
out=@out@
action=${1:-}
units=$out/etc/systemd/system
state=/run/fediversity-standin

case "$action" in
switch | test | boot | dry-activate | stage2 | check) ;;
*)
	echo "Usage: $0 [check|switch|boot|test|dry-activate]" >&2
	exit 1
	;;
esac

closure_units() {
	for f in "$units"/*; do
		[ -f "$f" ] && basename "$f"
	done
}
wanted_units() {
	for f in "$units"/multi-user.target.wants/*; do
		[ -e "$f" ] && basename "$f"
	done
}
# entryid NAME: a boot loader entry's ID, its file name without the boot-counting counter.
entryid() { printf '%s\n' "$1" | sed 's/+[0-9][0-9]*\(-[0-9][0-9]*\)\{0,1\}\.conf$/.conf/'; }
# components FILE: a JSON object of strings as NixOS lays one out, "key<TAB>value" a line.
components() { sed -n 's/^ *"\([^"]*\)": *"\(.*\)",\{0,1\}$/\1	\2/p' "$1" 2>/dev/null; }

if [ "$action" = boot ]; then
	mkdir -p /nix/var/nix /boot/loader/entries
	echo "$out" >/nix/var/nix/fediversity-boot-entry.tmp &&
		mv /nix/var/nix/fediversity-boot-entry.tmp /nix/var/nix/fediversity-boot-entry
	# A boot loader entry per system booted, as NixOS writes them for systemd-boot
	# (kept, as generations are), and loader.conf's default: the last one. With boot
	# counting a new entry's file carries its tries, and an entry already there keeps
	# its counter (systemd-boot-builder.py).
	id=nixos-$(basename "$out" | cut -c1-32).conf
	file=$id
	if [ -e "$out/etc/fediversity-boot-counting" ]; then
		file=${id%.conf}+$(cat "$out/etc/fediversity-boot-counting").conf
		for f in /boot/loader/entries/*.conf; do
			[ -f "$f" ] && [ "$(entryid "${f##*/}")" = "$id" ] && file=${f##*/}
		done
	fi
	printf 'title fediversity lab stand-in\nversion %s\noptions init=%s/init\n' "$(cat "$out/nixos-version")" "$out" >"/boot/loader/entries/$file.tmp" &&
		mv "/boot/loader/entries/$file.tmp" "/boot/loader/entries/$file"
	printf 'default %s\n' "$id" >/boot/loader/loader.conf.tmp && mv /boot/loader/loader.conf.tmp /boot/loader/loader.conf
	# The stand-in firmware and boot loader: which system a boot runs. The one-shot
	# entry (read once: it is gone for the boot after), else the default a deploy
	# pinned, else loader.conf's default (bootctl, in the closure's sw/bin, sets the
	# first two).
	cat >/etc/fediversity-standin-firmware.tmp <<'FIRMWARE'
#!/bin/sh
# The machine's firmware and boot loader: lab machinery, not NixOS, so Debian's tools.
PATH=/usr/bin
efi=/var/lib/fediversity-standin-efi
id=$(cat $efi/LoaderEntryOneShot 2>/dev/null)
rm -f $efi/LoaderEntryOneShot
[ -n "$id" ] || id=$(cat $efi/LoaderEntryDefault 2>/dev/null)
[ -n "$id" ] || id=$(sed -n 's/^default //p' /boot/loader/loader.conf 2>/dev/null)
# The entry of that ID (its file name may carry a boot-counting counter); a boot of a
# counted entry counts a try: +N-M becomes +(N-1)-(M+1), as systemd-boot renames it.
f=""
for x in /boot/loader/entries/*.conf; do
	[ -f "$x" ] || continue
	[ "$(basename "$x" | sed 's/+[0-9][0-9]*\(-[0-9][0-9]*\)\{0,1\}\.conf$/.conf/')" = "$id" ] && f=$x
done
e=$(sed -n 's|^options init=\(/nix/store/[^ ]*\)/init.*|\1|p' "$f" 2>/dev/null)
case "$f" in
*+[0-9]*.conf)
	c=${f##*+}; c=${c%.conf}; left=${c%%-*}; done=0
	case "$c" in *-*) done=${c#*-} ;; esac
	if [ "$left" -gt 0 ]; then mv "$f" "${f%+*}+$((left - 1))-$((done + 1)).conf"; fi
	;;
esac
[ -n "$e" ] || e=$(cat /nix/var/nix/fediversity-boot-entry)
echo "stand-in boot loader: entry ${id:-none}, system $e" >&2
if [ -e "$e/etc/fediversity-boot-bricks" ]; then
	# A boot that never comes up: off before the boot ends and before
	# /run/booted-system exists, so the node never says it booted.
	systemctl poweroff --no-block
	exec sleep infinity
fi
exec "$e/bin/switch-to-configuration" stage2
FIRMWARE
	mv /etc/fediversity-standin-firmware.tmp /etc/fediversity-standin-firmware
	cat >/etc/systemd/system/fediversity-stage2.service.tmp <<'UNIT'
[Unit]
Description=fediversity lab stand-in of the boot loader and NixOS stage 2: run the boot entry's system
After=local-fs.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh /etc/fediversity-standin-firmware
[Install]
WantedBy=multi-user.target
UNIT
	mv /etc/systemd/system/fediversity-stage2.service.tmp /etc/systemd/system/fediversity-stage2.service
	mkdir -p /etc/systemd/system/multi-user.target.wants
	ln -sfn ../fediversity-stage2.service /etc/systemd/system/multi-user.target.wants/fediversity-stage2.service
	echo "boot entry set to $out" >&2
	exit 0
fi
if [ "$action" = stage2 ]; then
	ln -sfn "$out" /run/booted-system.tmp && mv -T /run/booted-system.tmp /run/booted-system
	action=switch
fi
case "$action" in
switch | test | check)
	if [ "${NIXOS_NO_CHECK:-}" != 1 ] && [ -e /run/current-system ]; then
		# The pre-switch check switchInhibitors, its lines on stdout.
		printf 'Checking switch inhibitors...'
		components /run/current-system/switch-inhibitors >"/tmp/fedi-inh-old.$$"
		components "$out/switch-inhibitors" >"/tmp/fedi-inh-new.$$"
		diff=$(awk -F '\t' 'NR == FNR { new[$1] = $2; has[$1] = 1; next } ($1 in has) && new[$1] != $2 { print $1 " : " $2 " -> " new[$1] }' \
			"/tmp/fedi-inh-new.$$" "/tmp/fedi-inh-old.$$")
		rm -f "/tmp/fedi-inh-old.$$" "/tmp/fedi-inh-new.$$"
		if [ -n "$diff" ]; then
			echo
			echo "There are changes to critical components of the system:"
			echo
			echo "$diff"
			echo
			echo "Switching into this system is not recommended."
			echo "You probably want to run 'nixos-rebuild boot' and reboot your system instead."
			echo
			echo "If you really want to switch into this configuration directly, then"
			echo "you can set NIXOS_NO_CHECK=1 to ignore pre-switch checks."
			echo
			echo "WARNING: doing so might cause the switch to fail or your system to become unstable."
			echo
			echo "Pre-switch check 'switchInhibitors' failed"
			echo "Pre-switch checks failed" >&2
			exit 1
		fi
		echo " done"
	fi
	;;
esac
[ "$action" != check ] || exit 0
# The systemd the running system has, before /run/current-system moves.
old_systemd=$(readlink -f /run/current-system/systemd 2>/dev/null || true)
[ "$action" = dry-activate ] || [ -e /run/booted-system ] || ln -sfn "$out" /run/booted-system
if [ "$action" = dry-activate ]; then
	echo "would start the following units: $(wanted_units | tr '\n' ' ')" >&2
	exit 0
fi

echo "activating the configuration..." >&2
# The setuid wrappers NixOS makes in /run/wrappers/bin at each boot and activation
# (security.wrappers; sudo is on by default): Debian's setuid sudo and su stand in.
mkdir -p /run/wrappers/bin
for w in sudo su; do
	[ -x "/usr/bin/$w" ] && ln -sfn "/usr/bin/$w" "/run/wrappers/bin/$w"
done
if [ -x "$out/activate" ]; then
	"$out/activate" || echo "warning: the activation script failed" >&2
fi
ln -sfn "$out" /run/current-system.tmp && mv -T /run/current-system.tmp /run/current-system

mkdir -p "$state" /run/systemd/system
touch "$state/units"
# Units the previous closure installed and this one has not: stop and remove (and
# forget their failures once systemd has reloaded).
removed=""
while read -r name target; do
	[ -n "$name" ] || continue
	if [ ! -f "$units/$name" ]; then
		echo "stopping the following units: $name" >&2
		systemctl stop "$name" >/dev/null 2>&1
		rm -f "/run/systemd/system/$name"
		removed="$removed $name"
	fi
done <"$state/units"

changed=""
: >"$state/units.new"
for name in $(closure_units); do
	old=$(readlink "/run/systemd/system/$name" 2>/dev/null || true)
	[ "$old" = "$units/$name" ] || changed="$changed $name"
	ln -sfn "$units/$name" "/run/systemd/system/$name"
	# Its drop-ins (NixOS configures upstream units through <unit>.d/overrides.conf).
	if [ -d "$units/$name.d" ]; then
		ln -sfn "$units/$name.d" "/run/systemd/system/$name.d"
	else
		rm -f "/run/systemd/system/$name.d"
	fi
	echo "$name $units/$name" >>"$state/units.new"
done
mv "$state/units.new" "$state/units"
new_systemd=$(readlink -f "$out/systemd" 2>/dev/null || true)
if [ -n "$old_systemd" ] && [ "$old_systemd" != "$new_systemd" ]; then
	# A new systemd: PID 1 re-executes, no reboot (switch-to-configuration-ng).
	echo "restarting systemd..." >&2
	systemctl daemon-reexec
fi
systemctl daemon-reload
systemctl reset-failed $removed $(closure_units) >/dev/null 2>&1

start=""
restart=""
skip=""
for name in $(wanted_units); do
	case " $changed " in
	*" $name "*)
		# The last X-RestartIfChanged= of the unit's file and drop-ins decides; only
		# 1, yes, true and on are true (parse_systemd_bool). An inactive unit starts.
		r=$(cat "$units/$name" "$units/$name".d/*.conf 2>/dev/null | sed -n 's/^X-RestartIfChanged=//p' | tail -n 1)
		case "$r" in
		"" | 1 | yes | true | on) restart="$restart $name" ;;
		*) if systemctl is-active --quiet "$name"; then skip="$skip${skip:+, }$name"; else start="$start $name"; fi ;;
		esac
		;;
	*) start="$start $name" ;;
	esac
done
if [ -n "$skip" ]; then
	echo "NOT restarting the following changed units: $skip" >&2
fi
if [ -n "$restart" ]; then
	echo "restarting the following units:$restart" >&2
	for u in $restart; do systemctl restart "$u" >/dev/null 2>&1; done
fi
if [ -n "$start" ]; then
	echo "starting the following units:$start" >&2
	for u in $start; do systemctl start "$u" >/dev/null 2>&1; done
fi

# Let units that fail right after they started (Type=exec/simple) show it.
sleep 1
failed=""
for name in $(closure_units); do
	systemctl is-failed --quiet "$name" && failed="$failed $name"
done
if [ -n "$failed" ]; then
	echo "warning: the following units failed:$failed" >&2
	exit 4
fi
exit 0
