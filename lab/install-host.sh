#!/usr/bin/env bash
# Installs, idempotently, what the lab and the tests need on a fresh Debian 12 machine
# of this project's kind: incus (bookworm-backports), debootstrap, nix-bin, openssh-client,
# openssl, xz, btrfs-progs (the lab's storage pool); for the real Kubernetes node, the CNI plugins (containernetworking-plugins)
# and libseccomp-dev (runc is built with seccomp); patchelf, busybox-static and systemd (the bootable stand-in system of
# lab/closures copies the host's systemd and busybox into the store); xmllint (libxml2-utils), with which the tests validate the
# `fediversity` command's JUnit file against the vendored JUnit schema; the packages of NixOS's default commands
# (below); knot, the DNS server of the DNS lane's tests. Safe to run again; does nothing that is already done.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/retry.sh"
need=()
command -v incus >/dev/null 2>&1 || need+=(incus)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v nix-build >/dev/null 2>&1 || need+=(nix-bin)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v mkfs.btrfs >/dev/null 2>&1 || need+=(btrfs-progs)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
[ -e /usr/include/seccomp.h ] || need+=(libseccomp-dev)
command -v xmllint >/dev/null 2>&1 || need+=(libxml2-utils)
command -v patchelf >/dev/null 2>&1 || need+=(patchelf)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
[ -x /lib/systemd/systemd ] || need+=(systemd) # the bootable stand-in's systemd
# knot: the DNS server the DNS lane's records are checked against. The package starts
# no server here (no systemd); a test runs its own knotd on a port of its own on 127.0.0.1.
command -v knotd >/dev/null 2>&1 || need+=(knot)
# The default commands of a NixOS system (lab/nixos/default-commands): the stand-in
# systems of lab/closures link each to its Debian binary, so the deployer that builds
# them needs the packages the lab image has (lab/lab.sh's NIXOS_PACKAGES).
for cp in getfacl:acl getfattr:attr bzip2:bzip2 cpio:cpio curl:curl gawk:gawk patch:patch \
  xz:xz-utils less:less getcap:libcap2-bin nc:netcat-openbsd mkpasswd:whois time:time \
  zstd:zstd host:bind9-host ping:iputils-ping tracepath:iputils-tracepath \
  arping:iputils-arping ifconfig:net-tools sudo:sudo; do
  [ -e "/usr/bin/${cp%%:*}" ] || [ -e "/usr/sbin/${cp%%:*}" ] || need+=("${cp#*:}")
done
[ ${#need[@]} -eq 0 ] && { echo "install-host: all present"; exit 0; }

src=/etc/apt/sources.list.d/bookworm-backports.sources
if [ ! -f "$src" ]; then
  uri=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=http://deb.debian.org/debian
  cat >"$src" <<SRC
Types: deb
URIs: $uri
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
export DEBIAN_FRONTEND=noninteractive
# Another job of the set-up (the real node's build) may hold the dpkg lock: wait for it.
# A mirror that answers slowly once is tried again (lab/retry.sh).
apt_get() { retry apt-get -o DPkg::Lock::Timeout=600 "$@"; }
apt_get update -qq
rest=()
for p in "${need[@]}"; do [ "$p" = incus ] || rest+=("$p"); done
[ ${#rest[@]} -eq 0 ] || apt_get install -y -qq --no-install-recommends "${rest[@]}"
if [[ " ${need[*]} " == *" incus "* ]]; then
  apt_get install -y -qq -t bookworm-backports incus
fi
echo "install-host: installed ${need[*]}"
