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
# A switch whose $out/etc/switch-inhibitors differs from the running system's is refused
# as nixpkgs' pre-switch check refuses it ("Pre-switch check 'switchInhibitors' failed",
# exit 1), naming each changed inhibitor. A node that never booted a stand-in takes the
# first one it switches to as its booted system (/run/booted-system), so a later one's
# kernel can be compared with it.
set -u
# Only the system's own tools: a unit's PATH on NixOS is systemd's bin directory alone.
PATH=@out@/sw/bin
export PATH
out=@out@
action=${1:-}
units=$out/etc/systemd/system
state=/run/fediversity-standin

case "$action" in
switch | test | boot | dry-activate | stage2) ;;
*)
	echo "Usage: $0 [switch|boot|test|dry-activate]" >&2
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

if [ "$action" = boot ]; then
	mkdir -p /nix/var/nix /boot/loader/entries
	echo "$out" >/nix/var/nix/fediversity-boot-entry.tmp &&
		mv /nix/var/nix/fediversity-boot-entry.tmp /nix/var/nix/fediversity-boot-entry
	# A boot loader entry per system booted, as NixOS writes them for systemd-boot
	# (kept, as generations are), and loader.conf's default: the last one.
	id=nixos-$(basename "$out" | cut -c1-32).conf
	printf 'title fediversity lab stand-in\nversion %s\noptions init=%s/init\n' "$(cat "$out/nixos-version")" "$out" >"/boot/loader/entries/$id.tmp" &&
		mv "/boot/loader/entries/$id.tmp" "/boot/loader/entries/$id"
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
e=$(sed -n 's|^options init=\(/nix/store/[^ ]*\)/init.*|\1|p' "/boot/loader/entries/$id" 2>/dev/null)
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
if [ "$action" = switch ] && [ -e /run/current-system ]; then
	changed_inhibitors=$(
		cat "$out/etc/switch-inhibitors" 2>/dev/null | sort >/tmp/fedi-inh-new.$$
		cat /run/current-system/etc/switch-inhibitors 2>/dev/null | sort >/tmp/fedi-inh-old.$$
		comm -3 /tmp/fedi-inh-old.$$ /tmp/fedi-inh-new.$$ | sed 's/^[[:space:]]*//; s/=.*//' | sort -u
		rm -f /tmp/fedi-inh-new.$$ /tmp/fedi-inh-old.$$
	)
	if [ -n "$changed_inhibitors" ]; then
		for i in $changed_inhibitors; do echo "switch inhibitor $i changed" >&2; done
		echo "Pre-switch check 'switchInhibitors' failed" >&2
		exit 1
	fi
fi
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
	echo "$name $units/$name" >>"$state/units.new"
done
mv "$state/units.new" "$state/units"
systemctl daemon-reload
systemctl reset-failed $removed $(closure_units) >/dev/null 2>&1

start=""
restart=""
for name in $(wanted_units); do
	case " $changed " in
	*" $name "*) restart="$restart $name" ;;
	*) start="$start $name" ;;
	esac
done
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
