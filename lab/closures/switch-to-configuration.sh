#!/bin/sh
# Lab stand-in for NixOS's switch-to-configuration (switch-to-configuration-ng,
# pkgs/by-name/sw/switch-to-configuration-ng/src/main.rs): the same actions, order, exit
# codes and messages, for the stand-in systems of lab/closures/default.nix on a Debian
# node shaped like NixOS (lab/lab.sh). Like the real one it runs with only its system's
# own tools ($out/sw/bin; a unit's PATH on NixOS is systemd's bin directory alone).
#
#   check         the pre-switch checks, then exit 0.
#   boot          the checks, install the boot loader with this system as its argument
#                 (@installBootLoader@: systemd-boot entries from the system profile's
#                 generations, or GRUB-like, where the argument becomes the default),
#                 exit 0.
#   switch        as boot, then as test.
#   test          the checks; exit 100 when init-interface-version differs from the
#                 running system's (after the boot loader, for switch); stop the changed
#                 units that are to be stopped, run $out/activate (exit 2 when it fails,
#                 /run/current-system updated anyway), put the system's units in place
#                 (/run/systemd/system stands for NixOS's /etc/systemd/system),
#                 re-execute PID 1 when the system's systemd changed, daemon-reload,
#                 reload, restart, start (multi-user.target pulls in new units), and exit
#                 4 when any unit of the node failed.
#   dry-activate  what switch would do, changing nothing.
#   stage2        (the lab's boot: the stand-in firmware runs it, lab/nixos/firmware.sh)
#                 /run/booted-system := $out, then as test without the checks.
# Unit changes are judged as the real one judges them (compare_units,
# handle_modified_unit): a unit's file with its drop-ins (<unit>.d/*.conf) parsed,
# [Install] ignored, Description and the like ignored, X-Reload-Triggers, ExecReload and
# a mount's Options a reload; X-ReloadIfChanged reloads, X-RestartIfChanged=false is
# "NOT restarting", X-StopIfChanged=false restarts, else stop before activation and start
# after (a socket-activated service's socket instead). The start, restart and reload
# lists are kept in /run/nixos until each is done, so a killed switch is finished by the
# next one. Template instances are not judged (the real one judges them by their
# template).
set -u
out=@out@
systemd=@systemd@
installBootLoader=@installBootLoader@
preSwitchCheck=@preSwitchCheck@
PATH=$out/sw/bin
export PATH

usage() {
	cat >&2 <<EOF
Usage: switch-to-configuration [check|switch|boot|test|dry-activate]
check:        run pre-switch checks and exit
switch:       make the configuration the boot default and activate now
boot:         make the configuration the boot default
test:         activate the configuration, but don't make it the boot default
dry-activate: show what would be done if this configuration were activated
EOF
	exit 1
}

action=${1:-}
case "$action" in
check | switch | boot | test | dry-activate | stage2) ;;
*) usage ;;
esac
if [ "$(id -u)" != 0 ]; then
	echo "Error: switch-to-configuration must be run as the root user" >&2
	exit 1
fi
# die() in main.rs exits with errno: a failed stat of /etc/NIXOS leaves ENOENT (2).
if [ ! -f /etc/NIXOS ] && ! grep -Eq '^ID="?nixos"?$' /etc/os-release 2>/dev/null; then
	echo "This is not a NixOS installation!" >&2
	exit 2
fi
NIXOS_ACTION=$action
export NIXOS_ACTION

mkdir -p /run/nixos
chmod 755 /run/nixos
# flock(LOCK_EX|LOCK_NB) on the lock file, held until the end; die() exits with errno:
# EWOULDBLOCK (11). The lock's descriptor is closed for every command run below
# (9>&-), as Rust opens files close-on-exec.
exec 9>>/run/nixos/switch-to-configuration.lock || {
	echo "Could not open lock" >&2
	exit 1
}
if ! flock -n 9; then
	echo "Could not acquire lock" >&2
	exit 11
fi

if [ "$action" != stage2 ] && [ "${NIXOS_NO_CHECK:-}" != 1 ]; then
	if ! "$preSwitchCheck" "$out" "$action" 9>&-; then
		echo "Pre-switch checks failed" >&2
		exit 1
	fi
fi
[ "$action" = check ] && exit 0

if [ "$action" = switch ] || [ "$action" = boot ]; then
	if ! "$installBootLoader" "$out" 9>&-; then
		echo "Failed to install bootloader" >&2
		exit 1
	fi
fi
# syncfs of the store, as the real one does before a new configuration might hang.
[ "${NIXOS_NO_SYNC:-}" = 1 ] || sync -f /nix/store 9>&-
[ "$action" = boot ] && exit 0

old=$(readlink -f /run/current-system 2>/dev/null || true)
if [ "$action" != stage2 ]; then
	[ -f "$out/init-interface-version" ] || {
		echo "Error: File init-interface-version should exist" >&2
		exit 1
	}
	if [ "$(cat /run/current-system/init-interface-version 2>/dev/null)" != "$(cat "$out/init-interface-version")" ]; then
		cat >&2 <<'EOF'
Warning: the new NixOS configuration has an ‘init’ that is
incompatible with the current configuration.  The new configuration
won't take effect until you reboot the system.

EOF
		exit 100
	fi
fi
if [ "$action" = stage2 ]; then
	ln -sfn "$out" /run/booted-system.tmp && mv -T /run/booted-system.tmp /run/booted-system
	old=""
fi

cur=/run/systemd/system    # the stand-in's /etc/systemd/system
new=$out/etc/systemd/system
start_list=/run/nixos/start-list
restart_list=/run/nixos/restart-list
reload_list=/run/nixos/reload-list

# Sets of unit names are newline-separated strings.
has() { # set name (no pipe: a unit ignores SIGPIPE, so an early reader's end is an error)
	case "
$1
" in *"
$2
"*) return 0 ;; esac
	return 1
}
add() { # set name: echo the set with name
	if [ -z "$1" ]; then printf '%s' "$2"; elif has "$1" "$2"; then printf '%s' "$1"; else printf '%s\n%s' "$1" "$2"; fi
}
del() { printf '%s\n' "$1" | grep -Fxv -- "$2" || true; }
minus() { # set A without the names of set B
	printf '%s\n' "$1" | while IFS= read -r n; do [ -z "$n" ] || has "$2" "$n" || echo "$n"; done
}
shown() { # "a, b" of a set, sorted as the real one sorts (case-insensitive)
	printf '%s\n' "$1" | grep -v '^$' | sort -f | awk 'NR > 1 { printf ", " } { printf "%s", $0 } END { if (NR) print "" }'
}
record() { [ "$action" = dry-activate ] || printf '%s\n' "$2" >>"$1"; }
unrecord() {
	[ "$action" = dry-activate ] || [ ! -f "$1" ] || { grep -Fxv -- "$2" "$1" >"$1.tmp" || true; mv "$1.tmp" "$1"; }
}
list_of() { cat "$1" 2>/dev/null | grep -v '^$' | sort -u || true; }

# parse UNIT_FILE: the unit with its drop-ins as "Section<TAB>Key<TAB>values" lines
# (values joined by \037; an empty value clears what came before; [Install] skipped),
# as parse_unit and parse_systemd_ini read them.
parse() {
	files=$1
	for d in "$1.d"/*.conf; do [ -f "$d" ] && files="$files
$d"; done
	printf '%s\n' "$files" | while IFS= read -r f; do cat "$f"; echo; done | awk '
		/^[ \t]*[#;]/ || /^[ \t]*$/ { next }
		/^\[.*\]$/ { sec = substr($0, 2, length($0) - 2); next }
		sec == "Install" || sec == "" { next }
		{
			i = index($0, "="); if (!i) next
			k = substr($0, 1, i - 1); v = substr($0, i + 1)
			gsub(/^[ \t]+|[ \t]+$/, "", k); gsub(/^[ \t]+|[ \t]+$/, "", v)
			key = sec "\t" k
			if (!(key in vals)) order[++n] = key
			if (v == "") vals[key] = ""; else vals[key] = (vals[key] == "" ? v : vals[key] "\037" v)
			seen[key] = 1
		}
		END { for (i = 1; i <= n; i++) print order[i] "\t" vals[order[i]] }'
}

# bool PARSED SECTION KEY DEFAULT: parse_systemd_bool (the last value).
bool() {
	v=$(printf '%s\n' "$1" | awk -F '\t' -v s="$2" -v k="$3" '$1 == s && $2 == k { n = split($3, a, "\037"); print a[n] }')
	if [ -z "$v" ]; then [ "$4" = true ]; return; fi
	case $v in 1 | yes | true | on) return 0 ;; *) return 1 ;; esac
}

# compare OLD_PARSED NEW_PARSED: equal, reload or restart (compare_units).
compare() {
	{
		printf '%s\n' "$1" | sed 's/^/old\t/'
		printf '%s\n' "$2" | sed 's/^/new\t/'
	} | awk -F '\t' '
		BEGIN {
			split("X-Reload-Triggers Description Documentation OnFailure OnSuccess OnFailureJobMode IgnoreOnIsolate StopWhenUnneeded RefuseManualStart RefuseManualStop AllowIsolate CollectMode SourcePath", ig, " ")
			for (i in ig) ignore[ig[i]] = 1
		}
		NF < 3 { next }
		{ key = $2 "\t" $3; if (!(key in keys)) { keys[key] = 1; ks[++n] = key }; v[$1, key] = $4; has[$1, key] = 1 }
		END {
			r = "equal"
			for (i = 1; i <= n; i++) {
				key = ks[i]; split(key, sk, "\t"); s = sk[1]; k = sk[2]
				o = has["old", key]; w = has["new", key]
				if (o && w && v["old", key] == v["new", key]) continue
				if (s == "Unit" && k == "X-Reload-Triggers") { r = "reload"; continue }
				if (s == "Unit" && (k in ignore)) continue
				if (s == "Service" && k == "ExecReload") { if (w) r = "reload"; continue }
				if (s == "Mount" && k == "Options" && o && w) { r = "reload"; continue }
				print "restart"; exit
			}
			print r
		}'
}

is_active() { # the unit is active or activating
	case $(systemctl show -p ActiveState --value "$1" 2>/dev/null) in active | activating) return 0 ;; *) return 1 ;; esac
}
unit_states() { # "unit state" of the units not inactive, as get_active_units lists them
	systemctl list-units --all --plain --no-legend --no-pager 2>/dev/null | awk '$3 != "inactive" && $2 != "not-found" { print $1, $3 }'
}
# same UNIT_FILE UNIT_FILE: the same text, drop-ins included (no need to parse them).
same() { [ "$(cat "$1" "$1".d/*.conf 2>/dev/null)" = "$(cat "$2" "$2".d/*.conf 2>/dev/null)" ]; }
managed_units() { # the units the running system put in place (links into the store)
	for f in "$cur"/*; do
		[ -L "$f" ] || continue
		case $(readlink "$f") in /nix/store/*) ;; *) continue ;; esac
		n=${f##*/}
		case $n in *.d | *.wants | *@.*) continue ;; esac
		echo "$n"
	done
}

to_stop=""
to_skip=""
to_filter=""
to_start=$(list_of $start_list)
to_restart=$(list_of $restart_list)
to_reload=$(list_of $reload_list)

# handle_modified_unit UNIT PARSED_NEW
modified() {
	u=$1
	case $u in
	sysinit.target | basic.target | multi-user.target | graphical.target | *.path | *.slice) return ;;
	*.mount)
		to_restart=$(add "$to_restart" "$u"); record $restart_list "$u"; return ;;
	*.socket) return ;;
	esac
	if bool "$2" Service X-ReloadIfChanged false && ! has "$to_restart" "$u" && ! has "$to_stop" "$u"; then
		to_reload=$(add "$to_reload" "$u"); record $reload_list "$u"
	elif ! bool "$2" Service X-RestartIfChanged true || bool "$2" Unit RefuseManualStop false || bool "$2" Unit X-OnlyManualStart false; then
		to_skip=$(add "$to_skip" "$u")
	else
		case $u in *.service) service=1 ;; *) service="" ;; esac
		if ! bool "$2" Service X-StopIfChanged true || [ -z "$service" ]; then
			to_restart=$(add "$to_restart" "$u"); record $restart_list "$u"
		else
			socket_activated=""
			sockets=$(printf '%s\n' "$2" | awk -F '\t' '$1 == "Service" && $2 == "Sockets" { gsub("\037", " ", $3); print $3 }')
			[ -n "$sockets" ] || sockets=${u%.service}.socket
			for s in $sockets; do
				if has "$active" "$s"; then
					to_stop=$(add "$to_stop" "$s")
					if [ -e "$new/$s" ]; then
						to_start=$(add "$to_start" "$s"); record $start_list "$s"
						socket_activated=1
					fi
				elif [ -e "$new/$s" ]; then
					socket_activated=1
				fi
			done
			bool "$2" Service X-NotSocketActivated false && socket_activated=""
			if [ -z "$socket_activated" ]; then
				to_start=$(add "$to_start" "$u"); record $start_list "$u"
			fi
			to_stop=$(add "$to_stop" "$u")
		fi
		if has "$to_reload" "$u"; then to_reload=$(del "$to_reload" "$u"); unrecord $reload_list "$u"; fi
	fi
}

states=$(unit_states)
active=$(printf '%s\n' "$states" | awk 'NF { print $1 }')
# collect_unit_changes: each active (or activating) unit the running system put in place.
for u in $(managed_units); do
	has "$states" "$u active" || has "$states" "$u activating" || continue
	if [ ! -e "$new/$u" ] || [ "$(readlink -f "$new/$u")" = /dev/null ]; then
		bool "$(parse "$cur/$u")" Unit X-StopOnRemoval true && to_stop=$(add "$to_stop" "$u")
	elif [ "${u%.target}" != "$u" ]; then
		p=$(parse "$new/$u")
		case $u in suspend.target | hibernate.target | hybrid-sleep.target) ;; *)
			if ! bool "$p" Unit RefuseManualStart false && ! bool "$p" Unit X-OnlyManualStart false; then
				to_start=$(add "$to_start" "$u"); record $start_list "$u"; to_filter=$(add "$to_filter" "$u")
			fi ;;
		esac
		bool "$p" Unit X-StopOnReconfiguration false && to_stop=$(add "$to_stop" "$u")
	elif ! same "$cur/$u" "$new/$u"; then
		p=$(parse "$new/$u")
		case $(compare "$(parse "$cur/$u")" "$p") in
		restart) modified "$u" "$p" ;;
		reload) has "$to_restart" "$u" || { to_reload=$(add "$to_reload" "$u"); record $reload_list "$u"; } ;;
		esac
	fi
done
# New units come up with the target that wants them, as NixOS starts its active targets.
# At boot that target waits for the stage 2 itself: the stage 2 starts the units it
# wants instead.
if [ "$action" = stage2 ]; then
	for f in "$new"/multi-user.target.wants/*; do
		[ -e "$f" ] && to_start=$(add "$to_start" "${f##*/}")
	done
else
	to_start=$(add "$to_start" multi-user.target)
	to_filter=$(add "$to_filter" multi-user.target)
fi

# Should systemd re-execute? The real one compares PID 1's binary with the new
# systemd's; PID 1 here is Debian's binary whatever the system, so the running systemd is
# the one whose bin directory the units' PATH names (the drop-in below), which the
# stand-in rewrites when it re-executes PID 1, as a new systemd brings its own PATH.
unit_path=/etc/systemd/system.conf.d/nixos-unit-path.conf
running_systemd=$(sed -n 's|^DefaultEnvironment=PATH=\(.*\)/bin/$|\1|p' $unit_path 2>/dev/null)
new_systemd=$(readlink -f "$systemd")
restart_systemd=""
[ "$(readlink -f "$running_systemd" 2>/dev/null)" = "$new_systemd" ] || restart_systemd=1

stop_shown=$(minus "$to_stop" "$to_filter")

if [ "$action" = dry-activate ]; then
	[ -z "$stop_shown" ] || echo "would stop the following units: $(shown "$stop_shown")" >&2
	[ -z "$to_skip" ] || echo "would NOT stop the following changed units: $(shown "$to_skip")" >&2
	echo "would activate the configuration..." >&2
	[ -x "$out/dry-activate" ] && "$out/dry-activate" "$out" 9>&-
	[ -z "$restart_systemd" ] || echo "would restart systemd" >&2
	[ -z "$to_reload" ] || echo "would reload the following units: $(shown "$to_reload")" >&2
	[ -z "$to_restart" ] || echo "would restart the following units: $(shown "$to_restart")" >&2
	s=$(minus "$to_start" "$to_filter")
	[ -z "$s" ] || echo "would start the following units: $(shown "$s")" >&2
	exit 0
fi

if [ -n "$to_stop" ]; then
	[ -z "$stop_shown" ] || echo "stopping the following units: $(shown "$stop_shown")" >&2
	systemctl stop $to_stop 9>&- >/dev/null 2>&1
fi
[ -z "$to_skip" ] || echo "NOT restarting the following changed units: $(shown "$to_skip")" >&2

exit_code=0
# The activation script (activation-script.nix): its snippets, then
# /run/current-system := this system whatever they did, and their status.
echo "activating the configuration..." >&2
if [ -e "$out/activate" ]; then
	if ! "$out/activate" "$out" 9>&-; then
		echo "Failed to run activate script" >&2
		exit_code=2
	fi
fi

# The new units in place (what activation's /etc does on NixOS): the running system's
# links go, the new system's come, with their drop-in directories and the units
# multi-user.target wants.
mkdir -p "$cur/multi-user.target.wants"
for f in "$cur"/* "$cur"/multi-user.target.wants/*; do
	[ -L "$f" ] || continue
	case $(readlink "$f") in /nix/store/*) rm -f "$f" ;; esac
done
for f in "$new"/*; do
	n=${f##*/}
	[ "$n" = multi-user.target.wants ] && continue
	[ -e "$f" ] || [ -L "$f" ] || continue
	ln -sfn "$f" "$cur/$n"
done
for f in "$new"/multi-user.target.wants/*; do
	[ -e "$f" ] || continue
	ln -sfn "$(readlink -f "$f")" "$cur/multi-user.target.wants/${f##*/}"
done

# Restart systemd if necessary (before the reload, as the real one does). The new
# systemd's PATH for units comes with it.
if [ -n "$restart_systemd" ]; then
	echo "restarting systemd..." >&2
	mkdir -p "${unit_path%/*}"
	printf '%s\n' "# A unit's PATH on NixOS: systemd's own bin directory only (the running system's systemd)." \
		'[Manager]' "DefaultEnvironment=PATH=$new_systemd/bin/" >"$unit_path.tmp" &&
		mv "$unit_path.tmp" "$unit_path"
	systemctl daemon-reexec 9>&-
fi
systemctl reset-failed 9>&- >/dev/null 2>&1
systemctl daemon-reload 9>&-

# Reload units that need it; one that is no longer active is started instead.
for u in $to_reload; do
	is_active "$u" && continue
	p=$(parse "$new/$u" 2>/dev/null)
	if [ -e "$new/$u" ] && { ! bool "$p" Unit RefuseManualStart false || bool "$p" Unit X-OnlyManualStart false; }; then
		to_start=$(add "$to_start" "$u"); record $start_list "$u"
	fi
	to_reload=$(del "$to_reload" "$u"); unrecord $reload_list "$u"
done
failed_jobs=""
# run_jobs VERB UNIT...: the jobs at once, as the real one submits them and waits for all.
run_jobs() {
	verb=$1
	shift
	[ $# -gt 0 ] || return 0
	systemctl "$verb" "$@" 9>&- >/dev/null 2>/run/nixos/.jobs.err
	# systemctl names each job that did not succeed ("Job for X failed ...").
	for u in $(sed -n 's/^Job for \([^ ]*\) failed.*/\1/p; s/^Job for \([^ ]*\) canceled.*/\1/p' /run/nixos/.jobs.err); do
		echo "Failed to $verb $u" >&2
		failed_jobs=1
	done
	if grep '^Failed to ' /run/nixos/.jobs.err >&2; then failed_jobs=1; fi
	rm -f /run/nixos/.jobs.err
}
if [ -n "$to_reload" ]; then
	echo "reloading the following units: $(shown "$to_reload")" >&2
	run_jobs reload $to_reload
	rm -f $reload_list
fi
if [ -n "$to_restart" ]; then
	echo "restarting the following units: $(shown "$to_restart")" >&2
	run_jobs restart $to_restart
	rm -f $restart_list
fi
s=$(minus "$to_start" "$to_filter")
[ -z "$s" ] || echo "starting the following units: $(shown "$s")" >&2
run_jobs start $to_start
rm -f $start_list
[ -z "$failed_jobs" ] || exit_code=4

# Let systemd settle, then every failed unit of the node (not only this system's), and
# services in auto-restart after a failure.
sleep 1
failed=""
new_units=""
now=$(systemctl list-units --all --plain --no-legend --no-pager 2>/dev/null | awk '$3 != "inactive" && $2 != "not-found" { print $1, $3, $4 }')
while read -r u st sub; do
	[ -n "$u" ] || continue
	if [ "$st" = failed ]; then
		failed=$(add "$failed" "$u")
		continue
	fi
	if [ "$sub" = auto-restart ] && [ "${u%.service}" != "$u" ] &&
		[ "$(systemctl show -p ExecMainStatus --value "$u")" != 0 ]; then
		failed=$(add "$failed" "$u")
		continue
	fi
	case $u in *.scope) continue ;; esac
	has "$active" "$u" || new_units=$(add "$new_units" "$u")
done <<UNITS
$now
UNITS
[ -z "$new_units" ] || echo "the following new units were started: $(shown "$new_units")" >&2
if [ -n "$failed" ]; then
	echo "warning: the following units failed: $(shown "$failed")" >&2
	"$systemd/bin/systemctl" status --no-pager --full $failed 9>&-
	exit_code=4
fi
exit $exit_code
