#!/usr/bin/env bash
# The lab: real incusd, real systemd, real sshd and real nix on this machine, reached only
# through the Incus API and loopback proxy devices. Idempotent: `up` on a machine where the
# lab is already up checks it and returns; on a machine that came back with incusd killed
# and the containers stopped it restarts both.
#
#   bash lab/lab.sh up      install, start incusd, build/import the image, launch nodes
#   bash lab/lab.sh down    remove exactly what `up` made (nodes, image, lab state dir)
#   bash lab/lab.sh status  print how to reach each node
#   bash lab/lab.sh image   only build (when not cached) and import the node image
#   bash lab/lab.sh alias   print the node image's alias (lab/debian-v3-<hash>)
#
# Environment: LAB_NODES (default 3), LAB_PREFIX (default fedi), LAB_STATE (default
# /var/lib/fediversity-lab), LAB_PORT_BASE (default 2200: node i listens on
# 127.0.0.1:$((LAB_PORT_BASE+i))), FEDIVERSITY_CACHE (default /var/cache/fediversity).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/retry.sh"
LAB_NODES=${LAB_NODES:-3}
# LAB_PREFIX names the nodes (<prefix>-n1 …) and tests' throwaway instances (<prefix>-t-…),
# so two labs (a developer's and a CI run) can share one incusd.
LAB_PREFIX=${LAB_PREFIX:-fedi}
LAB_PORT_BASE=${LAB_PORT_BASE:-2200}
CACHE=${FEDIVERSITY_CACHE:-/var/cache/fediversity}
STATE=${LAB_STATE:-/var/lib/fediversity-lab}
# Bump when the image recipe below changes: the cached tarballs and the image's alias
# are keyed on it, so labs of another version on the same incusd keep their own image.
IMAGE_VERSION=3
# The image also carries the first NixOS stand-in system of every node (nixos-base of
# lab/closures), so its identity is the version and that system's derivation:
# v3-<hash>, set by image_id. Its alias is lab/debian-<identity>.
IMAGE_ID=""
IMAGE_ALIAS=""
IMAGE_DIR=""
# The Debian packages of NixOS's default commands that minbase lacks
# (lab/nixos/default-commands; lab/install-host.sh installs them on the deployer too),
# and jq, which the stand-in systems' pre-switch check names by absolute path (as
# NixOS's names jq's store path).
NIXOS_PACKAGES="acl attr bzip2 cpio curl gawk patch xz-utils less libcap2-bin netcat-openbsd whois time zstd bind9-host iputils-ping iputils-tracepath iputils-arping net-tools sudo jq"
# The Debian root is cached per version and package list.
ROOTFS_DIR=$CACHE/lab-rootfs-v$IMAGE_VERSION-$(printf '%s' "$NIXOS_PACKAGES" | md5sum | cut -c1-8)
# A login's PATH on NixOS, for root and every user: the security wrappers first
# (nixos/modules/config/system-environment.nix), then environment.profiles with /bin
# (nixos/modules/programs/environment.nix and the nix and users modules):
# ~/.nix-profile, ${XDG_STATE_HOME}/nix/profile (pam_env expands the unset variable to
# nothing: /nix/profile), ~/.local/state/nix/profile, /etc/profiles/per-user/$USER, the
# default profile, the system's sw. As pam_env.conf(5) spells it (@{HOME}, @{PAM_USER}):
NIXOS_PAM_PATH='/run/wrappers/bin:@{HOME}/.nix-profile/bin:/nix/profile/bin:@{HOME}/.local/state/nix/profile/bin:/etc/profiles/per-user/@{PAM_USER}/bin:/nix/var/nix/profiles/default/bin:/run/current-system/sw/bin'
INCUS_LOG=/var/log/fediversity-incusd.log
LAB_POOL=lab
LAB_POOL_SIZE=${LAB_POOL_SIZE:-40GiB}

log() { printf '[lab %s] %s\n' "$(date +%T)" "$*" >&2; }

mirror() {
  awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null ||
    echo http://deb.debian.org/debian
}

incusd_up() { incus info >/dev/null 2>&1; }

start_incusd() {
  if incusd_up; then return; fi
  log "starting incusd (no systemd on this machine)"
  mkdir -p /var/lib/incus /var/log
  # A killed daemon may leave its socket behind.
  rm -f /var/lib/incus/unix.socket
  # lxcfs is optional; incusd works without it. The daemon does not inherit the lab's
  # lock (fd 9): an `up` that failed before it let go would leave the lock held by incusd
  # and every later `up` waiting for ever.
  nohup /usr/libexec/incus/incusd --group root --logfile "$INCUS_LOG" >>"$INCUS_LOG" 2>&1 9>&- &
  echo $! >/run/fediversity-incusd.pid
  for _ in $(seq 1 60); do
    incusd_up && break
    sleep 1
  done
  incusd_up || { log "incusd did not start; see $INCUS_LOG"; tail -20 "$INCUS_LOG" >&2; exit 1; }
  # Ready once it has started the instances that were running when it stopped: on a
  # machine that kept sixty lab instances this took over a minute.
  incus admin waitready --timeout 300
}

# The lab's instances live on a btrfs pool (a sparse loop file that incusd makes and
# mounts): a snapshot, a restore or a copy is a subvolume snapshot, about 0.4 s, where
# the dir pool copies the whole root file system (4-9 s each, and CPU that the suites
# running side by side need; every Incus deploy takes a rollback point).
init_incus() {
  # Stopped, incusd waits for its running operations up to core.shutdown_timeout (5
  # minutes by default): a restart during a deploy (TestAccNodeSwitchIncusdRestart)
  # would wait for the deploy's exec sessions that long. The lab's daemon waits a minute.
  [ "$(incus config get core.shutdown_timeout)" = 1 ] || incus config set core.shutdown_timeout 1
  if ! incus storage show "$LAB_POOL" >/dev/null 2>&1; then
    log "creating the btrfs storage pool $LAB_POOL (a sparse loop file of $LAB_POOL_SIZE)"
    incus storage create "$LAB_POOL" btrfs size="$LAB_POOL_SIZE" >/dev/null
  fi
  if ! incus profile device show default | grep '^root:' >/dev/null; then
    incus profile device add default root disk path=/ pool="$LAB_POOL" >/dev/null
  elif [ "$(incus profile device get default root pool)" != "$LAB_POOL" ]; then
    move_to_lab_pool
    incus profile device set default root pool="$LAB_POOL"
  fi
}

# move_to_lab_pool: once, on a machine whose lab ran on the old dir pool, move every
# instance (with its snapshots) to the btrfs pool, so the default profile can point there.
move_to_lab_pool() {
  local n pool state
  for n in $(incus list --format csv -c n); do
    pool=$(incus config show "$n" --expanded 2>/dev/null | awk '/^  root:/ {r=1} r && /pool:/ {print $2; exit}')
    # An instance gone since the list (another lab's test deleted it) has nothing to move.
    [ -z "$pool" ] || [ "$pool" = "$LAB_POOL" ] && continue
    state=$(incus list "^$n\$" --format csv -c s)
    log "moving $n to the btrfs pool $LAB_POOL (once)"
    incus stop --force "$n" >/dev/null 2>&1 || true
    incus move "$n" --storage "$LAB_POOL" >/dev/null
    [ "$state" != RUNNING ] || incus start "$n"
  done
}

# image_id: the image's identity (see IMAGE_VERSION) from the first system's derivation
# (which nix computes in a fraction of a second without building anything), the lab's
# NixOS files (lab/nixos: the stand-in firmware) and nixos_shape.
image_id() {
  local drv
  drv=$(NIX_CONFIG="substituters =" nix-instantiate "$HERE/closures" -A nixos-base 2>/dev/null) ||
    { log "nix-instantiate lab/closures -A nixos-base failed"; NIX_CONFIG="substituters =" nix-instantiate "$HERE/closures" -A nixos-base >&2; exit 1; }
  drv=${drv##*/}
  IMAGE_ID=v$IMAGE_VERSION-$({ echo "$drv"; cat "$HERE"/nixos/*; declare -f nixos_shape; } | md5sum | cut -c1-12)
  IMAGE_ALIAS=lab/debian-$IMAGE_ID
  IMAGE_DIR=$CACHE/lab-image-$IMAGE_ID
}

# build_rootfs: the Debian part of the image (debootstrap, packages), cached in
# $ROOTFS_DIR for every image of this version.
build_rootfs() {
  if [ -s "$ROOTFS_DIR/rootfs.tar" ]; then return; fi
  log "building the lab image's Debian root (debootstrap; about 3 minutes, cached in $ROOTFS_DIR)"
  local work root
  work=$(mktemp -d /var/tmp/fedi-rootfs.XXXXXX)
  root=$work/rootfs
  # Both fetch from Debian's mirror: retried (lab/retry.sh), each try from an empty root.
  bootstrap() {
    rm -rf --one-file-system "$root" && debootstrap --variant=minbase \
      --include=systemd,systemd-sysv,dbus,openssh-server,iproute2 \
      bookworm "$root" "$(mirror)" >"$work/debootstrap.log" 2>&1 ||
      { tail -30 "$work/debootstrap.log" >&2; return 1; }
  }
  retry bootstrap || exit 1
  mount -t proc proc "$root/proc"
  trap 'umount "'"$root"'/proc" && rm -rf --one-file-system "'"$work"'"' EXIT
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod +x "$root/usr/sbin/policy-rc.d"
  packages() {
    chroot "$root" /bin/sh -c "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq --no-install-recommends nix-bin ca-certificates $NIXOS_PACKAGES" \
      >"$work/chroot.log" 2>&1 || { tail -30 "$work/chroot.log" >&2; return 1; }
  }
  retry packages || exit 1
  rm -f "$root/usr/sbin/policy-rc.d"
  chroot "$root" apt-get clean
  umount "$root/proc"
  trap - EXIT
  # Host keys are made per node at launch, never baked into the shared image.
  rm -f "$root"/etc/ssh/ssh_host_*
  mkdir -p "$root/root/.ssh" && chmod 700 "$root/root/.ssh"
  # Each node must get its own machine ID and hostname at first boot, not the image's.
  : >"$root/etc/machine-id"
  rm -f "$root/var/lib/dbus/machine-id" "$root/etc/hostname"
  # Regenerate missing host keys before sshd starts.
  mkdir -p "$root/etc/systemd/system/ssh.service.d"
  printf '[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n' >"$root/etc/systemd/system/ssh.service.d/hostkeys.conf"
  mkdir -p "$ROOTFS_DIR"
  tar -C "$root" --numeric-owner -cf "$ROOTFS_DIR/rootfs.tar.tmp" .
  mv "$ROOTFS_DIR/rootfs.tar.tmp" "$ROOTFS_DIR/rootfs.tar"
  rm -rf "$work"
}

# nixos_shape ROOT: what makes the Debian root look like NixOS to whoever logs in or runs
# a unit, and the machine's stand-in firmware and boot loader (the first system comes in
# build_image). /lib and /usr stay: Debian's own units and sshd name their binaries by
# absolute path; only PATH changes.
nixos_shape() {
  local root=$1
  # switch-to-configuration refuses to run without it; incusd puts
  # /run/current-system/sw/bin on `incus exec`'s PATH when it exists.
  : >"$root/etc/NIXOS"
  # /bin/sh is bash, as environment.binsh's default (bashInteractive) is.
  ln -sfn bash "$root/usr/bin/sh"
  # A login's PATH, by PAM for every session (sshd's included, with or without a
  # command), and by /etc/profile for login shells, as NixOS' set-environment does.
  printf '# The PATH of a NixOS login (lab/lab.sh, nixos_shape).\nPATH DEFAULT=%s\n' "$NIXOS_PAM_PATH" >>"$root/etc/security/pam_env.conf"
  local shpath
  shpath=$(printf '%s' "$NIXOS_PAM_PATH" | sed 's/@{HOME}/$HOME/g; s/@{PAM_USER}/$USER/g')
  awk -v p="$shpath" '
    /^if \[ "\$\(id -u\)" -eq 0 \]; then$/ { skip = 1; print "# The PATH of a NixOS login (lab/lab.sh, nixos_shape)."; print "PATH=\"" p "\""; next }
    skip && /^export PATH$/ { skip = 0 }
    !skip { print }
  ' "$root/etc/profile" >"$root/etc/profile.new"
  grep -q '^export PATH$' "$root/etc/profile.new" && grep -q '/run/current-system/sw/bin' "$root/etc/profile.new" ||
    { log "nixos_shape: /etc/profile has no PATH block to replace"; exit 1; }
  mv "$root/etc/profile.new" "$root/etc/profile"
  # NixOS' sudoers sets no secure_path: a command under sudo keeps the login's PATH.
  sed -i '/secure_path/d' "$root/etc/sudoers"
  # Debian's housekeeping (apt, dpkg's backups, e2scrub, fstrim) has no place on NixOS,
  # and its scripts call tools by bare name, which a NixOS unit's PATH lacks.
  local u
  for u in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer; do
    ln -sfn /dev/null "$root/etc/systemd/system/$u"
  done
  # The machine's firmware and boot loader, and the kernel's hand-over to NixOS's stage 2
  # (lab/nixos/firmware.sh): at each boot it boots the boot loader's entry. The boot
  # loader is systemd-boot unless a test makes it GRUB (labtest.SetBootLoader).
  mkdir -p "$root/usr/lib/fediversity-standin" "$root/boot"
  install -m 0755 "$HERE/nixos/firmware.sh" "$root/usr/lib/fediversity-standin/firmware"
  echo systemd-boot >"$root/boot/fediversity-standin-loader"
  cat >"$root/etc/systemd/system/fediversity-stage2.service" <<'UNIT'
[Unit]
Description=fediversity lab stand-in of the boot loader and NixOS stage 2: run the boot entry's system
After=local-fs.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/fediversity-standin/firmware boot
[Install]
WantedBy=multi-user.target
UNIT
  mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
  ln -sfn ../fediversity-stage2.service "$root/etc/systemd/system/multi-user.target.wants/fediversity-stage2.service"
}

# build_image: the Debian root with the first system of every node in its store.
build_image() {
  if [ -s "$IMAGE_DIR/rootfs.tar" ] && [ -s "$IMAGE_DIR/meta.tar.xz" ]; then return; fi
  build_rootfs
  log "building the lab image $IMAGE_ID (the first system, with the image's own nix; cached in $IMAGE_DIR)"
  local work root want base sd
  work=$(mktemp -d /var/tmp/fedi-image.XXXXXX)
  root=$work/rootfs
  mkdir -p "$root"
  tar -C "$root" --numeric-owner -xf "$ROOTFS_DIR/rootfs.tar"
  # nix-build needs /dev/pts (a pseudo-terminal for each build's log).
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --make-rslave "$root/dev"
  # (On EXIT: a failed step exits the script, which a RETURN trap would not see.)
  # The work directory goes only once nothing is mounted in it (/dev is the host's).
  trap 'umount "'"$root"'/proc" && umount -R "'"$root"'/dev" && rm -rf --one-file-system "'"$work"'"' EXIT
  mkdir -p "$root/tmp/fedi-lab"
  cp -r "$HERE/closures" "$HERE/nixos" "$root/tmp/fedi-lab/"
  want=$(NIX_CONFIG="substituters =" nix-store -q --outputs "$(NIX_CONFIG="substituters =" nix-instantiate "$HERE/closures" -A nixos-base 2>/dev/null)")
  # As nixos-install does: build the system, make it generation 1 of the system profile,
  # and install its boot entry with its own switch-to-configuration.
  # The build runs before nixos_shape makes /bin/sh bash: with bash as the builders'
  # /bin/sh, Debian's nix 2.8 (root, no sandbox, no build users) often kills a build that
  # follows another ("failed due to signal 9 (Killed)"; seen in a chroot and reproduced
  # with three trivial derivations, never with dash). It is still tried up to five times.
  local try
  for try in 1 2 3 4 5; do
    base=$(chroot "$root" /usr/bin/env NIX_CONFIG="substituters =" /usr/bin/nix-build --no-out-link --option sandbox false \
      --option build-users-group "" /tmp/fedi-lab/closures -A nixos-base 2>"$work/nix-build.log") && break
    grep -q 'failed due to signal 9' "$work/nix-build.log" && [ "$try" != 5 ] && { log "the first system's build was killed; again"; continue; }
    tail -30 "$work/nix-build.log" >&2
    exit 1
  done
  [ "$base" = "$want" ] || { log "the image's nix built $base, the deployer's nix computes $want: not one system"; exit 1; }
  nixos_shape "$root"
  chroot "$root" /usr/bin/nix-env -p /nix/var/nix/profiles/system --set "$base"
  # Every default command resolves in the image (a dangling one would be found by
  # `command -v` and then fail to run).
  chroot "$root" /usr/bin/bash -c 'for f in "$1"/sw/bin/* "$1"/systemd/bin/*; do [ -e "$f" ] || { echo "$f dangles"; exit 1; }; done' - "$base" ||
    { log "the first system's commands do not all resolve in the image"; exit 1; }
  # A unit's PATH: the system's systemd's bin directory, and nothing else (NixOS
  # builds systemd with that default PATH; PID 1 starts with an empty environment).
  sd=$(readlink "$root$base/systemd")
  mkdir -p "$root/etc/systemd/system.conf.d"
  printf '# A unit'"'"'s PATH on NixOS: systemd'"'"'s own bin directory only (lab/lab.sh, build_image).\n[Manager]\nDefaultEnvironment=PATH=%s/bin/\n' "$sd" \
    >"$root/etc/systemd/system.conf.d/nixos-unit-path.conf"
  chroot "$root" "$base/bin/switch-to-configuration" boot 2>>"$work/nix-build.log" ||
    { tail -30 "$work/nix-build.log" >&2; exit 1; }
  chroot "$root" /usr/bin/nix-collect-garbage >/dev/null 2>&1
  rm -rf "$root/tmp/fedi-lab"
  umount "$root/proc"
  umount -R "$root/dev"
  trap - EXIT
  cat >"$work/metadata.yaml" <<META
architecture: x86_64
creation_date: $(date +%s)
properties:
  os: debian
  release: bookworm
  description: fediversity lab node (Debian shaped like NixOS; systemd, sshd, nix-bin)
  fediversity.image: "$IMAGE_ID"
META
  mkdir -p "$IMAGE_DIR"
  tar -C "$work" -cJf "$IMAGE_DIR/meta.tar.xz.tmp" metadata.yaml
  tar -C "$root" --numeric-owner -cf "$IMAGE_DIR/rootfs.tar.tmp" .
  mv "$IMAGE_DIR/meta.tar.xz.tmp" "$IMAGE_DIR/meta.tar.xz"
  mv "$IMAGE_DIR/rootfs.tar.tmp" "$IMAGE_DIR/rootfs.tar"
  rm -rf --one-file-system "$work"
}

import_image() {
  if ! incus image info "$IMAGE_ALIAS" 2>/dev/null | grep "fediversity.image: $IMAGE_ID" >/dev/null; then
    incus image delete "$IMAGE_ALIAS" >/dev/null 2>&1 || true
    log "importing $IMAGE_ALIAS"
    incus image import "$IMAGE_DIR/meta.tar.xz" "$IMAGE_DIR/rootfs.tar" --alias "$IMAGE_ALIAS" >/dev/null
  fi
  prune_images
}

# prune_images: delete the images of this version (lab/debian-v<N>-*) that are not this
# lab's and that no instance was made from, such as the one before a change of the first
# system. Another version's alias (a lab not yet on this version) is never touched.
prune_images() {
  local used alias fp
  # Other labs' tests make and delete instances meanwhile: one listed may be gone by the
  # time it is read (that failed a CI run's lab under set -e), and is then not in use.
  used=$(for n in $(incus list --format csv -c n); do incus config get "$n" volatile.base_image 2>/dev/null || true; done)
  incus image alias list --format csv | while IFS=, read -r alias fp _; do
    case $alias in "lab/debian-v$IMAGE_VERSION-"*) ;; *) continue ;; esac
    [ "$alias" != "$IMAGE_ALIAS" ] || continue
    if ! printf '%s\n' "$used" | grep "^$fp" >/dev/null; then
      log "deleting the unused image $alias"
      incus image delete "$alias" >/dev/null 2>&1 || true
    fi
  done
}

ensure_key() {
  mkdir -p "$STATE" && chmod 700 "$STATE"
  [ -f "$STATE/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C fediversity-lab -f "$STATE/id_ed25519"
}

wait_running() { # instance
  local st=""
  for _ in $(seq 1 60); do
    st=$(incus exec "$1" -- systemctl is-system-running 2>/dev/null || true)
    case "$st" in running) return 0 ;; degraded) break ;; esac
    sleep 1
  done
  if [ "$st" = degraded ]; then
    # A fresh node with a failed unit would show it in every verdict: say so here.
    log "$1: booted degraded, failed units: $(incus exec "$1" -- systemctl --failed --no-legend --plain 2>&1 | awk '{print $1}' | tr '\n' ' ')"
    log "$1: a unit that failed 'at step KEYRING' means the kernel key quota (kernel.keys.maxkeys) is too small"
    return 1
  fi
  log "$1: systemd says '${st:-nothing}' after 60 s"
  return 1
}

# launch_node NAME PORT: make (or restart) one node with the lab key and a loopback SSH proxy.
launch_node() {
  local name=$1 port=$2
  if incus info "$name" >/dev/null 2>&1 &&
    [ "$(incus config get "$name" user.fediversity.image)" != "$IMAGE_ID" ]; then
    log "$name runs an older lab image: relaunching it"
    incus delete --force "$name" >/dev/null
  fi
  if ! incus info "$name" >/dev/null 2>&1; then
    log "launching $name (ssh on 127.0.0.1:$port)"
    incus launch "$IMAGE_ALIAS" "$name" -c "user.fediversity.image=$IMAGE_ID" >/dev/null
  elif ! incus info "$name" | grep '^Status: RUNNING' >/dev/null; then
    log "starting stopped $name"
    incus start "$name"
  fi
  if ! incus config device show "$name" | grep '^ssh:' >/dev/null; then
    incus config device add "$name" ssh proxy "listen=tcp:127.0.0.1:$port" connect=tcp:127.0.0.1:22 bind=host >/dev/null
  fi
  if ! wait_running "$name"; then
    # A node that booted with a failed unit (a lab fault, such as the key quota above)
    # would show it in every verdict of the tests that use it: boot it once more.
    log "restarting $name once"
    incus restart --force "$name" >/dev/null
    wait_running "$name" || log "$name: still not running cleanly; tests that judge its units will say so"
  fi
  # A file push goes through the instance's SFTP server, which incusd starts on demand;
  # under load one failed to reach it ("Failed getting instance SFTP connection"): it
  # overwrites, so it is tried again, three times at most.
  local try
  for try in 1 2 3; do
    incus file push --mode 0600 "$STATE/id_ed25519.pub" "$name/root/.ssh/authorized_keys" >/dev/null && break
    [ "$try" -lt 3 ] || return 1
    sleep 1
  done
  incus exec "$name" -- /bin/sh -c "$(cat "$HERE/host-key-whole.sh"); systemctl restart ssh; echo $name >/etc/hostname; hostname $name"
}

write_state() {
  local json="[" kh="" first=1 i name port key
  for i in $(seq 1 "$LAB_NODES"); do
    name=$LAB_PREFIX-n$i
    port=$((LAB_PORT_BASE + i))
    key=$(incus exec "$name" -- cat /etc/ssh/ssh_host_ed25519_key.pub | awk '{print $1" "$2}')
    # Never pin an empty key: a test would read it as "no pin" and fail for the lab's sake.
    case $key in
      ssh-ed25519\ ?*) ;;
      *) echo "lab.sh: $name has no whole ed25519 host key (read: '$key')" >&2; return 1 ;;
    esac
    kh+="[127.0.0.1]:$port $key"$'\n'
    [ $first = 1 ] || json+=","
    first=0
    json+=$(printf '{"name":"%s","instance":"%s","project":"default","ssh_host":"127.0.0.1","ssh_port":%d,"host_key":"%s"}' "$name" "$name" "$port" "$key")
  done
  json+="]"
  printf '%s' "$kh" >"$STATE/known_hosts"
  printf '%s\n' "$json" >"$STATE/nodes.json"
  # The image's alias, for labtest.Image and the scripts that launch lab containers.
  printf '%s\n' "$IMAGE_ALIAS" >"$STATE/image"
  # The Debian root the image is made from (debootstrap, before the NixOS shape):
  # lab/k8s/node-up.sh makes the real node's base layer from it.
  printf '%s\n' "$ROOTFS_DIR/rootfs.tar" >"$STATE/rootfs"
}

status() {
  [ -f "$STATE/nodes.json" ] || { echo "lab is down"; return; }
  echo "Lab nodes (key $STATE/id_ed25519, known_hosts $STATE/known_hosts):"
  local i
  for i in $(seq 1 "$LAB_NODES"); do
    echo "  $LAB_PREFIX-n$i: ssh -i $STATE/id_ed25519 -o UserKnownHostsFile=$STATE/known_hosts -p $((LAB_PORT_BASE + i)) root@127.0.0.1   |   incus exec $LAB_PREFIX-n$i -- bash"
  done
}

# Each container's systemd takes about a dozen inotify instances, and the kernel's default
# of 128 per user (all containers run as root's mapped users here) stops the tenth node
# or so right after it starts. `make test` runs five labs side by side.
# The same shared user owns every container's kernel keys: systemd gives each unit it
# spawns a session keyring, and past the default quota of 200 keys (20000 bytes) per user
# a unit fails "at step KEYRING" (seen: dev-mqueue.mount in a fresh node, which then
# showed as a failed host unit in verdicts). The figures are Incus' production advice
# for the key quotas, raised tenfold for keys: a full `make test` runs about 25 containers.
raise_limits() {
  [ "$(sysctl -n fs.inotify.max_user_instances)" -ge 2048 ] || sysctl -qw fs.inotify.max_user_instances=2048
  [ "$(sysctl -n fs.inotify.max_user_watches)" -ge 1048576 ] || sysctl -qw fs.inotify.max_user_watches=1048576
  [ "$(sysctl -n kernel.keys.maxkeys)" -ge 20000 ] || sysctl -qw kernel.keys.maxkeys=20000
  [ "$(sysctl -n kernel.keys.maxbytes)" -ge 2000000 ] || sysctl -qw kernel.keys.maxbytes=2000000
}

up() {
  local t0=$SECONDS
  # What every lab on this machine shares (host packages, incusd, the pool, the image) is
  # made by one `up` at a time: `make test` brings several labs up at once.
  exec 9>/run/fediversity-lab.lock
  flock 9
  bash "$HERE/install-host.sh" >&2
  image_id
  raise_limits
  start_incusd
  init_incus
  build_image
  import_image
  flock -u 9
  ensure_key
  local i
  for i in $(seq 1 "$LAB_NODES"); do launch_node "$LAB_PREFIX-n$i" $((LAB_PORT_BASE + i)); done
  write_state
  log "lab up in $((SECONDS - t0)) s"
  status
}

down() {
  if incusd_up; then
    local n
    for n in $(incus list --format csv -c n | grep -E "^$LAB_PREFIX-(n[0-9]+|t-.*|spire)\$" || true); do
      log "deleting $n"
      incus delete --force "$n" >/dev/null
    done
    # The image is shared with any other lab on this incusd (another LAB_PREFIX): keep it
    # while one of those still has nodes.
    if ! incus list --format csv -c n | grep -E -- '-n[0-9]+$' >/dev/null; then
      incus image delete "$IMAGE_ALIAS" >/dev/null 2>&1 || true
    fi
    prune_images
  fi
  rm -rf "$STATE"
  log "lab down (incusd and the cached image tarballs in $IMAGE_DIR and $ROOTFS_DIR are kept)"
}

case "${1:-up}" in
up) up ;;
down) image_id; down ;;
status) status ;;
image) image_id; exec 9>/run/fediversity-lab.lock; flock 9; start_incusd; init_incus; build_image; import_image ;;
alias) image_id; echo "$IMAGE_ALIAS" ;;
*) echo "usage: $0 up|down|status|image|alias" >&2; exit 2 ;;
esac
