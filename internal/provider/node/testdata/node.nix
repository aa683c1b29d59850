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
#   slowSwitch seconds: `switch` waits that long before it activates anything (a switch
#             a deploy can be cut off in, or a later run can arrive during).
#   seed      any string, for fresh store paths.
# Its sw is a default NixOS system's (lab/closures' nixosPath: the commands of
# lab/nixos/default-commands), as every NixOS system's is; a copy of this file outside
# the repository (the evaluation tests make some) has an empty one.
{ planFile ? "", brick ? "", lockout ? "", drop ? "", marker ? "", slowStop ? "", slowSwitch ? "", seed ? "", system ? builtins.currentSystem }:
let
  plan = if planFile == "" then "{}" else builtins.readFile planFile;
  closures = ../../../../lab/closures/default.nix;
  sw = if builtins.pathExists closures then (import closures { }).nixosPath else "";
in
derivation {
  name = "nixos-system-fedi-acc${if brick == "1" then "-brick" else ""}${if lockout == "1" then "-lockout" else ""}";
  inherit system seed plan brick lockout drop marker slowStop slowSwitch sw;
  builder = "/bin/sh";
  args = [ "-c" ''
    set -e
    PATH=/usr/bin:/bin
    mkdir -p $out/bin $out/etc/systemd/system/multi-user.target.wants $out/etc/fediversity
    if [ -n "$sw" ]; then ln -s $sw $out/sw; else mkdir -p $out/sw/bin; fi
    printf '%s' "$plan" > $out/etc/fediversity/node-plan.json
    echo "25.05.fediversity-acc" > $out/nixos-version
    cat > $out/etc/systemd/system/fedi-acc.service <<EOF_UNIT
    [Unit]
    Description=fediversity acceptance unit
    [Service]
    Type=exec
    ExecStart=/bin/sleep infinity
    EOF_UNIT
    ln -s ../fedi-acc.service $out/etc/systemd/system/multi-user.target.wants/fedi-acc.service
    cat > $out/bin/switch-to-configuration <<EOF_SWITCH
    #!/bin/sh
    set -u
    PATH=/usr/sbin:/usr/bin:/sbin:/bin
    case "\$1" in
    boot) mkdir -p /nix/var/nix; echo $out > /nix/var/nix/fediversity-boot-entry; exit 0 ;;
    dry-activate) exit 0 ;;
    switch|test) ;;
    *) echo "usage: \$0 switch|boot|test|dry-activate" >&2; exit 1 ;;
    esac
    if [ -n "$slowSwitch" ]; then sleep "$slowSwitch"; fi
    ln -sfn $out /run/current-system.tmp && mv -T /run/current-system.tmp /run/current-system
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
    exit 0
    EOF_SWITCH
    chmod +x $out/bin/switch-to-configuration
  '' ];
}
