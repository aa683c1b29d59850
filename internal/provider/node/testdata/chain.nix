# A stand-in toplevel with a secret chain, for the fediversity_verdict acceptance tests,
# built without nixpkgs. Unlike lab/closures' chain scenarios, the members are oneshot
# units (RemainAfterExit=yes): `activating` while they work, `active` when done, which is
# what the deploy body's chain wait reads. The switch starts the wanted units with
# --no-block, so the chain is still coming up when the switch returns.
#   fetch: "ok"       3 steps of 1 s, then done
#          "fails"    1 step, then exit 1
#          "stuck"    never finishes and never changes state (no progress)
# secret-chain-install waits for fetch, takes 2 s and writes /run/secret; app.service
# fails (exit 1) while /run/secret is missing.
{ fetch ? "ok", seed ? "", system ? builtins.currentSystem }:
let
  # The lab's NixOS-shaped node gives a unit that sets no PATH systemd's bin directory
  # alone: these units get NixOS's default service PATH (as a NixOS module's service
  # does), and the switch names its tools by the default commands' store path.
  lab = import ../../../../lab/closures { inherit seed system; };
  servicePath = "${lab.servicePath}/bin:${lab.nixosSystemd}/bin";
  fetchExec = {
    ok = "/bin/sh -c 'for i in 1 2 3; do sleep 1; echo $$i > /run/fediversity-chain/fetch.progress; done; touch /run/fediversity-chain/fetch.done'";
    fails = "/bin/sh -c 'sleep 1; echo 1 > /run/fediversity-chain/fetch.progress; exit 1'";
    stuck = "/bin/sleep infinity";
  }.${fetch};
in
derivation {
  name = "nixos-system-fedi-acc-chain-${fetch}";
  inherit system seed fetchExec servicePath;
  defaultCommands = "${lab.nixosPath}/bin";
  builder = "/bin/sh";
  args = [ "-c" ''
    set -e
    PATH=/usr/bin:/bin
    u=$out/etc/systemd/system
    mkdir -p $out/bin $out/sw/bin $u/multi-user.target.wants
    echo "25.05.fediversity-acc-chain" > $out/nixos-version
    cat > $u/secret-chain-fetch.service <<EOF_UNIT
    [Service]
    Environment=PATH=$servicePath
    Type=oneshot
    RemainAfterExit=yes
    ExecStartPre=/bin/mkdir -p /run/fediversity-chain
    ExecStart=$fetchExec
    EOF_UNIT
    cat > $u/secret-chain-install.service <<EOF_UNIT
    [Service]
    Environment=PATH=$servicePath
    Type=oneshot
    RemainAfterExit=yes
    ExecStart=/bin/sh -c 'while [ ! -e /run/fediversity-chain/fetch.done ]; do sleep 0.5; done; sleep 2; echo s3cret > /run/secret.tmp && mv /run/secret.tmp /run/secret'
    EOF_UNIT
    cat > $u/app.service <<EOF_UNIT
    [Service]
    Environment=PATH=$servicePath
    Type=exec
    ExecStart=/bin/sh -c 'test -e /run/secret || { echo "no /run/secret yet" >&2; exit 1; }; exec sleep infinity'
    EOF_UNIT
    for n in secret-chain-fetch secret-chain-install app; do
      ln -s ../$n.service $u/multi-user.target.wants/$n.service
    done
    cat > $out/bin/switch-to-configuration <<EOF_SWITCH
    #!/bin/sh
    set -u
    PATH=$defaultCommands
    case "\$1" in
    boot|dry-activate) exit 0 ;;
    switch|test) ;;
    *) echo "usage: \$0 switch|boot|test|dry-activate" >&2; exit 1 ;;
    esac
    ln -sfn $out /run/current-system.tmp && mv -T /run/current-system.tmp /run/current-system
    rm -rf /run/secret /run/fediversity-chain
    mkdir -p /run/systemd/system
    for n in secret-chain-fetch secret-chain-install app; do
      systemctl stop \$n.service >/dev/null 2>&1
      ln -sfn $u/\$n.service /run/systemd/system/\$n.service
    done
    systemctl daemon-reload
    systemctl reset-failed secret-chain-fetch.service secret-chain-install.service app.service >/dev/null 2>&1
    for n in app secret-chain-fetch secret-chain-install; do
      systemctl start --no-block \$n.service
    done
    exit 0
    EOF_SWITCH
    chmod +x $out/bin/switch-to-configuration
  '' ];
}
