#!@busybox@/bin/sh
# Lab stand-in for NixOS's switch-to-configuration in bootable-switchable (see
# lab/closures/default.nix): a system that an Incus container boots from its own image
# (fediversity_incus_image), and that later systems reach through a deploy. Only its own
# system's tools are on PATH (store paths, as for the real one:
# pkgs/by-name/sw/switch-to-configuration-ng/src/main.rs). What it does, as a
# deployer observes the real one:
#   its lock       flock on /run/nixos/switch-to-configuration.lock, taken without
#                  waiting: another switch holding it makes this one print "Could not
#                  acquire lock" and exit 11 before it changes anything;
#   switch, boot   install the boot loader: in a NixOS container that is /sbin/init
#                  pointing at the system's init (installBootLoader of
#                  nixos/modules/virtualisation/lxc-container.nix), so the container's
#                  next start boots this system; boot stops there;
#   switch, test   stop the units the running system wants and this one does not, link
#                  /etc/systemd/system, /etc/os-release and /etc/nix/nix.conf to this
#                  system's and /run/current-system to it, reload systemd, restart the
#                  wanted units whose unit file changed, start the new ones, and report
#                  failed units: "warning: the following units failed: …", exit 4;
#   dry-activate   print what it would start.
set -u
PATH=@out@/sw/bin
export PATH
out=@out@
action=${1:-}

case "$action" in
switch | boot | test | dry-activate) ;;
*)
	echo "Usage: $0 [switch|boot|test|dry-activate]" >&2
	exit 1
	;;
esac

mkdir -p /run/nixos
exec 9>>/run/nixos/switch-to-configuration.lock
if ! flock -n 9; then
	echo "Could not acquire lock" >&2
	exit 11
fi

wanted() {
	for f in "$1"/etc/systemd/system/multi-user.target.wants/*; do
		[ -e "$f" ] && basename "$f"
	done
}

if [ "$action" = dry-activate ]; then
	echo "would start the following units: $(wanted "$out" | tr '\n' ' ')" >&2
	exit 0
fi
if [ "$action" = switch ] || [ "$action" = boot ]; then
	ln -sfn "$out/init" /sbin/init
fi
if [ "$action" = boot ]; then
	exit 0
fi

old=$(readlink /run/current-system 2>/dev/null || true)
for u in $(wanted "$old"); do
	if [ ! -e "$out/etc/systemd/system/multi-user.target.wants/$u" ]; then
		echo "stopping the following units: $u" >&2
		systemctl stop "$u"
	fi
done

echo "activating the configuration..." >&2
mkdir -p /etc/nix
ln -sfn "$out/etc/systemd/system" /etc/systemd/system
ln -sfn "$out/etc/os-release" /etc/os-release
ln -sfn "$out/etc/nix/nix.conf" /etc/nix/nix.conf
ln -sfn "$out" /run/current-system
systemctl daemon-reload

for u in $(wanted "$out"); do
	if [ -e "$old/etc/systemd/system/$u" ]; then
		if ! cmp -s "$old/etc/systemd/system/$u" "$out/etc/systemd/system/$u"; then
			echo "restarting the following units: $u" >&2
			systemctl restart "$u"
		fi
	else
		echo "starting the following units: $u" >&2
		systemctl start "$u"
	fi
done

failed=$(systemctl list-units --state=failed --no-legend --plain 2>/dev/null | awk '{print $1}' | tr '\n' ' ')
failed=${failed% }
if [ -n "$failed" ]; then
	echo "warning: the following units failed: $failed" >&2
	exit 4
fi
exit 0
