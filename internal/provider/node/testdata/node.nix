# A stand-in NixOS toplevel for the provider's acceptance tests, built without nixpkgs
# (like lab/closures): one healthy unit, plus
#   planFile  the node plan the provider wrote: copied to
#             $out/etc/fediversity/node-plan.json, so a test can read back what the
#             build was given;
#   brick     "1": `switch` powers the node off right after pointing
#             /run/current-system at $out, i.e. a closure that leaves the node
#             unreachable (snapshot restore test).
#   lockout   "1": `switch` stops sshd once it has activated: sessions already open
#             go on, new logins are refused (the node-side revert test). Every
#             other build of this file starts sshd again when it is switched to, as
#             a NixOS system whose sshd configuration changed back would.
#   drop      a file that a bricking `switch` removes before it powers the node off
#             (the restore space test: the file's blocks then belong to the rollback
#             point's snapshot alone, so the driver counts them in its size).
#   marker    a string a bricking `switch` writes to /var/lib/fediversity/marker before
#             it powers the node off (the data volume restore test).
#   slowStop  seconds: a bricking `switch` first starts a unit whose stop takes that
#             long, so the node is seen shutting down (systemd says "stopping") for
#             the whole watch, as a loaded host's slow poweroff is.
#   activateFails "1": the activation fails as NixOS' does (exit 2, "Activation script
#             snippet 'fediSecrets' failed (1)", "Failed to run activate script"), after
#             /run/current-system points at $out, and the units still start.
#   initInterface a suffix of $out/init-interface-version ("systemd 2" + it, "systemd 2"
#             as NixOS writes it for systemd's interface version 2, and as every lab
#             node's first system has it): a switch or
#             test from a system whose version differs exits 100 before it activates
#             anything (switch-to-configuration-ng's init-interface check).
#   linkMAC   a hardware address: the system carries
#             etc/systemd/network/10-fedi-lan.link matching it with PermanentMACAddress=
#             (a NixOS `systemd.network.links` entry), so the deploy's hardware address
#             gate reads it.
#   neverActivates an exit code: `switch` and `test` exit with it before they change
#             anything (no /run/current-system, no units), after a line that says so: a
#             switch that never activated the new system.
#   slowSwitch seconds: `switch` waits that long before it activates anything (a switch
#             a deploy can be cut off in, or a later run can arrive during).
#   seed      any string, for fresh store paths.
# Its sw is a default NixOS system's (lab/closures' nixosPath: the commands of
# lab/nixos/default-commands), as every NixOS system's is; a copy of this file outside
# the repository (the evaluation tests make some) has an empty one.
# As switch-to-configuration-ng (pkgs/by-name/sw/switch-to-configuration-ng/src/main.rs)
# it takes /run/nixos/switch-to-configuration.lock (flock, non-blocking: "Could not
# acquire lock", exit 11, nothing changed), and `switch` makes $out the boot default at
# once (a GRUB-like loader: the boot loader installer's argument is the default entry),
# `test` does not.
{ planFile ? "", brick ? "", lockout ? "", drop ? "", marker ? "", slowStop ? "", activateFails ? "", initInterface ? "", linkMAC ? "", neverActivates ? "", slowSwitch ? "", seed ? "", system ? builtins.currentSystem }:
let
  plan = if planFile == "" then "{}" else builtins.readFile planFile;
  closures = ../../../../lab/closures/default.nix;
  sw = if builtins.pathExists closures then (import closures { }).nixosPath else "";
  # The lab's stand-in boot loader installer (systemd-boot entries from the system
  # profile's generations, or GRUB's default), which the node's stand-in firmware reads
  # at boot: a restored or rebooted node boots what `boot` installed, as a NixOS node
  # does. A copy of this file outside the repository has none.
  installer = ../../../../lab/closures/install-bootloader.sh;
  installBootloader = if builtins.pathExists installer then "${installer}" else "";
in
derivation {
  name = "nixos-system-fedi-acc${if brick == "1" then "-brick" else ""}${if lockout == "1" then "-lockout" else ""}";
  inherit system seed plan brick lockout drop marker slowStop activateFails initInterface linkMAC neverActivates slowSwitch sw installBootloader;
  builder = "/bin/sh";
  args = [ "-c" ''
    set -e
    PATH=/usr/bin:/bin
    mkdir -p $out/bin $out/etc/systemd/system/multi-user.target.wants $out/etc/fediversity
    if [ -n "$sw" ]; then ln -s $sw $out/sw; else mkdir -p $out/sw/bin; fi
    printf '%s' "$plan" > $out/etc/fediversity/node-plan.json
    echo "25.05.fediversity-acc" > $out/nixos-version
    printf 'systemd 2%s' "$initInterface" > $out/init-interface-version
    cat > $out/etc/systemd/system/fedi-acc.service <<EOF_UNIT
    [Unit]
    Description=fediversity acceptance unit
    [Service]
    Type=exec
    ExecStart=/bin/sleep infinity
    EOF_UNIT
    ln -s ../fedi-acc.service $out/etc/systemd/system/multi-user.target.wants/fedi-acc.service
    if [ -n "$linkMAC" ]; then
      mkdir -p $out/etc/systemd/network
      printf '[Match]\nPermanentMACAddress=%s\n\n[Link]\nName=fedilan\n' "$linkMAC" > $out/etc/systemd/network/10-fedi-lan.link
    fi
    cat > $out/bin/switch-to-configuration <<EOF_SWITCH
    #!/bin/sh
    set -u
    PATH=/usr/sbin:/usr/bin:/sbin:/bin
    mkdir -p /run/nixos
    exec 9>>/run/nixos/switch-to-configuration.lock
    flock -n 9 || { echo "Could not acquire lock" >&2; exit 11; }
    case "\$1" in
    boot)
      if [ -n "$installBootloader" ]; then /bin/sh $installBootloader $out || { echo "Failed to install bootloader" >&2; exit 1; }; fi
      mkdir -p /nix/var/nix; echo $out > /nix/var/nix/fediversity-boot-entry; exit 0 ;;
    dry-activate) exit 0 ;;
    switch|test) ;;
    stage2) ln -sfn $out /run/booted-system ;;
    *) echo "usage: \$0 switch|boot|test|dry-activate" >&2; exit 1 ;;
    esac
    if [ -n "$slowSwitch" ]; then sleep "$slowSwitch"; fi
    if [ "\$1" = switch ]; then mkdir -p /nix/var/nix; echo $out > /nix/var/nix/fediversity-boot-entry; fi
    if [ -n "$neverActivates" ]; then
      echo "fedi-acc: stopping before the activation: nothing of $out was activated" >&2
      exit $neverActivates
    fi
    if [ "\$1" != stage2 ] && [ -e /run/current-system/init-interface-version ] && [ "\$(cat /run/current-system/init-interface-version)" != "\$(cat $out/init-interface-version)" ]; then
      echo "Warning: the new NixOS configuration has an ‘init’ that is" >&2
      echo "incompatible with the current configuration.  The new configuration" >&2
      echo "won't take effect until you reboot the system." >&2
      exit 100
    fi
    ln -sfn $out /run/current-system.tmp && mv -T /run/current-system.tmp /run/current-system
    rc=0
    if [ "$activateFails" = 1 ]; then
      echo "fedi-secrets: cannot read /run/keys/fedi-age.key: No such file or directory" >&2
      echo "Activation script snippet 'fediSecrets' failed (1)" >&2
      echo "Failed to run activate script" >&2
      rc=2
    fi
    if [ "$brick" = 1 ]; then
      echo "bricking the node" >&2
      if [ -n "$drop" ]; then rm -f "$drop"; sync; fi
      if [ -n "$marker" ]; then printf '%s' "$marker" > /var/lib/fediversity/marker; sync; fi
      if [ -n "$slowStop" ]; then
        systemd-run --unit=fedi-slow-stop --property=ExecStop="/bin/sleep $slowStop" --property=TimeoutStopSec=$((slowStop + 30)) /bin/sleep infinity
      fi
      systemctl --no-block poweroff
      exit 0
    fi
    if [ "$lockout" = 1 ]; then
      echo "stopping sshd: new logins are refused from now on" >&2
      systemctl stop ssh.service
    else
      systemctl is-active --quiet ssh.service || systemctl start ssh.service
    fi
    mkdir -p /run/systemd/system
    ln -sfn $out/etc/systemd/system/fedi-acc.service /run/systemd/system/fedi-acc.service
    systemctl daemon-reload
    systemctl restart fedi-acc.service
    sleep 1
    systemctl is-failed --quiet fedi-acc.service && { echo "warning: the following units failed: fedi-acc.service" >&2; exit 4; }
    exit \$rc
    EOF_SWITCH
    chmod +x $out/bin/switch-to-configuration
  '' ];
}
