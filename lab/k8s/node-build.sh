#!/usr/bin/env bash
# Build the real node's parts into a cache outside the clone, keyed on versions:
# containerd (+ its runc shim and ctr) and runc, built with the lab's other parts by
# lab/parts/build.sh (which says why runc is in the one module and containerd in its
# own); the lab's runtime wrapper
# (fediversity-runtime) and a static pause binary for the sandbox image, built from this
# clone. The kubelet comes from lab/k8s/build.sh. The CNI plugins come from Debian
# (containernetworking-plugins), installed by apt when missing.
#
# Idempotent: when every binary is cached it prints the paths and does nothing.
# Output (stdout): one line per binary, "name=/abs/path".
# --cached: say whether they are built (exit 0, their paths) or not (exit 1), build nothing.
set -euo pipefail
# A registry that answers slowly once is tried again (lab/retry.sh).
. "$(dirname "${BASH_SOURCE[0]}")/../retry.sh"

HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE_ROOT="${FEDIVERSITY_K8S_CACHE:-${FEDIVERSITY_CACHE:-/var/cache/fediversity}}"
# The wrapper and pause are small and built from this clone: keyed on their source hash.
src_hash=$(cat "$HERE/fediversity-runtime/"*.go "$HERE/pause/"*.go | sha256sum | cut -c1-12)
LAB_BIN="$CACHE_ROOT/node-lab-$src_hash/bin"

log() { echo "node-build.sh: $*" >&2; }

parts() { bash "$HERE/../parts/build.sh" "$@" | grep -E '^(containerd|containerd-shim-runc-v2|ctr|runc)='; }
print_lab_paths() {
  echo "fediversity-runtime=$LAB_BIN/fediversity-runtime"
  echo "pause=$LAB_BIN/pause"
  echo "cni=/usr/lib/cni"
}

have_lab=1
while IFS='=' read -r _ p; do [[ -e $p ]] || have_lab=0; done < <(print_lab_paths)
if [[ $have_lab == 1 ]] && paths=$(parts --cached); then echo "$paths"; print_lab_paths; exit 0; fi
[[ "${1:-}" != --cached ]] || exit 1
start=$(date +%s)

if [[ ! -x /usr/lib/cni/bridge ]]; then
  log "apt-get install containernetworking-plugins"
  DEBIAN_FRONTEND=noninteractive retry apt-get -o DPkg::Lock::Timeout=600 install -y containernetworking-plugins >&2
fi

build_lab() {
  [[ -x $LAB_BIN/fediversity-runtime && -x $LAB_BIN/pause ]] && return 0
  mkdir -p "$LAB_BIN"
  log "building fediversity-runtime and pause"
  cd "$HERE/../.."
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$LAB_BIN/fediversity-runtime" ./lab/k8s/fediversity-runtime
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$LAB_BIN/pause" ./lab/k8s/pause
}

( build_lab )
paths=$(parts)
log "done in $(( $(date +%s) - start ))s"
echo "$paths"
print_lab_paths
