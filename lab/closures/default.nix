# Stand-ins for NixOS system toplevels, built WITHOUT nixpkgs:
#   nix-build --option sandbox false lab/closures -A good [--argstr seed X]
# (as root without a nixbld group also: --option build-users-group "").
#
# Each attribute is a toplevel with what a deployer touches of a real one:
#   $out/bin/switch-to-configuration {check,switch,boot,test,dry-activate}: the lab's
#     stand-in of switch-to-configuration-ng, with its lock, exit codes and messages
#     (./switch-to-configuration.sh says what it does), its pre-switch checks script and
#     its boot loader installer (./install-bootloader.sh: systemd-boot or GRUB-like, as
#     the node chooses);
#   $out/activate (the activation script: its snippets, then /run/current-system),
#   $out/dry-activate, $out/init-interface-version ("systemd 2"),
#   $out/switch-inhibitors and $out/reboot-triggers (JSON), $out/nixos-version,
#   $out/sw/bin (the default commands of a NixOS system, lab/nixos/default-commands, and
#   the scenario's tools), $out/systemd (the system's systemd, whose bin/ is the PATH of
#   a unit that sets none), $out/etc/systemd/system/*.service (services as a NixOS module
#   defines them: NixOS's default service PATH, their tools named by store path) with
#   their drop-ins (<unit>.d/overrides.conf), $out/etc/systemd/system/multi-user.target.wants/
#   (the units the closure wants); with a kernel, $out/kernel, initrd, kernel-modules,
#   firmware and kernel-params.
# The closure is: toplevel -> system-path (sw: the default commands and fedi-tools),
# systemd-252, fedi-payload (bytes to copy). The default commands and systemd link to
# the Debian node's binaries: the node is Debian shaped like NixOS (lab/lab.sh).
#
# seed: any string; a different seed gives different store paths for every derivation
#   but the shared ones (systemd-252, the default commands' system-path, the services'
#   unit-default-path, install-bootloader; every lab node has the first two from its
#   first system, nixos-base), so a test can force a copy of a closure the node has
#   never seen but for those.
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

  # nixosSystemd of another build (good-systemd-b): the same commands, another store path.
  nixosSystemdB = nixosSystemdOf "b";

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
  nixosSystemd = nixosSystemdOf "";
  # nixosSystemdOf build: a build of it ("" the lab's one; another string another store
  # path with the same commands). bin/ also has bootctl, the lab's stand-in: for the
  # node's systemd-boot it sets the Boot Loader Interface's EFI variables (files in
  # /var/lib/fediversity-standin-efi, which the stand-in firmware reads at boot,
  # lab/nixos/firmware.sh) and takes any entry ID, as bootctl does (an ID names an entry by
  # its file name without a boot counter; one that names none is ignored at boot); on a
  # GRUB node it finds no EFI system partition. lib/systemd/systemd is PID 1's binary.
  nixosSystemdOf = build: derivation ({
    name = "systemd-252";
    inherit system;
    builder = "/bin/sh";
    args = [ "-c" ("set -e; PATH=/usr/bin:/bin; " + debianBin + ''
      mkdir -p $out/bin $out/lib/systemd
      ln -s /usr/lib/systemd/systemd $out/lib/systemd/systemd
      awk '/config[.]systemd[.]package/ { s = 1; next } s && /^$/ { exit } s && !/^#/ { print }' ${defaultCommands} > commands
      while read -r c; do
        [ "$c" = bootctl ] || debianBin "$c"
      done < commands
      cat > $out/bin/bootctl <<'SH'
      #!/bin/sh
      PATH=/usr/bin
      efi=/var/lib/fediversity-standin-efi
      if [ "$(cat /boot/fediversity-standin-loader 2>/dev/null || echo systemd-boot)" != systemd-boot ]; then
        echo "Couldn't find EFI system partition. It is recommended to mount it to /boot or /efi." >&2
        exit 1
      fi
      case "''${1:-}" in
      is-installed) echo yes ;;
      --print-boot-path | --print-esp-path) echo /boot ;;
      set-default | set-oneshot)
        v=LoaderEntryDefault; [ "$1" = set-oneshot ] && v=LoaderEntryOneShot
        mkdir -p $efi
        if [ -z "''${2:-}" ]; then rm -f $efi/$v; exit 0; fi
        echo "$2" > $efi/$v.tmp && mv $efi/$v.tmp $efi/$v ;;
      *) echo "bootctl (lab stand-in): not supported: $*" >&2; exit 1 ;;
      esac
      SH
      chmod +x $out/bin/bootctl
    '') ];
  } // (if build == "" then { } else { inherit build; }));

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

  # The PATH NixOS gives every service a module defines (systemd.services.<name>.path,
  # enableDefaultPath: coreutils, findutils, gnugrep, gnused and systemd, after the
  # service's own; nixos/lib/systemd-unit-options.nix, nixos/modules/system/boot/systemd.nix):
  # an Environment=PATH= line in its unit. A unit without it (systemd-run's, an upstream
  # unit's) has systemd's bin directory alone. servicePath holds those four groups of
  # lab/nixos/default-commands.
  servicePath = shared "unit-default-path" (debianBin + ''
    mkdir -p $out/bin
    awk '/^# (coreutils-full|findutils|gnugrep|gnused)$/ { s = 1; next } /^#/ || /^$/ { s = 0 } s { print }' ${defaultCommands} > commands
    while read -r c; do debianBin "$c"; done < commands
  '');
  serviceEnvPath = "Environment=PATH=${servicePath}/bin:${nixosSystemd}/bin";

  # A stand-in system's sw: the default commands and the scenario's own tools (they are
  # what environment.systemPackages adds to a real system).
  systemPath = extra: if extra == null then nixosPath else drv "system-path" ''
    mkdir -p $out/bin
    for f in ${nixosPath}/bin/* ${extra}/bin/*; do ln -sfn "$f" $out/bin/; done
  '' { };

  # Parts of `bootable` (below): a systemd and a shell in the store, taken from the host.
  # fedi-systemd is the host's systemd (PID 1, systemd-shutdown, systemctl and
  # systemd-run, and util-linux's mount and umount, which systemd runs to unmount at
  # shutdown, and flock, which NixOS's system path has from util-linux too) with every
  # shared library ldd names copied beside it, the ELF interpreter and the libraries'
  # search path of each rewritten into the store path (patchelf), so it runs with no /lib
  # and no /usr: what nixpkgs' systemd is, built from the host instead of from source.
  bootSystemd = drv "fedi-systemd" ''
    command -v patchelf >/dev/null || { echo "fedi-systemd: patchelf is missing; run lab/install-host.sh" >&2; exit 1; }
    mkdir -p $out/bin $out/lib/systemd
    cp /usr/lib/systemd/systemd /usr/lib/systemd/systemd-shutdown $out/lib/systemd/
    cp /usr/bin/systemctl /usr/bin/systemd-run /usr/bin/flock /bin/mount /bin/umount $out/bin/
    for b in /usr/lib/systemd/systemd /usr/lib/systemd/systemd-shutdown /usr/bin/systemctl /usr/bin/systemd-run /usr/bin/flock /bin/mount /bin/umount; do
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

  # fedi-nix: the Nix of bootable-switchable's nodes, the host's (Debian's nix-bin, 2.8)
  # with every library ldd names beside it, its interpreter and search path rewritten
  # into the store as fedi-systemd's are. nix-store and nix-env are the one binary under
  # those names, as in nixpkgs' nix.
  bootNix = drv "fedi-nix" ''
    command -v patchelf >/dev/null || { echo "fedi-nix: patchelf is missing; run lab/install-host.sh" >&2; exit 1; }
    mkdir -p $out/bin $out/lib
    cp /usr/bin/nix $out/bin/nix
    ldd /usr/bin/nix | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u | while read -r lib; do cp -L "$lib" $out/lib/; done
    cp -L /lib64/ld-linux-x86-64.so.2 $out/lib/
    chmod -R u+w $out
    patchelf --set-interpreter $out/lib/ld-linux-x86-64.so.2 --set-rpath $out/lib $out/bin/nix
    for lib in $out/lib/*.so*; do
      case $lib in */ld-linux-*) ;; *) patchelf --set-rpath $out/lib "$lib" ;; esac
    done
    for n in nix-store nix-env nix-collect-garbage; do ln -s nix $out/bin/$n; done
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

  # The script of `bootable` (see there), which bootable-spire-agent and
  # bootable-switchable extend; initExtra runs in init right before it execs systemd.
  bootableScript = bootableScriptWith "";
  bootableScriptWith = initExtra: ''
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
    ${initExtra}
    exec ${bootSystemd}/lib/systemd/systemd "\$@"
    EOF
    chmod +x $out/init
  '';

  # A stand-in of hardware.firmware (a toplevel's $out/firmware).
  # A service the switch must not restart when it changes (restartIfChanged = false),
  # and one configured by a drop-in only (the reboot rule's lab tests).
  keepService = version: service { exec = "${tools}/bin/fedi-idle"; extraService = "Environment=FEDI_VERSION=${version}\nX-RestartIfChanged=false"; };
  plainService = service { exec = "${tools}/bin/fedi-idle"; };

  firmwareOf = v: drv "fedi-firmware-${v}" ''
    mkdir -p $out/lib/firmware
    echo "stand-in firmware ${v}" > $out/lib/firmware/fedi.bin
  '' { };

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
  # The boot loader installer of every stand-in system (config.system.build.installBootLoader):
  # systemd-boot entries from the system profile's generations, or GRUB-like, as the node
  # chooses (./install-bootloader.sh).
  installBootLoader = shared "install-bootloader" ''
    mkdir -p $out/bin
    cp ${./install-bootloader.sh} $out/bin/install-bootloader
    chmod +x $out/bin/install-bootloader
  '';

  # A system's pre-switch checks script (nixos/modules/system/activation/pre-switch-check.nix):
  # each check a subshell given the new system and the action, named when it fails. Every
  # system has switchInhibitors (switchable-system.nix): the inhibitors of the running
  # system and of the new one (<toplevel>/switch-inhibitors, JSON), and the keys in both
  # whose values differ; not checked for `boot`. Its tools are named by absolute path, as
  # the real one names store paths (jq is in the lab image for it; for Debian's jq 1.6,
  # the real one's `$new.[.key]` is `$new[.key]` and its `try fromjson catch {} as $old`
  # is bracketed, as jq 1.7 reads them).
  preSwitchChecks = checks: let
    inhibitorsCheck = ''
      incoming="''${1-}"
      action="''${2-}"

      if [ "$action" == "boot" ]; then
        echo "Not checking switch inhibitors (action = $action)"
        exit
      fi

      echo -n "Checking switch inhibitors..."

      empty="$(/usr/bin/mktemp -t switch_inhibit.XXXX)"
      clean_up() {
        /usr/bin/rm -f "$empty"
      }
      trap clean_up EXIT
      echo "{}" > "$empty"

      current_inhibitors="$(/usr/bin/realpath /run/current-system)/switch-inhibitors"
      if [ ! -f "$current_inhibitors" ]; then
        current_inhibitors="$empty"
      fi

      new_inhibitors="$(/usr/bin/realpath "$incoming")/switch-inhibitors"
      if [ ! -f "$new_inhibitors" ]; then
        new_inhibitors="$empty"
      fi

      diff="$(
        /usr/bin/jq \
          --raw-output \
          --null-input \
          --rawfile current "$current_inhibitors" \
          --rawfile newgen "$new_inhibitors" \
        '
          ($current | try fromjson catch {}) as $old |
          ($newgen | try fromjson catch {}) as $new |
          $old |
          to_entries |
          map(
            select(.key | in ($new)) |
            select(.value != $new[.key]) |
            [ .key, ":", .value, "->", $new[.key] ] | join(" ")
          ) |
          join("\n")
        ' \
      )"

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
        exit 1
      else
        echo " done"
      fi
    '';
    all = { switchInhibitors = inhibitorsCheck; } // checks;
    script = builtins.concatStringsSep "\n" (builtins.attrValues (builtins.mapAttrs (name: text: ''
      # pre-switch check ${name}
      (
        ${text}
      )
      if [[ $? != 0 ]]; then
        echo "Pre-switch check '${name}' failed"
        exit 1
      fi
    '') all));
  in drv "pre-switch-checks" ''
    printf '#!/usr/bin/bash\n%s\n' "$script" > $out
    chmod +x $out
  '' { inherit script; };

  # The activation script (nixos/modules/system/activation/activation-script.nix): each
  # snippet in turn (a failed one named, the status kept), then /run/current-system :=
  # this system whatever they did, and exit with their status. Snippets: the setuid
  # wrappers (Debian's sudo and su in /run/wrappers/bin), and the scenario's.
  activationScript = snippet: ''
    #!/usr/bin/bash
    systemConfig='@out@'

    export PATH=@out@/sw/bin

    _status=0
    trap "_status=1 _localstatus=\$?" ERR

    # Ensure a consistent umask.
    umask 0022

    #### Activation script snippet wrappers:
    _localstatus=0
    mkdir -p /run/wrappers/bin
    for w in sudo su; do
      if [ -x "/usr/bin/$w" ]; then ln -sfn "/usr/bin/$w" "/run/wrappers/bin/$w"; fi
    done

    if (( _localstatus > 0 )); then
      printf "Activation script snippet '%s' failed (%s)\n" "wrappers" "$_localstatus"
    fi

    #### Activation script snippet fediversity:
    _localstatus=0
    ${if snippet == null then "" else snippet}

    if (( _localstatus > 0 )); then
      printf "Activation script snippet '%s' failed (%s)\n" "fediversity" "$_localstatus"
    fi

    # Make this configuration the current configuration.
    ln -sfn "$(readlink -f "$systemConfig")" /run/current-system

    exit $_status
  '';

  # toplevel: a stand-in system. units (name: text), wants (names multi-user.target
  # wants), dropins (unit name: the text of its <unit>.d/overrides.conf, as NixOS
  # configures upstream units), activate (a shell snippet of the activation script),
  # chain (the secret chain's members), kernel (a `linux`; null: a container, with no
  # kernel, firmware or kernel-params), kernelParams, firmware (a `firmwareOf`),
  # inhibitors (system.switch.inhibitors: name: value), checks (more pre-switch checks:
  # name: shell text), initVersion (init-interface-version's systemd interface), systemd
  # (the system's systemd), bricksAtBoot (the stand-in stage 2 powers the node off
  # instead of booting it), extraTools (what the system adds to its sw beside the
  # default commands; null: none), withPayload ($out/payload, bytes for the copy tests).
  # Beside them every system has what a NixOS toplevel has for a deployer:
  # bin/switch-to-configuration, activate, dry-activate, init-interface-version,
  # switch-inhibitors and reboot-triggers (JSON, nixos/modules/tasks/auto-upgrade.nix:
  # the inhibitors, and kernel, firmware and kernel-params when it has a kernel),
  # nixos-version, sw, systemd.
  toplevel = { scenario, units, wants, version ? "1", activate ? null, chain ? [ ], kernel ? null
    , kernelParams ? [ "console=ttyS0" "loglevel=4" ], firmware ? firmwareOf "a", inhibitors ? { }, checks ? { }
    , initVersion ? "2", systemd ? nixosSystemd, dropins ? { }, bricksAtBoot ? false, extraTools ? tools, withPayload ? true }:
    let
      writeUnit = name: text: ''
        cat > $out/etc/systemd/system/${name} <<'FEDI_UNIT_EOF'
        ${text}
        FEDI_UNIT_EOF
      '';
      writeDropin = name: text: ''
        mkdir -p $out/etc/systemd/system/${name}.d
        cat > $out/etc/systemd/system/${name}.d/overrides.conf <<'FEDI_UNIT_EOF'
        ${text}
        FEDI_UNIT_EOF
      '';
      writes = builtins.concatStringsSep "\n" (builtins.attrValues (builtins.mapAttrs writeUnit units));
      dropinWrites = builtins.concatStringsSep "\n" (builtins.attrValues (builtins.mapAttrs writeDropin dropins));
      links = builtins.concatStringsSep "\n" (map (u: "ln -s ../${u} $out/etc/systemd/system/multi-user.target.wants/${u}") wants);
      rebootTriggers = inhibitors // (if kernel == null then { } else {
        kernel = "${kernel}";
        firmware = "${firmware}";
        kernel-params = builtins.concatStringsSep "," kernelParams;
      });
    in
    drv "nixos-system-fedi-${scenario}-${version}" ''
      mkdir -p $out/bin $out/etc/systemd/system/multi-user.target.wants $out/etc/fediversity
      ln -s ${systemPath extraTools} $out/sw
      ln -s ${systemd} $out/systemd
      ${if withPayload then "ln -s ${payload} $out/payload" else ""}
      sed -e "s|@out@|$out|g" -e "s|@systemd@|${systemd}|g" \
        -e "s|@installBootLoader@|${installBootLoader}/bin/install-bootloader|g" \
        -e "s|@preSwitchCheck@|${preSwitchChecks checks}|g" \
        ${./switch-to-configuration.sh} > $out/bin/switch-to-configuration
      chmod +x $out/bin/switch-to-configuration
      echo "25.05.fediversity-standin-${scenario}-${version}" > $out/nixos-version
      printf 'systemd %s' "${initVersion}" > $out/init-interface-version
      printf '%s\n' "$switchInhibitors" > $out/switch-inhibitors
      printf '%s\n' "$rebootTriggers" > $out/reboot-triggers
      ${writes}
      ${dropinWrites}
      ${links}
      printf '%s\n' ${builtins.concatStringsSep " " chain} > $out/etc/fediversity/secret-chain
      ${if chain == [ ] then "rm $out/etc/fediversity/secret-chain" else ""}
      ${if kernel == null then "" else ''
        ln -s ${kernel}/bzImage $out/kernel
        ln -s ${kernel}/initrd $out/initrd
        ln -s ${kernel}/lib $out/kernel-modules
        ln -s ${firmware} $out/firmware
        printf 'systemConfig=%s init=%s/init %s' "$out" "$out" "${builtins.concatStringsSep " " kernelParams}" > $out/kernel-params
      ''}
      ${if bricksAtBoot then "touch $out/etc/fediversity-boot-bricks" else ""}
      cat > $out/activate <<'FEDI_ACTIVATE_EOF'
      ${activationScript activate}
      FEDI_ACTIVATE_EOF
      printf '#!/usr/bin/bash\n# The dry activation script: the stand-in systems have no snippet that supports it.\nsystemConfig=%s\n' "$out" > $out/dry-activate
      chmod +x $out/activate $out/dry-activate
      # Unit files and scripts name $out as @out@.
      for f in $out/etc/systemd/system/*.service $out/etc/systemd/system/*.d/*.conf $out/activate; do
        if [ -f "$f" ]; then sed -i "s|@out@|$out|g" "$f"; fi
      done
    '' {
      switchInhibitors = builtins.toJSON inhibitors;
      rebootTriggers = builtins.toJSON rebootTriggers;
    };

  # A service as a NixOS module defines it, with NixOS's default service PATH.
  service = { exec, type ? "exec", extraUnit ? "", extraService ? "" }: ''
    [Unit]
    Description=fediversity lab unit
    ${extraUnit}
    [Service]
    ${serviceEnvPath}
    Type=${type}
    ExecStart=${exec}
    ${extraService}
  '';

  web = version: service {
    exec = "${tools}/bin/fedi-idle";
    extraService = "Environment=FEDI_VERSION=${version}";
  };
  setup = service {
    type = "oneshot";
    exec = "${tools}/bin/fedi-hello";
    extraService = "RemainAfterExit=yes";
  };
  base = version: { "fedi-web.service" = web version; "fedi-setup.service" = setup; };
  baseWants = [ "fedi-web.service" "fedi-setup.service" ];

  withUnit = scenario: name: text: toplevel {
    inherit scenario;
    units = base "1" // { ${name} = text; };
    wants = baseWants ++ [ name ];
  };

  chainUnits = { fetch ? "${tools}/bin/fedi-chain-step secret-chain-fetch.service 3 1", scenario ? "chain" }: {
    "secret-chain-fetch.service" = service { exec = fetch; };
    "secret-chain-install.service" = service {
      exec = "${tools}/bin/fedi-chain-step secret-chain-install.service 2 1 /run/fediversity-chain/secret-chain-fetch.service.done /run/secret";
    };
    # The check is an ExecStartPre, so that the start job itself fails and the switch
    # sees app.service failed however busy the node is. (As the ExecStart of a Type=exec
    # unit it failed only after its process ran, which on a loaded machine came after
    # the switch's check.) It names its scenario, so a switch between two chain
    # scenarios changes it and starts it again, as a changed unit is.
    "app.service" = service {
      exec = "${tools}/bin/fedi-idle";
      extraService = "Environment=FEDI_CHAIN_SCENARIO=${scenario}\nExecStartPre=/bin/sh -c 'test -e /run/secret || { echo \"no /run/secret yet\" >&2; exit 1; }'";
    };
  };
  chainScenario = scenario: fetch: toplevel {
    inherit scenario;
    units = base "1" // chainUnits { inherit fetch scenario; };
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
        ${serviceEnvPath}
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
  spireChain = scenario: extra: spireChainWith { inherit scenario extra; };
  # spireChainWith: the same with the agent at `agent` (a store path when the system
  # carries it) and `extraTools` in its sw.
  spireChainWith = { scenario, extra ? { }, agent ? "/usr/local/bin/spire-agent", extraTools ? tools }: let
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
    fetch = "/bin/sh -c 'd=/run/fediversity-chain; mkdir -p $d/svid; i=0; until ${agent} api fetch x509 -socketPath /run/spire-agent/api.sock -write $d/svid >/dev/null 2>&1; do i=$((i + 1)); [ $i -le 120 ] || exit 1; echo $i > $d/secret-chain-fetch.service.progress; sleep 1; done; touch $d/secret-chain-fetch.service.done'";
    # The chain's oneshots name their system's scenario: a switch between two SPIRE chain
    # systems changes them, so it runs them again (as it restarts any changed unit) after
    # the activation emptied /run/secret; app.service, which requires them, is restarted
    # with them (Requires=), and finds the secret again.
    oneshot = exec: extraUnit: service { type = "oneshot"; inherit exec extraUnit; extraService = "RemainAfterExit=yes\nEnvironment=FEDI_CHAIN_SCENARIO=${scenario}"; };
  in toplevel {
    inherit scenario extraTools;
    # As a NixOS service that needs its secrets is ordered: app.service requires the
    # chain, whose members are oneshots in order, the first after the agent; the switch's
    # start of app.service waits for the whole chain.
    units = base "1" // extra // {
      "fedi-spire-agent.service" = service {
        exec = "${agent} run -config ${agentConf}";
        extraService = "RuntimeDirectory=spire-agent";
      };
      "secret-chain-fetch.service" = oneshot fetch "Wants=fedi-spire-agent.service\nAfter=fedi-spire-agent.service";
      "secret-chain-install.service" = oneshot
        "${tools}/bin/fedi-chain-step secret-chain-install.service 2 1 /run/fediversity-chain/secret-chain-fetch.service.done /run/secret"
        "Requires=secret-chain-fetch.service\nAfter=secret-chain-fetch.service";
      "app.service" = service {
        exec = "${tools}/bin/fedi-idle";
        extraUnit = "Requires=secret-chain-install.service\nAfter=secret-chain-install.service";
        # The same unit in every SPIRE chain system: a switch between them restarts it
        # only through the chain it requires.
        extraService = "ExecStartPre=/bin/sh -c 'test -e /run/secret || { echo \"no /run/secret yet\" >&2; exit 1; }'";
      };
    };
    wants = baseWants ++ builtins.attrNames extra ++ [ "fedi-spire-agent.service" "secret-chain-fetch.service" "secret-chain-install.service" "app.service" ];
    chain = [ "secret-chain-fetch.service" "secret-chain-install.service" ];
    activate = "rm -rf /run/secret /run/fediversity-chain";
  };
in
{
  inherit tools payload nixosSystemd nixosPath servicePath;

  # An HTTP service that answers 200 "fedi ok" about 3 s after the switch (health checks).
  http = httpScenario "http" { };
  # The same service, active, but it answers 500 once warm: its probe fails.
  http-broken = httpScenario "http-broken" { broken = true; };

  # Reboots (activation): the healthy units on kernel 6.12 (kernel-a, kernel-a-v2: the
  # same kernel, another toplevel) and on kernel 6.18 (kernel-b); kernel-a's kernel with
  # other kernel parameters only (kernel-a-params) and other firmware only
  # (kernel-a-firmware), which NixOS's reboot-triggers name; with a switch inhibitor
  # (inhibitor-a, inhibitor-b: {"fedi-driver": "570"} and "575", so a switch between
  # them is refused, and a boot is not); a unit that fails only once its system is
  # booted (boot-fails, kernel 6.18: fedi-boot-only.service fails when
  # /run/booted-system is this toplevel); and a boot that never comes up (boot-bricks).
  kernel-a = toplevel { scenario = "kernel-a"; units = base "1"; wants = baseWants; kernel = linux "6.12"; };
  kernel-a-v2 = toplevel { scenario = "kernel-a"; version = "2"; units = base "2"; wants = baseWants; kernel = linux "6.12"; };
  kernel-a-params = toplevel { scenario = "kernel-a-params"; units = base "2"; wants = baseWants; kernel = linux "6.12"; kernelParams = [ "console=ttyS0" "loglevel=7" ]; };
  kernel-a-firmware = toplevel { scenario = "kernel-a-firmware"; units = base "2"; wants = baseWants; kernel = linux "6.12"; firmware = firmwareOf "b"; };
  kernel-b = toplevel { scenario = "kernel-b"; units = base "2"; wants = baseWants; kernel = linux "6.18"; };
  inhibitor-a = toplevel { scenario = "inhibitor-a"; units = base "1"; wants = baseWants; kernel = linux "6.12"; inhibitors = { fedi-driver = "570"; }; };
  inhibitor-b = toplevel { scenario = "inhibitor-b"; units = base "2"; wants = baseWants; kernel = linux "6.12"; inhibitors = { fedi-driver = "575"; }; };
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

  # NixOS' reboot rule (activation reboot-if-needed), with reboot-triggers as NixOS
  # writes them: triggers-a (kernel 6.12, kernel-params quiet, one inhibitor that stays);
  # triggers-params, the same but for kernel-params (quiet,console=ttyS0): it needs a
  # reboot; triggers-systemd, the same triggers with another systemd: a switch, which
  # re-executes PID 1.
  triggers-a = toplevel { scenario = "triggers"; units = base "1"; wants = baseWants; kernel = linux "6.12"; kernelParams = [ "quiet" ]; inhibitors = { fedi-dbus = "dbus"; }; };
  triggers-params = toplevel { scenario = "triggers-params"; units = base "2"; wants = baseWants; kernel = linux "6.12"; kernelParams = [ "quiet" "console=ttyS0" ]; inhibitors = { fedi-dbus = "dbus"; }; };
  triggers-systemd = toplevel { scenario = "triggers-systemd"; units = base "2"; wants = baseWants; kernel = linux "6.12"; kernelParams = [ "quiet" ]; inhibitors = { fedi-dbus = "dbus"; }; systemd = nixosSystemdB; };

  # Unit changes a switch treats apart: fedi-keep.service, marked restartIfChanged =
  # false, changes from keep-a to keep-b (the switch leaves it running); fedi-plain's
  # drop-in (fedi-plain.service.d/overrides.conf, as NixOS configures an upstream unit)
  # is the only change from dropin-a to dropin-b. Neither unit names its toplevel.
  keep-a = toplevel { scenario = "keep-a"; units = base "1" // { "fedi-keep.service" = keepService "1"; }; wants = baseWants ++ [ "fedi-keep.service" ]; };
  keep-b = toplevel { scenario = "keep-b"; units = base "2" // { "fedi-keep.service" = keepService "2"; }; wants = baseWants ++ [ "fedi-keep.service" ]; };
  dropin-a = toplevel { scenario = "dropin"; units = base "1" // { "fedi-plain.service" = plainService; }; wants = baseWants ++ [ "fedi-plain.service" ]; dropins = { "fedi-plain.service" = "[Service]\nEnvironment=FEDI_MODE=a"; }; };
  dropin-b = toplevel { scenario = "dropin"; version = "2"; units = base "1" // { "fedi-plain.service" = plainService; }; wants = baseWants ++ [ "fedi-plain.service" ]; dropins = { "fedi-plain.service" = "[Service]\nEnvironment=FEDI_MODE=b"; }; };

  # Boot counting (boot.loader.systemd-boot.bootCounting, on a node where the test turns
  # it on: labtest.EnableBootCounting): two systems to boot in turn.
  counting-a = toplevel { scenario = "counting-a"; units = base "1"; wants = baseWants; kernel = linux "6.12"; };
  counting-b = toplevel { scenario = "counting-b"; units = base "2"; wants = baseWants; kernel = linux "6.18"; };

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

  # bootable whose stage 2 fails: init prints why on the console and exits 3 a second
  # after it starts, before it execs systemd, as NixOS's stage 2 ends when a step it
  # cannot do without fails. The container's PID 1 ends, so the runtime ends the
  # container at once, and a kubelet restarts it again and again (CrashLoopBackOff):
  # what a node image whose init cannot start its system does in a pod.
  bootable-init-fails = drv "fedi-system-bootable-init-fails" (bootableScriptWith ''
    echo "fedi-init: stage 2 failed: the lab's stand-in of an init that cannot start its system; exiting 3" >&2
    sleep 1
    exit 3
  '') { };

  # bootable that takes later systems through a deploy, as a NixOS container does: the
  # toplevel that fediversity_incus_image makes an Incus image of (tf-incus from the
  # node's source), and that fediversity_node_switch then switches in place. Beyond
  # bootable it has what the deploy body runs on a node (nix-store and nix-env from
  # fedi-nix, systemd-run and flock, busybox's tools, /bin/sh) and
  # bin/switch-to-configuration (./switch-to-configuration-bootable.sh). Its init does
  # what NixOS's stage 2 and activation do for a container before systemd starts: a
  # tmpfs on /run (stage 2's early mounts), /bin/sh (environment.binsh), root in /etc/passwd and /etc/group (the users
  # activation, root only), /etc/nix/nix.conf, /run/booted-system, and, as
  # lxc-container.nix's postBootCommands, the store's registrations loaded from the
  # image's /nix-path-registration (once) and the system profile set to the booted
  # system. Its nix.conf has no build users (the stand-in has no nixbld group) and no
  # sandbox. Takes seed and planFile as bootable does.
  bootable-switchable = let
    nixConf = drv "fedi-nix-conf" ''
      printf 'build-users-group =\nsandbox = false\n' > $out
    '' { };
  in drv "fedi-system-bootable-switchable" (bootableScriptWith ''
    # /run is a tmpfs before systemd starts, as NixOS's stage 2 mounts it in a
    # container (its early mounts); else systemd mounts one over the links above.
    if ! ${bootBusybox}/bin/busybox grep -qs '^[^ ]* /run ' /proc/mounts; then
      mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
      ln -sfn $out /run/current-system
    fi
    ln -sfn ${bootBusybox}/bin/sh /bin/sh
    mkdir -p /etc/nix /root
    ln -sfn $out/etc/nix/nix.conf /etc/nix/nix.conf
    echo 'root:x:0:0:System administrator:/root:/bin/sh' > /etc/passwd
    echo 'root:x:0:' > /etc/group
    ln -sfn $out /run/booted-system
    export HOME=/root
    if [ -f /nix-path-registration ]; then
      ${bootNix}/bin/nix-store --load-db < /nix-path-registration && rm /nix-path-registration
    fi
    ${bootNix}/bin/nix-env -p /nix/var/nix/profiles/system --set $out
  '' + ''
    mkdir -p $out/etc/nix $out/bin
    ln -s ${nixConf} $out/etc/nix/nix.conf
    for b in ${bootNix}/bin/* ${bootSystemd}/bin/systemd-run ${bootSystemd}/bin/flock; do ln -s $b $out/sw/bin/; done
    # Every busybox applet, for the tools a NixOS system path has (coreutils, sed, awk,
    # findutils, …), but its init and power applets (systemd's are used) and its mount.
    for a in $(${bootBusybox}/bin/busybox --list); do
      case $a in init | linuxrc | halt | poweroff | reboot | switch_root | mount | umount) continue ;; esac
      [ -e $out/sw/bin/$a ] || ln -s ${bootBusybox}/bin/busybox $out/sw/bin/$a
    done
    sed -e "s|@out@|$out|g" -e "s|@busybox@|${bootBusybox}|g" -e "s|@systemd@|${bootSystemd}|g" \
      ${./switch-to-configuration-bootable.sh} > $out/bin/switch-to-configuration
    chmod +x $out/bin/switch-to-configuration
    sed -i 's/^PRETTY_NAME=.*/PRETTY_NAME="Fediversity lab stand-in (bootable, switchable)"/' $out/etc/os-release
    echo "bootable-switchable-1" > $out/nixos-version
  '' + (if planFile == "" then "" else ''
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
    # The system is up once its identity is: this oneshot ends when root gets an X.509
    # SVID from the agent, so systemd says "running" (and the pod is ready, and the
    # rollout's verdict is given) only after the agent attested and the server issued
    # the node's host SVID; a node that never attests fails this unit, and the verdict
    # names it.
    cat > $u/fedi-spire-attested.service <<EOF
    [Unit]
    Description=Wait until the SPIRE agent holds this node's identity
    Requires=fedi-spire-agent.service
    After=fedi-spire-agent.service
    [Service]
    Type=oneshot
    RemainAfterExit=yes
    TimeoutStartSec=150
    ExecStart=${bb} sh -c 'until ${bootSpireAgent}/bin/spire-agent api fetch x509 -socketPath /run/spire-agent/api.sock >/dev/null 2>&1; do ${bb} sleep 1; done'
    EOF
    for w in fedi-spire-token.service fedi-spire-token.timer fedi-spire-agent.service fedi-spire-attested.service; do
      ln -s ../$w $u/multi-user.target.wants/$w
    done
    ln -s ${bootSpireAgent}/bin/spire-agent $out/sw/bin/spire-agent
  '' + (if planFile == "" then "" else ''
    mkdir -p $out/etc/fediversity
    printf '%s' "$plan" > $out/etc/fediversity/node-plan.json
  '')) (if planFile == "" then { } else { plan = builtins.readFile planFile; });

  # Same units, another toplevel (fedi-web's unit file changed: it is stopped before the
  # activation and started after it).
  good-v2 = toplevel { scenario = "good"; version = "2"; units = base "2"; wants = baseWants; };

  # good-v2 whose fedi-web says restartIfChanged = false (X-RestartIfChanged=false): from
  # good, the switch does not restart it ("NOT restarting the following changed units")
  # and it runs good's fedi-web on.
  good-v2-no-restart = toplevel {
    scenario = "good-no-restart"; version = "2"; wants = baseWants;
    units = base "2" // { "fedi-web.service" = service { exec = "${tools}/bin/fedi-idle"; extraService = "Environment=FEDI_VERSION=2\nX-RestartIfChanged=false"; }; };
  };
  # good-v2 whose fedi-web says reloadIfChanged = true: from good, it is reloaded.
  good-v2-reload = toplevel {
    scenario = "good-reload"; version = "2"; wants = baseWants;
    units = base "2" // { "fedi-web.service" = service { exec = "${tools}/bin/fedi-idle"; extraService = "Environment=FEDI_VERSION=2\nExecReload=${nixosPath}/bin/true\nX-ReloadIfChanged=true"; }; };
  };
  # good with fedi-web changed by a drop-in only (fedi-web.service.d/overrides.conf, as
  # NixOS configures an upstream unit): from good, fedi-web is restarted.
  good-dropin = toplevel {
    scenario = "good-dropin"; units = base "1"; wants = baseWants;
    dropins = { "fedi-web.service" = "[Service]\nEnvironment=FEDI_DROPIN=1"; };
  };
  # good with another systemd (its units and all else the same): from good, the switch
  # re-executes PID 1 ("restarting systemd..."), and no reboot is needed.
  good-systemd-b = toplevel { scenario = "good-systemd-b"; units = base "1"; wants = baseWants; systemd = nixosSystemdB; };
  # good-v2 whose init-interface-version changed (systemd 3): switch and test exit 100
  # before activating it (switch after installing the boot loader).
  good-init-v3 = toplevel { scenario = "good-init-v3"; version = "2"; units = base "2"; wants = baseWants; initVersion = "3"; };
  # good-v2 whose activation script fails (a snippet, as a secret that cannot be
  # decrypted fails sops-nix's or agenix's): exit 2, /run/current-system updated anyway.
  activation-fails = toplevel {
    scenario = "activation-fails"; units = base "2"; wants = baseWants;
    activate = "echo 'fedi-secrets: cannot decrypt /run/secrets/fedi-db: no key' >&2; false";
  };
  # good-v2 with a pre-switch check that always fails (system.preSwitchChecks).
  check-fails = toplevel {
    scenario = "check-fails"; units = base "2"; wants = baseWants;
    checks = { fediAlwaysFails = "echo 'fedi: this system never passes its check'; false"; };
  };

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
    exec = "${tools}/bin/fedi-idle";
    extraService = "CPUSchedulingPolicy=fifo";
  });

  # ExecStart names a binary the closure lacks: never spawned, 203/EXEC (closure fault).
  closure-fault = withUnit "closure-fault" "fedi-missing.service" (service {
    exec = "${tools}/bin/fedi-does-not-exist";
  });

  # A false ConditionPathExists: skipped, inactive, ConditionResult=no.
  skipped = withUnit "skipped" "fedi-skipped.service" (service {
    exec = "${tools}/bin/fedi-idle";
    extraUnit = "ConditionPathExists=/nonexistent/fediversity";
  });

  # A start job that does not finish: fedi-waiter.service (started by the switch) wants
  # fedi-slowstart.service, a oneshot whose start takes 10 minutes. The switch waits for
  # fedi-waiter only, so it ends while fedi-slowstart's start job is still queued.
  stale-job = toplevel {
    scenario = "stale-job";
    units = base "1" // {
      "fedi-waiter.service" = service {
        exec = "${tools}/bin/fedi-idle";
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
  chain = chainScenario "chain" "${tools}/bin/fedi-chain-step secret-chain-fetch.service 3 1";

  # The first chain member fails after one step, before it says it is done; /run/secret
  # never appears. (Failing after fedi-chain-step left its .done file let the install
  # member go on and write /run/secret: a loaded node showed it before the check.)
  chain-member-fails = chainScenario "chain-member-fails"
    "/bin/sh -c 'mkdir -p /run/fediversity-chain; sleep 1; echo 1 > /run/fediversity-chain/secret-chain-fetch.service.progress; exit 1'";

  # The first chain member runs but never makes progress; /run/secret never appears.
  chain-no-progress = chainScenario "chain-no-progress" "${tools}/bin/fedi-idle";

  # The SPIRE lane of tf-incus-operator: the node's agent (/usr/local/bin/spire-agent,
  # which the test puts on the node, as a NixOS module would put it in the system)
  # attests with the join token and trust bundle fediversity_spire_registration wrote
  # to /var/lib/spire/agent, reaching the server at the node's 127.0.0.1:8081 (a proxy
  # device to the lab's spire node); the chain's first member fetches the node's X.509
  # SVID from the agent (each try is a step of progress) before the second writes
  # /run/secret, which app.service needs.
  spire-chain = spireChain "spire-chain" { };
  # spire-chain as a NixOS node has it: the agent is the system's own (fedi-spire-agent,
  # lab/spire/build.sh's spire-agent copied into the store, also in sw/bin), so nothing
  # is put on the node by hand; fedi-spire-agent.service and the chain run it from the
  # store. The server is still at the node's 127.0.0.1:8081, where the host reaches it
  # for the node (modules/tf-incus: a proxy device of the tenant's profile). Build with
  #   --argstr spireAgent <path>
  spire-chain-store = let
    agentTools = drv "fedi-tools-spire-agent" ''
      mkdir -p $out/bin
      ln -s ${tools}/bin/* ${bootSpireAgent}/bin/spire-agent $out/bin/
    '' { };
  in spireChainWith { scenario = "spire-chain-store"; agent = "${bootSpireAgent}/bin/spire-agent"; extraTools = agentTools; };
  # The same, with fedi-broken.service failing (a canary that breaks on this lane).
  spire-chain-broken = spireChain "spire-chain-broken" {
    "fedi-broken.service" = service {
      type = "oneshot";
      exec = "/bin/sh -c 'echo broken >&2; exit 1'";
    };
  };

  # A cycling unit: fedi-tick.timer starts the oneshot fedi-tick.service every second,
  # so the service is activated again and again (a new InvocationID each time) while
  # NRestarts stays 0, and it never fails. systemd's default start limit (5 starts in
  # 10 s) would fail a unit started every second, on NixOS too: the service turns it
  # off, as a module whose timer fires this often must.
  cycling = toplevel {
    scenario = "cycling";
    units = {
      "fedi-tick.timer" = ''
        [Unit]
        Description=fediversity lab timer: starts fedi-tick.service every second
        [Timer]
        OnActiveSec=1s
        OnUnitActiveSec=1s
        AccuracySec=100ms
      '';
      "fedi-tick.service" = service {
        type = "oneshot";
        exec = "${nixosPath}/bin/true";
        extraUnit = "StartLimitIntervalSec=0";
      };
    };
    wants = [ "fedi-tick.timer" ];
  };
}
