# Stand-ins for NixOS system toplevels, built WITHOUT nixpkgs:
#   nix-build --option sandbox false lab/closures -A good [--argstr seed X]
# (as root without a nixbld group also: --option build-users-group "").
#
# Each attribute is a toplevel with what a deployer touches of a real one:
#   $out/bin/switch-to-configuration {switch,boot,test,dry-activate}  (./switch-to-configuration.sh)
#   $out/nixos-version, $out/sw/bin (the default commands of a NixOS system,
#   lab/nixos/default-commands, and the scenario's tools), $out/systemd (the system's
#   systemd, whose bin/ is a unit's whole PATH), $out/etc/systemd/system/*.service,
#   $out/etc/systemd/system/multi-user.target.wants/ (the units the closure wants),
#   $out/activate (optional, run by switch/test before the units start).
# The closure is: toplevel -> system-path (sw: the default commands and fedi-tools),
# systemd-252, fedi-payload (bytes to copy). The default commands and systemd link to
# the Debian node's binaries: the node is Debian shaped like NixOS (lab/lab.sh).
#
# seed: any string; a different seed gives different store paths for every derivation
#   but the shared systemd-252 and the default commands' system-path (every lab node has
#   them from its first system, nixos-base), so a test can force a copy of a closure the
#   node has never seen but for those two.
# planFile: a node plan (JSON) that `bootable` copies to $out/etc/fediversity/node-plan.json,
#   as the provider hands it to a build (--argstr planFile): a node image built from a
#   submission (modules/k8s with a `build`) then carries its own node's plan. Empty: none.
# switchDelay: seconds the slow-switch activation takes.
# payloadKiB: size of the payload path (for copy benchmarks).
#
# Secret chain scenarios (verdict-only tests): the chain members are listed in order in
# $out/etc/fediversity/secret-chain (one unit name a line); each member writes its
# progress counter to /run/fediversity-chain/<unit>.progress; the chain's product is
# /run/secret, which app.service needs (it exits 1 without it). $out/activate removes
# /run/secret and /run/fediversity-chain, so each switch starts the chain afresh.
{ seed ? "", switchDelay ? "15", payloadKiB ? "256", planFile ? "", system ? builtins.currentSystem
, spireAgent ? "", spireCluster ? "", spireServer ? "", spireServerPort ? "" }:
let
  drv = name: script: attrs: derivation ({
    inherit name system seed;
    builder = "/bin/sh";
    args = [ "-c" ("set -e; PATH=/usr/bin:/bin; " + script) ];
  } // attrs);

  tools = drv "fedi-tools" ''
    mkdir -p $out/bin
    printf '#!/bin/sh\nexec sleep infinity\n' > $out/bin/fedi-idle
    printf '#!/bin/sh\necho "hello from the closure ($0)"\n' > $out/bin/fedi-hello
    printf '#!/bin/sh\necho "fedi-tools seed=%s"\n' "$seed" > $out/bin/fedi-version
    # fedi-chain-step UNIT STEPS DELAY [NEEDS [PRODUCT]]: waits for file NEEDS (if given),
    # counts STEPS steps DELAY seconds apart writing its progress counter, then writes
    # <unit>.done and PRODUCT (if given).
    cat > $out/bin/fedi-chain-step <<'SH'
    #!/bin/sh
    set -eu
    unit=$1 steps=$2 delay=$3 needs=''${4:-} product=''${5:-}
    d=/run/fediversity-chain
    mkdir -p $d
    if [ -n "$needs" ]; then
      while [ ! -e "$needs" ]; do sleep 0.5; done
    fi
    i=0
    while [ $i -lt $steps ]; do
      sleep $delay
      i=$((i + 1))
      echo $i > $d/$unit.progress
    done
    touch $d/$unit.done
    if [ -n "$product" ]; then echo s3cret > "$product.tmp" && mv "$product.tmp" "$product"; fi
    SH
    chmod +x $out/bin/*
  '' { };

  # A derivation every stand-in system shares whatever the seed (the system's systemd
  # and its default commands): the generations of one nixpkgs share them too.
  shared = name: script: derivation {
    inherit name system;
    builder = "/bin/sh";
    args = [ "-c" ("set -e; PATH=/usr/bin:/bin; " + script) ];
  };

  # The commands a default NixOS system has on PATH (see that file).
  defaultCommands = ../nixos/default-commands;

  # debianBin CMD: link $out/bin/CMD to the Debian node's binary of that name (the lab's
  # node is a Debian system shaped like NixOS: /lib and /usr stay, only PATH changes).
  # The builder's Debian is the node's (the lab image builds the first system with the
  # image's own nix; lab/install-host.sh installs the same packages on the deployer), so
  # a command the builder lacks is a fault of the lab, not a link that dangles on the node.
  debianBin = ''
    debianBin() {
      for d in /usr/bin /usr/sbin; do
        if [ -e "$d/$1" ]; then ln -s "$d/$1" "$out/bin/$1"; return 0; fi
      done
      echo "the lab's NixOS stand-in: no command $1 on this Debian system (run lab/install-host.sh)" >&2
      exit 1
    }
  '';

  # The system's systemd, as a NixOS toplevel links it ($out/systemd). nixpkgs builds
  # systemd with "<systemd>/bin/" as its only default PATH
  # (pkgs/os-specific/linux/systemd/default.nix), so a unit (systemd-run's included)
  # finds systemd's own commands and nothing else: the lab image's
  # /etc/systemd/system.conf.d/nixos-unit-path.conf gives every unit this bin directory
  # as PATH. bin/ holds the systemd group of lab/nixos/default-commands, each linked to
  # the node's Debian binary, and bootctl, the lab's stand-in boot loader: it answers as
  # systemd's bootctl does for systemd-boot (activation reboot's one-shot entry). The
  # Boot Loader Interface's EFI variables are files in /var/lib/fediversity-standin-efi
  # (they outlive a reboot, as EFI variables do); the stand-in stage 2 reads them at boot
  # (switch-to-configuration.sh).
  nixosSystemd = shared "systemd-252" (debianBin + ''
    mkdir -p $out/bin
    awk '/config[.]systemd[.]package/ { s = 1; next } s && /^$/ { exit } s && !/^#/ { print }' ${defaultCommands} > commands
    while read -r c; do
      [ "$c" = bootctl ] || debianBin "$c"
    done < commands
    cat > $out/bin/bootctl <<'SH'
    #!/bin/sh
    PATH=/usr/bin
    efi=/var/lib/fediversity-standin-efi
    case "''${1:-}" in
    is-installed) echo yes ;;
    --print-boot-path) echo /boot ;;
    set-default | set-oneshot)
      v=LoaderEntryDefault; [ "$1" = set-oneshot ] && v=LoaderEntryOneShot
      mkdir -p $efi
      if [ -z "''${2:-}" ]; then rm -f $efi/$v; exit 0; fi
      [ -f "/boot/loader/entries/$2" ] || { echo "bootctl: no boot loader entry $2" >&2; exit 1; }
      echo "$2" > $efi/$v.tmp && mv $efi/$v.tmp $efi/$v ;;
    *) echo "bootctl (lab stand-in): not supported: $*" >&2; exit 1 ;;
    esac
    SH
    chmod +x $out/bin/bootctl
  '');

  # The system path (/run/current-system/sw) of a default NixOS system: the commands of
  # lab/nixos/default-commands and no others (system-path.nix). systemd's come from
  # nixosSystemd; sh is bash, as bashInteractive's is; nixos-version reads the running
  # system's version, as nixos/modules/installer/tools/nixos-version.sh does.
  nixosPath = shared "system-path" (debianBin + ''
    mkdir -p $out/bin
    grep -v -e '^#' -e '^$' ${defaultCommands} > commands
    while read -r c; do
      if [ -e "${nixosSystemd}/bin/$c" ]; then
        ln -s "${nixosSystemd}/bin/$c" "$out/bin/$c"
      elif [ "$c" = sh ]; then
        ln -s /usr/bin/bash $out/bin/sh
      elif [ "$c" = nixos-version ]; then
        printf '#!/bin/sh\nread -r v < /run/current-system/nixos-version && echo "$v"\n' > $out/bin/nixos-version
        chmod +x $out/bin/nixos-version
      else
        debianBin "$c"
      fi
    done < commands
  '');

  # A stand-in system's sw: the default commands and the scenario's own tools (they are
  # what environment.systemPackages adds to a real system).
  systemPath = extra: if extra == null then nixosPath else drv "system-path" ''
    mkdir -p $out/bin
    for f in ${nixosPath}/bin/* ${extra}/bin/*; do ln -sfn "$f" $out/bin/; done
  '' { };

  # Parts of `bootable` (below): a systemd and a shell in the store, taken from the host.
  # fedi-systemd is the host's systemd (PID 1, systemd-shutdown and systemctl, and the
  # mount and umount systemd runs to unmount at shutdown) with every
  # shared library ldd names copied beside it, the ELF interpreter and the libraries'
  # search path of each rewritten into the store path (patchelf), so it runs with no /lib
  # and no /usr: what nixpkgs' systemd is, built from the host instead of from source.
  bootSystemd = drv "fedi-systemd" ''
    command -v patchelf >/dev/null || { echo "fedi-systemd: patchelf is missing; run lab/install-host.sh" >&2; exit 1; }
    mkdir -p $out/bin $out/lib/systemd
    cp /usr/lib/systemd/systemd /usr/lib/systemd/systemd-shutdown $out/lib/systemd/
    cp /usr/bin/systemctl /bin/mount /bin/umount $out/bin/
    for b in /usr/lib/systemd/systemd /usr/lib/systemd/systemd-shutdown /usr/bin/systemctl /bin/mount /bin/umount; do
      ldd $b | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
    done | sort -u | while read -r lib; do cp -L "$lib" $out/lib/; done
    cp -L /lib64/ld-linux-x86-64.so.2 $out/lib/
    chmod -R u+w $out
    for b in $out/lib/systemd/systemd $out/lib/systemd/systemd-shutdown $out/bin/*; do
      patchelf --set-interpreter $out/lib/ld-linux-x86-64.so.2 --set-rpath $out/lib $b
    done
    for lib in $out/lib/*.so*; do
      case $lib in */ld-linux-*) ;; *) patchelf --set-rpath $out/lib "$lib" ;; esac
    done
  '' { };

  # fedi-busybox: a static busybox (no interpreter, no libraries) for init's shell and
  # the node's tools (sh, cat, ls, ...).
  bootBusybox = drv "fedi-busybox" ''
    if ! [ -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then
      echo "fedi-busybox: /bin/busybox is missing or not static; run lab/install-host.sh (busybox-static)" >&2; exit 1
    fi
    mkdir -p $out/bin
    cp /bin/busybox $out/bin/busybox
    for a in sh cat ls mkdir ln rm echo sleep test true false mount ps id readlink find; do
      ln -s busybox $out/bin/$a
    done
  '' { };

  # spire-agent for bootable-spire-agent: the binary of lab/spire/build.sh (a path that
  # names its version) with its shared libraries beside it, its ELF interpreter and
  # each library it needs named by its store path. (Not a search path, as fedi-systemd
  # has: patchelf's --set-rpath leaves this stripped Go binary crashing at start.)
  bootSpireAgent = drv "fedi-spire-agent" ''
    [ -x "${spireAgent}" ] || { echo "fedi-spire-agent: spireAgent \"${spireAgent}\" is not an executable (lab/spire/build.sh prints its path)" >&2; exit 1; }
    mkdir -p $out/bin $out/lib
    cp "${spireAgent}" $out/bin/spire-agent
    cp -L /lib64/ld-linux-x86-64.so.2 $out/lib/
    chmod u+w $out/bin/spire-agent
    patchelf --set-interpreter $out/lib/ld-linux-x86-64.so.2 $out/bin/spire-agent
    ldd "${spireAgent}" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r soname lib; do
      cp -L "$lib" $out/lib/
      patchelf --replace-needed "$soname" "$out/lib/$(basename "$lib")" $out/bin/spire-agent
    done
    chmod -R u+w $out
    $out/bin/spire-agent --version
  '' { };

  # The script of `bootable` (see there), which bootable-spire-agent extends.
  bootableScript = ''
    u=$out/etc/systemd/system
    mkdir -p $u/multi-user.target.wants $out/sw/bin
    for t in multi-user.target basic.target sysinit.target sockets.target timers.target \
      paths.target slices.target local-fs.target local-fs-pre.target swap.target \
      halt.target systemd-halt.service shutdown.target final.target umount.target; do
      sed 's|^ExecStart=systemctl |ExecStart=${bootSystemd}/bin/systemctl |' /usr/lib/systemd/system/$t > $u/$t
    done
    ln -s multi-user.target $u/default.target
    cat > $u/fedi-hello.service <<EOF
    [Unit]
    Description=The stand-in system's one unit
    [Service]
    Type=oneshot
    RemainAfterExit=yes
    ExecStart=${bootBusybox}/bin/sh -c 'echo "hello from the closure" > /run/fedi-hello'
    EOF
    ln -s ../fedi-hello.service $u/multi-user.target.wants/fedi-hello.service
    for b in ${bootBusybox}/bin/*; do ln -s $b $out/sw/bin/; done
    ln -s ${bootSystemd}/bin/systemctl $out/sw/bin/systemctl
    printf 'NAME="Fediversity lab stand-in"\nID=fediversity-standin\nVERSION_ID=1\nPRETTY_NAME="Fediversity lab stand-in (bootable)"\n' > $out/etc/os-release
    echo "bootable-1" > $out/nixos-version
    echo "${system}" > $out/system
    cat > $out/init <<EOF
    #!${bootBusybox}/bin/sh
    # Stage 2 of the lab's bootable stand-in (lab/closures/default.nix).
    set -e
    PATH=${bootBusybox}/bin
    mkdir -p /etc/systemd /lib /bin /var/log /run /tmp
    # /var/run is a directory already when the pod mounts its service-account token
    # under /var/run/secrets before init runs; otherwise it is NixOS's link to /run.
    [ -e /var/run ] || ln -s /run /var/run
    ln -sfn $out/etc/systemd/system /etc/systemd/system
    ln -sfn $out/etc/os-release /etc/os-release
    ln -sfn ${bootSystemd}/lib/systemd /lib/systemd
    ln -sfn ${bootSystemd}/bin/mount /bin/mount
    ln -sfn ${bootSystemd}/bin/umount /bin/umount
    ln -sfn $out /run/current-system
    exec ${bootSystemd}/lib/systemd/systemd "\$@"
    EOF
    chmod +x $out/init
  '';

  payload = drv "fedi-payload" ''
    mkdir -p $out
    yes "fediversity payload $seed" | head -c $((payloadKiB * 1024)) > $out/blob
  '' { inherit payloadKiB; };

  # A stand-in kernel: $out/bzImage, $out/initrd and $out/lib/modules name its version.
  # A toplevel's kernel, initrd and kernel-modules link into it, as a NixOS system's
  # do, so two toplevels with one kernel compare equal (activation reboot-if-needed).
  linux = version: drv "fedi-linux-${version}" ''
    mkdir -p $out/lib/modules/${version}
    echo "stand-in kernel ${version}" > $out/bzImage
    echo "stand-in initrd ${version}" > $out/initrd
  '' { };

  # toplevel name version units wants activate; kernel: a `linux` (null: none);
  # inhibitors: lines `name=value` of $out/etc/switch-inhibitors (null: none);
  # bricksAtBoot: the stand-in stage 2 powers the node off instead of booting it.
  # extraTools: what the system adds to its sw beside the default commands (null: none);
  # withPayload: $out/payload links the payload (bytes for the copy tests).
  toplevel = { scenario, units, wants, version ? "1", activate ? null, chain ? [ ], kernel ? null, inhibitors ? null, bricksAtBoot ? false, extraTools ? tools, withPayload ? true }:
    let
      writeUnit = name: text: ''
        cat > $out/etc/systemd/system/${name} <<'FEDI_UNIT_EOF'
        ${text}
        FEDI_UNIT_EOF
      '';
      writes = builtins.concatStringsSep "\n" (builtins.attrValues (builtins.mapAttrs writeUnit units));
      links = builtins.concatStringsSep "\n" (map (u: "ln -s ../${u} $out/etc/systemd/system/multi-user.target.wants/${u}") wants);
    in
    drv "nixos-system-fedi-${scenario}-${version}" ''
      mkdir -p $out/bin $out/etc/systemd/system/multi-user.target.wants $out/etc/fediversity
      ln -s ${systemPath extraTools} $out/sw
      ln -s ${nixosSystemd} $out/systemd
      ${if withPayload then "ln -s ${payload} $out/payload" else ""}
      sed "s|@out@|$out|g" ${./switch-to-configuration.sh} > $out/bin/switch-to-configuration
      chmod +x $out/bin/switch-to-configuration
      echo "25.05.fediversity-standin-${scenario}-${version}" > $out/nixos-version
      ${writes}
      ${links}
      printf '%s\n' ${builtins.concatStringsSep " " chain} > $out/etc/fediversity/secret-chain
      ${if chain == [ ] then "rm $out/etc/fediversity/secret-chain" else ""}
      ${if kernel == null then "" else ''
        ln -s ${kernel}/bzImage $out/kernel
        ln -s ${kernel}/initrd $out/initrd
        ln -s ${kernel}/lib $out/kernel-modules
      ''}
      ${if inhibitors == null then "" else "printf '%s\\n' ${builtins.concatStringsSep " " inhibitors} > $out/etc/switch-inhibitors"}
      ${if bricksAtBoot then "touch $out/etc/fediversity-boot-bricks" else ""}
      ${if activate == null then "" else ''
        cat > $out/activate <<'FEDI_ACTIVATE_EOF'
        #!/bin/sh
        ${activate}
        FEDI_ACTIVATE_EOF
        chmod +x $out/activate
      ''}
      # Unit files and scripts name $out as @out@.
      for f in $out/etc/systemd/system/*.service $out/activate; do
        if [ -f "$f" ]; then sed -i "s|@out@|$out|g" "$f"; fi
      done
    '' { };

  service = { exec, type ? "exec", extraUnit ? "", extraService ? "" }: ''
    [Unit]
    Description=fediversity lab unit
    ${extraUnit}
    [Service]
    Type=${type}
    ExecStart=${exec}
    ${extraService}
  '';

  web = version: service {
    exec = "@out@/sw/bin/fedi-idle";
    extraService = "Environment=FEDI_VERSION=${version}";
  };
  setup = service {
    type = "oneshot";
    exec = "@out@/sw/bin/fedi-hello";
    extraService = "RemainAfterExit=yes";
  };
  base = version: { "fedi-web.service" = web version; "fedi-setup.service" = setup; };
  baseWants = [ "fedi-web.service" "fedi-setup.service" ];

  withUnit = scenario: name: text: toplevel {
    inherit scenario;
    units = base "1" // { ${name} = text; };
    wants = baseWants ++ [ name ];
  };

  chainUnits = { fetch ? "@out@/sw/bin/fedi-chain-step secret-chain-fetch.service 3 1" }: {
    "secret-chain-fetch.service" = service { exec = fetch; };
    "secret-chain-install.service" = service {
      exec = "@out@/sw/bin/fedi-chain-step secret-chain-install.service 2 1 /run/fediversity-chain/secret-chain-fetch.service.done /run/secret";
    };
    # The check is an ExecStartPre, so that the start job itself fails and the switch
    # sees app.service failed however busy the node is. (As the ExecStart of a Type=exec
    # unit it failed only after its process ran, which on a loaded machine came after
    # the switch's check.)
    "app.service" = service {
      exec = "@out@/sw/bin/fedi-idle";
      extraService = "ExecStartPre=/bin/sh -c 'test -e /run/secret || { echo \"no /run/secret yet\" >&2; exit 1; }'";
    };
  };
  chainScenario = scenario: fetch: toplevel {
    inherit scenario;
    units = base "1" // chainUnits { inherit fetch; };
    wants = baseWants ++ [ "secret-chain-fetch.service" "secret-chain-install.service" "app.service" ];
    chain = [ "secret-chain-fetch.service" "secret-chain-install.service" ];
    activate = "rm -rf /run/secret /run/fediversity-chain";
  };
  # A tiny HTTP responder on the node's 127.0.0.1:8080, from systemd's own socket
  # activation (the lab image has no HTTP server): fedi-http.socket accepts, each
  # connection runs fedi-http@.service with the socket as stdin/stdout. It answers 200
  # "fedi ok" once /run/fedi-http-ready exists (fedi-warmup.service writes it after
  # `warmup` seconds; activate removes it), else 503; `broken` makes it answer 500.
  httpScenario = scenario: { warmup ? "3", broken ? false }: toplevel {
    inherit scenario;
    units = base "1" // {
      "fedi-http.socket" = ''
        [Unit]
        Description=fediversity lab HTTP responder
        [Socket]
        ListenStream=127.0.0.1:8080
        Accept=yes
      '';
      "fedi-http@.service" = ''
        [Unit]
        Description=fediversity lab HTTP answer
        [Service]
        StandardInput=socket
        StandardOutput=socket
        ExecStart=/bin/sh -c 'while read -r l; do [ "$(printf %%s "$l" | tr -d "\r")" = "" ] && break; done; if ${if broken then "false" else "[ -e /run/fedi-http-ready ]"}; then printf "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nfedi ok\n"; elif [ -e /run/fedi-http-ready ]; then printf "HTTP/1.0 500 Internal Server Error\r\n\r\nbroken\n"; else printf "HTTP/1.0 503 Service Unavailable\r\n\r\nwarming up\n"; fi'
      '';
      "fedi-warmup.service" = service {
        exec = "/bin/sh -c 'sleep ${warmup}; touch /run/fedi-http-ready'";
      };
    };
    wants = baseWants ++ [ "fedi-http.socket" "fedi-warmup.service" ];
    activate = "rm -f /run/fedi-http-ready /run/fedi-warm-seen";
  };

  # The SPIRE lane's toplevel (see spire-chain below), with extra units.
  spireChain = scenario: extra: let
    agentConf = drv "fedi-spire-agent-conf" ''
      cat > $out <<'EOF'
      agent {
        data_dir = "/var/lib/spire/agent/data"
        server_address = "127.0.0.1"
        server_port = "8081"
        socket_path = "/run/spire-agent/api.sock"
        trust_bundle_path = "/var/lib/spire/agent/bundle.crt"
        trust_domain = "fediversity"
        join_token_file = "/var/lib/spire/agent/join-token"
      }
      plugins {
        NodeAttestor "join_token" {
          plugin_data {}
        }
        KeyManager "disk" {
          plugin_data { directory = "/var/lib/spire/agent/data" }
        }
        WorkloadAttestor "unix" {
          plugin_data {}
        }
      }
      EOF
    '' { };
    # At most 120 tries a second apart, so a node whose agent never attests fails the
    # chain instead of holding the switch.
    fetch = "/bin/sh -c 'd=/run/fediversity-chain; mkdir -p $d/svid; i=0; until /usr/local/bin/spire-agent api fetch x509 -socketPath /run/spire-agent/api.sock -write $d/svid >/dev/null 2>&1; do i=$((i + 1)); [ $i -le 120 ] || exit 1; echo $i > $d/secret-chain-fetch.service.progress; sleep 1; done; touch $d/secret-chain-fetch.service.done'";
    oneshot = exec: extraUnit: service { type = "oneshot"; inherit exec extraUnit; extraService = "RemainAfterExit=yes"; };
  in toplevel {
    inherit scenario;
    # As a NixOS service that needs its secrets is ordered: app.service requires the
    # chain, whose members are oneshots in order, the first after the agent; the switch's
    # start of app.service waits for the whole chain.
    units = base "1" // extra // {
      "fedi-spire-agent.service" = service {
        exec = "/usr/local/bin/spire-agent run -config ${agentConf}";
        extraService = "RuntimeDirectory=spire-agent";
      };
      "secret-chain-fetch.service" = oneshot fetch "Wants=fedi-spire-agent.service\nAfter=fedi-spire-agent.service";
      "secret-chain-install.service" = oneshot
        "@out@/sw/bin/fedi-chain-step secret-chain-install.service 2 1 /run/fediversity-chain/secret-chain-fetch.service.done /run/secret"
        "Requires=secret-chain-fetch.service\nAfter=secret-chain-fetch.service";
      "app.service" = service {
        exec = "@out@/sw/bin/fedi-idle";
        extraUnit = "Requires=secret-chain-install.service\nAfter=secret-chain-install.service";
        extraService = "ExecStartPre=/bin/sh -c 'test -e /run/secret || { echo \"no /run/secret yet\" >&2; exit 1; }'";
      };
    };
    wants = baseWants ++ builtins.attrNames extra ++ [ "fedi-spire-agent.service" "secret-chain-fetch.service" "secret-chain-install.service" "app.service" ];
    chain = [ "secret-chain-fetch.service" "secret-chain-install.service" ];
    activate = "rm -rf /run/secret /run/fediversity-chain";
  };
in
{
  inherit tools payload nixosSystemd nixosPath;

  # An HTTP service that answers 200 "fedi ok" about 3 s after the switch (health checks).
  http = httpScenario "http" { };
  # The same service, active, but it answers 500 once warm: its probe fails.
  http-broken = httpScenario "http-broken" { broken = true; };

  # Reboots (activation): the healthy units on kernel 6.12 (kernel-a, kernel-a-v2: the
  # same kernel, another toplevel) and on kernel 6.18 (kernel-b); with a switch
  # inhibitor (inhibitor-a, inhibitor-b: its value changes, so a switch between them is
  # refused); a unit that fails only once its system is booted (boot-fails, kernel
  # 6.18: fedi-boot-only.service fails when /run/booted-system is this toplevel); and a
  # boot that never comes up (boot-bricks).
  kernel-a = toplevel { scenario = "kernel-a"; units = base "1"; wants = baseWants; kernel = linux "6.12"; };
  kernel-a-v2 = toplevel { scenario = "kernel-a"; version = "2"; units = base "2"; wants = baseWants; kernel = linux "6.12"; };
  kernel-b = toplevel { scenario = "kernel-b"; units = base "2"; wants = baseWants; kernel = linux "6.18"; };
  inhibitor-a = toplevel { scenario = "inhibitor-a"; units = base "1"; wants = baseWants; kernel = linux "6.12"; inhibitors = [ "fedi-driver=570" ]; };
  inhibitor-b = toplevel { scenario = "inhibitor-b"; units = base "2"; wants = baseWants; kernel = linux "6.12"; inhibitors = [ "fedi-driver=575" ]; };
  boot-fails = toplevel {
    scenario = "boot-fails";
    units = base "2" // {
      "fedi-boot-only.service" = service {
        type = "oneshot";
        exec = "/bin/sh -c 'if [ \"$(readlink -f /run/booted-system)\" = @out@ ]; then echo \"fails at boot\" >&2; exit 1; fi'";
        extraService = "RemainAfterExit=yes";
      };
    };
    wants = baseWants ++ [ "fedi-boot-only.service" ];
    kernel = linux "6.18";
  };
  # A system whose boot never comes up: the stand-in stage 2 finds
  # etc/fediversity-boot-bricks in the system it boots and powers the node off before
  # the boot ends (so the node never says it booted it), and it never answers again
  # until someone starts it (activation reboot: the one-shot entry, the Incus restore).
  boot-bricks = toplevel { scenario = "boot-bricks"; units = base "2"; wants = baseWants; kernel = linux "6.18"; bricksAtBoot = true; };

  # The system every lab node runs from its first boot (the lab image builds it with the
  # image's own nix, makes it generation 1 of the system profile and installs its boot
  # entry, as nixos-install does): no units of its own, the default commands in sw.
  nixos-base = toplevel { scenario = "base"; units = { }; wants = [ ]; extraTools = null; withPayload = false; };

  # Two healthy units: exit 0.
  good = toplevel { scenario = "good"; units = base "1"; wants = baseWants; };

  # A toplevel that boots as a node image's /sbin/init (issue 22): $out/init is a stage 2
  # as NixOS's is, a script whose shell is in the store (fedi-busybox). It links what the
  # store systemd reads at its compiled-in paths (/etc/systemd/system, /etc/os-release)
  # to store paths, links /run/current-system to the toplevel (the image
  # puts /run/current-system/sw/bin on PATH, for the readiness probe's systemctl), and
  # execs the store systemd as PID 1. The host's systemd has its helpers' paths compiled
  # in (/lib/systemd/systemd-shutdown, /bin/mount, /bin/umount), where nixpkgs' names
  # store paths; init links those few paths to the store at each boot instead. Its units: the host's targets systemd needs to reach
  # multi-user.target and to halt (SIGRTMIN+3), and fedi-hello.service, a oneshot that
  # writes /run/fedi-hello. No journald, no udev, no getty, no dbus. On SIGRTMIN+3 (the
  # image's stop signal) systemd reaches halt.target and execs systemd-shutdown, which
  # prints "Exiting container." and ends the container. Given a planFile, it carries the
  # node plan in $out/etc/fediversity/node-plan.json (so /run/current-system/etc/...);
  # without one, its derivation is what it was before planFile existed.
  bootable = drv "fedi-system-bootable" (bootableScript + (if planFile == "" then "" else ''
    mkdir -p $out/etc/fediversity
    printf '%s' "$plan" > $out/etc/fediversity/node-plan.json
  '')) (if planFile == "" then { } else { plan = builtins.readFile planFile; });

  # bootable with the SPIRE agent of a k8s-operator node (issue 22, "the agent inside a
  # pod"): what a NixOS node's configuration does with what fediversity_k8s_rollout's
  # `spire_handoff` gives its pod (internal/k8s/spire_agent.go). fedi-spire-token copies
  # the pod's projected token (/run/spire-agent/token/token, root only, renewed by the
  # kubelet) to the agent's token_path, at boot and every 10 minutes (a timer);
  # fedi-spire-agent runs spire-agent (lab/spire/build.sh's, copied into the store as
  # fedi-systemd is) with the k8s_psat node attestor, cluster spireCluster (the node's
  # k8s_psat cluster, which the hand-off names), the trust bundle of the ConfigMap
  # spire-agent (/run/spire-agent/bundle/bundle.crt), and the server at
  # spireServer:spireServerPort. Its log is /run/spire-agent/agent.log (the stand-in has
  # no journald). Build with
  #   --argstr spireAgent <path> --argstr spireCluster <cluster>
  #   --argstr spireServer <address> --argstr spireServerPort <port>
  bootable-spire-agent = let
    agentConf = drv "fedi-spire-agent-k8s-conf" ''
      cat > $out <<'EOF'
      agent {
        data_dir = "/var/lib/spire/agent"
        log_file = "/run/spire-agent/agent.log"
        server_address = "${spireServer}"
        server_port = "${spireServerPort}"
        socket_path = "/run/spire-agent/api.sock"
        trust_bundle_path = "/run/spire-agent/bundle/bundle.crt"
        trust_domain = "fediversity"
      }
      plugins {
        NodeAttestor "k8s_psat" {
          plugin_data {
            cluster = "${spireCluster}"
            token_path = "/run/spire-agent/node-token"
          }
        }
        KeyManager "disk" {
          plugin_data { directory = "/var/lib/spire/agent" }
        }
        WorkloadAttestor "unix" {
          plugin_data {}
        }
      }
      EOF
    '' { };
    bb = "${bootBusybox}/bin/busybox";
    need = arg: v: if v == "" then throw "bootable-spire-agent: --argstr ${arg} is needed" else v;
  in assert need "spireAgent" spireAgent != "" && need "spireCluster" spireCluster != ""
    && need "spireServer" spireServer != "" && need "spireServerPort" spireServerPort != "";
  drv "fedi-system-bootable-spire-agent" (bootableScript + ''
    u=$out/etc/systemd/system
    cat > $u/fedi-spire-token.service <<EOF
    [Unit]
    Description=Copy the pod's projected SPIRE token to the agent's token_path
    [Service]
    Type=oneshot
    ExecStart=${bb} sh -c '${bb} cp /run/spire-agent/token/token /run/spire-agent/node-token.tmp && ${bb} chmod 600 /run/spire-agent/node-token.tmp && ${bb} mv /run/spire-agent/node-token.tmp /run/spire-agent/node-token'
    EOF
    cat > $u/fedi-spire-token.timer <<EOF
    [Unit]
    Description=Copy the projected SPIRE token again well within its hour
    [Timer]
    OnUnitActiveSec=10min
    EOF
    cat > $u/fedi-spire-agent.service <<EOF
    [Unit]
    Description=SPIRE agent (k8s_psat)
    Requires=fedi-spire-token.service
    After=fedi-spire-token.service
    [Service]
    ExecStart=${bootSpireAgent}/bin/spire-agent run -config ${agentConf}
    Restart=on-failure
    RestartSec=2
    EOF
    for w in fedi-spire-token.service fedi-spire-token.timer fedi-spire-agent.service; do
      ln -s ../$w $u/multi-user.target.wants/$w
    done
    ln -s ${bootSpireAgent}/bin/spire-agent $out/sw/bin/spire-agent
  '') { };

  # Same units, another toplevel (fedi-web's unit file changed: it is restarted).
  good-v2 = toplevel { scenario = "good"; version = "2"; units = base "2"; wants = baseWants; };

  # fedi-broken.service exits 1 (Type=oneshot: failed when the switch checks): exit 4.
  failed-unit = withUnit "failed-unit" "fedi-broken.service" (service {
    type = "oneshot";
    exec = "/bin/sh -c 'echo broken >&2; exit 1'";
  });

  # fedi-loop.service exits 1 and is restarted every second, forever.
  restart-loop = withUnit "restart-loop" "fedi-loop.service" (service {
    exec = "/bin/sh -c 'sleep 0.2; exit 1'";
    extraUnit = "StartLimitIntervalSec=0";
    extraService = "Restart=always\nRestartSec=1";
  });

  # The container may not use SCHED_FIFO: never spawned, 214/SETSCHEDULER (host fault).
  host-fault = withUnit "host-fault" "fedi-rt.service" (service {
    exec = "@out@/sw/bin/fedi-idle";
    extraService = "CPUSchedulingPolicy=fifo";
  });

  # ExecStart names a binary the closure lacks: never spawned, 203/EXEC (closure fault).
  closure-fault = withUnit "closure-fault" "fedi-missing.service" (service {
    exec = "@out@/sw/bin/fedi-does-not-exist";
  });

  # A false ConditionPathExists: skipped, inactive, ConditionResult=no.
  skipped = withUnit "skipped" "fedi-skipped.service" (service {
    exec = "@out@/sw/bin/fedi-idle";
    extraUnit = "ConditionPathExists=/nonexistent/fediversity";
  });

  # A start job that does not finish: fedi-waiter.service (started by the switch) wants
  # fedi-slowstart.service, a oneshot whose start takes 10 minutes. The switch waits for
  # fedi-waiter only, so it ends while fedi-slowstart's start job is still queued.
  stale-job = toplevel {
    scenario = "stale-job";
    units = base "1" // {
      "fedi-waiter.service" = service {
        exec = "@out@/sw/bin/fedi-idle";
        extraUnit = "Wants=fedi-slowstart.service";
      };
      "fedi-slowstart.service" = service {
        type = "oneshot";
        exec = "/bin/sleep 600";
        extraService = "TimeoutStartSec=infinity";
      };
    };
    wants = baseWants ++ [ "fedi-waiter.service" ];
  };

  # The activation takes switchDelay seconds (for the dropped-connection test).
  slow-switch = toplevel {
    scenario = "slow-switch";
    units = base "1";
    wants = baseWants;
    activate = "sleep ${switchDelay}";
  };

  # A secret chain that converges in ~5 s: app.service fails at the switch (no
  # /run/secret yet) and runs once restarted after the chain finished.
  chain = chainScenario "chain" "@out@/sw/bin/fedi-chain-step secret-chain-fetch.service 3 1";

  # The first chain member fails after one step, before it says it is done; /run/secret
  # never appears. (Failing after fedi-chain-step left its .done file let the install
  # member go on and write /run/secret: a loaded node showed it before the check.)
  chain-member-fails = chainScenario "chain-member-fails"
    "/bin/sh -c 'mkdir -p /run/fediversity-chain; sleep 1; echo 1 > /run/fediversity-chain/secret-chain-fetch.service.progress; exit 1'";

  # The first chain member runs but never makes progress; /run/secret never appears.
  chain-no-progress = chainScenario "chain-no-progress" "@out@/sw/bin/fedi-idle";

  # The SPIRE lane of tf-incus-operator: the node's agent (/usr/local/bin/spire-agent,
  # which the test puts on the node, as a NixOS module would put it in the system)
  # attests with the join token and trust bundle fediversity_spire_registration wrote
  # to /var/lib/spire/agent, reaching the server at the node's 127.0.0.1:8081 (a proxy
  # device to the lab's spire node); the chain's first member fetches the node's X.509
  # SVID from the agent (each try is a step of progress) before the second writes
  # /run/secret, which app.service needs.
  spire-chain = spireChain "spire-chain" { };
  # The same, with fedi-broken.service failing (a canary that breaks on this lane).
  spire-chain-broken = spireChain "spire-chain-broken" {
    "fedi-broken.service" = service {
      type = "oneshot";
      exec = "/bin/sh -c 'echo broken >&2; exit 1'";
    };
  };
}
