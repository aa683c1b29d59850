#!/usr/bin/env bash
# Build the real node's parts into a cache outside the clone, keyed on versions:
# containerd (+ its runc shim and ctr), runc, the lab's runtime wrapper
# (fediversity-runtime) and a static pause binary for the sandbox image. The kubelet is
# built by build.sh, in the control plane's wrapper module. The CNI plugins come from Debian
# (containernetworking-plugins) and runc needs libseccomp-dev: both are installed by apt
# when missing.
#
# Idempotent: when every binary is cached it prints the paths and does nothing.
# Output (stdout): one line per binary, "name=/abs/path".
set -euo pipefail
# A registry that answers slowly once is tried again (lab/retry.sh).
. "$(dirname "${BASH_SOURCE[0]}")/../retry.sh"

HERE="$(cd "$(dirname "$0")" && pwd)"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
RUNC_VERSION="${RUNC_VERSION:-v1.5.3}"
CACHE_ROOT="${FEDIVERSITY_K8S_CACHE:-${FEDIVERSITY_CACHE:-/var/cache/fediversity}}"
CTRD_BIN="$CACHE_ROOT/containerd-$CONTAINERD_VERSION/bin"
RUNC_BIN="$CACHE_ROOT/runc-$RUNC_VERSION/bin"
# The wrapper and pause are small and built from this clone: keyed on their source hash.
src_hash=$(cat "$HERE/fediversity-runtime/"*.go "$HERE/pause/"*.go | sha256sum | cut -c1-12)
LAB_BIN="$CACHE_ROOT/node-lab-$src_hash/bin"
# Niced so that a developer's machine stays usable; lab/test.sh sets 0 (the suites wait on it).
NICE="nice -n ${FEDIVERSITY_BUILD_NICE:-10}"

log() { echo "node-build.sh: $*" >&2; }

print_paths() {
  echo "containerd=$CTRD_BIN/containerd"
  echo "containerd-shim-runc-v2=$CTRD_BIN/containerd-shim-runc-v2"
  echo "ctr=$CTRD_BIN/ctr"
  echo "runc=$RUNC_BIN/runc"
  echo "fediversity-runtime=$LAB_BIN/fediversity-runtime"
  echo "pause=$LAB_BIN/pause"
  echo "cni=/usr/lib/cni"
}

have_all=1
while IFS='=' read -r _ p; do [[ -e $p ]] || have_all=0; done < <(print_paths)
if [[ $have_all == 1 ]]; then print_paths; exit 0; fi
# --cached: say whether it is built (exit 0, its paths) or not (exit 1), and build nothing.
[[ "${1:-}" != --cached ]] || exit 1
start=$(date +%s)

apt_need=()
[[ -x /usr/lib/cni/bridge ]] || apt_need+=(containernetworking-plugins)
[[ -e /usr/include/seccomp.h ]] || apt_need+=(libseccomp-dev)
if (( ${#apt_need[@]} )); then
  log "apt-get install ${apt_need[*]}"
  DEBIAN_FRONTEND=noninteractive retry apt-get -o DPkg::Lock::Timeout=600 install -y "${apt_need[@]}" >&2
fi

build_containerd() {
  [[ -x $CTRD_BIN/containerd && -x $CTRD_BIN/containerd-shim-runc-v2 && -x $CTRD_BIN/ctr ]] && return 0
  local work="$CACHE_ROOT/containerd-$CONTAINERD_VERSION/tools"
  mkdir -p "$work" "$CTRD_BIN"; cd "$work"
  [[ -f go.mod ]] || go mod init fediversity.local/containerd-tools >&2
  log "building containerd $CONTAINERD_VERSION"
  GOFLAGS=-mod=mod retry $NICE go get -tool "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" >&2
  # No btrfs headers here, and the lab needs only the overlayfs snapshotter.
  CGO_ENABLED=0 GOBIN="$CTRD_BIN" $NICE go install -trimpath -tags "no_btrfs no_devmapper no_zfs" -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr >&2
}

build_runc() {
  [[ -x $RUNC_BIN/runc ]] && return 0
  mkdir -p "$RUNC_BIN"
  log "building runc $RUNC_VERSION"
  GOBIN="$RUNC_BIN" CGO_ENABLED=1 retry $NICE go install -trimpath -tags "seccomp urfave_cli_no_docs" \
    -ldflags "-s -w" "github.com/opencontainers/runc@$RUNC_VERSION" >&2
}

build_lab() {
  [[ -x $LAB_BIN/fediversity-runtime && -x $LAB_BIN/pause ]] && return 0
  mkdir -p "$LAB_BIN"
  log "building fediversity-runtime and pause"
  cd "$HERE/../.."
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$LAB_BIN/fediversity-runtime" ./lab/k8s/fediversity-runtime
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$LAB_BIN/pause" ./lab/k8s/pause
}

( build_containerd )
( build_runc )
( build_lab )
log "done in $(( $(date +%s) - start ))s"
print_paths
