#!/usr/bin/env bash
# Build a real Kubernetes control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd), the kubelet of the lab's real node (see node-up.sh) and kwok into a cache outside the clone, keyed on versions.
#
# Idempotent: when every binary is cached it prints the paths and does nothing.
# Output (stdout): one line per binary, "name=/abs/path".
#
# Why a wrapper module: `go install k8s.io/kubernetes/cmd/...@v1.36.1` is refused
# because kubernetes' go.mod holds replace directives. The wrapper requires
# k8s.io/kubernetes and replaces each k8s.io/* staging module that kubernetes lists at
# v0.0.0 with its published v0.<minor>.<patch> release. The list is generated from
# kubernetes' own go.mod, because new staging modules appear between versions.
# etcd comes from the same module graph (go.etcd.io/etcd/server/v3), so it matches.
#
# See /work/shared/K8S-LAB.md for the verified facts this follows.
set -euo pipefail
# A registry that answers slowly once is tried again (lab/retry.sh).
. "$(dirname "${BASH_SOURCE[0]}")/../retry.sh"

K8S_VERSION="${K8S_VERSION:-v1.36.1}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
CACHE_ROOT="${FEDIVERSITY_K8S_CACHE:-${FEDIVERSITY_CACHE:-/var/cache/fediversity}}"
OUT="$CACHE_ROOT/k8s-$K8S_VERSION"
BIN="$OUT/bin"
KWOK_BIN="$CACHE_ROOT/kwok-$KWOK_VERSION/bin"
# Niced so that a developer's machine stays usable; lab/test.sh sets 0 (the suites wait on it).
NICE="nice -n ${FEDIVERSITY_BUILD_NICE:-10}"

log() { echo "build.sh: $*" >&2; }

components=(kube-apiserver kube-controller-manager kube-scheduler kubelet etcd)

have_all=1
for c in "${components[@]}"; do [[ -x "$BIN/$c" ]] || have_all=0; done
[[ -x "$KWOK_BIN/kwok" ]] || have_all=0

print_paths() {
  for c in "${components[@]}"; do echo "$c=$BIN/$c"; done
  echo "kwok=$KWOK_BIN/kwok"
}

if [[ $have_all == 1 ]]; then
  print_paths
  exit 0
fi
# --cached: say whether it is built (exit 0, its paths) or not (exit 1), and build nothing.
[[ "${1:-}" != --cached ]] || exit 1

start=$(date +%s)
mkdir -p "$BIN" "$KWOK_BIN"

# Staging-module minor version: v1.36.1 -> v0.36.1
staging_version="v0.${K8S_VERSION#v1.}"
major=1
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"

build_k8s() {
  local work="$OUT/wrapper"
  mkdir -p "$work"
  cd "$work"
  log "resolving k8s.io/kubernetes@$K8S_VERSION"
  local gomod
  gomod=$(retry go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [[ -f "$gomod" ]] || { log "cannot find go.mod of k8s.io/kubernetes@$K8S_VERSION"; exit 1; }

  # Every k8s.io/* module required at v0.0.0 is a staging module.
  local staging
  staging=$(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1} $1=="require" && $2 ~ /^k8s\.io\// && $3=="v0.0.0" {print $2}' "$gomod" | sort -u)
  [[ -n "$staging" ]] || { log "no staging modules found in $gomod"; exit 1; }
  log "staging modules: $(echo "$staging" | wc -l) -> $staging_version"

  {
    echo "module fediversity.local/k8s-wrapper"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    for m in $staging; do echo "	$m => $m $staging_version"; done
    echo ")"
  } > go.mod
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
  log "go mod tidy (wrapper)"
  GOFLAGS=-mod=mod retry $NICE go mod tidy -e >&2
  # etcd's main package lives in the server module (go.etcd.io/etcd/server/v3 is the etcd binary's main).
  if ! grep -q 'go.etcd.io/etcd/server/v3' go.mod; then
    log "go.etcd.io/etcd/server/v3 not in the module graph"; exit 1
  fi

  local ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  for c in kube-apiserver kube-controller-manager kube-scheduler kubelet; do
    [[ -x "$BIN/$c" ]] && continue
    log "building $c"
    CGO_ENABLED=0 $NICE go build -trimpath -ldflags "$ld" -o "$BIN/$c.tmp" "k8s.io/kubernetes/cmd/$c" >&2
    mv "$BIN/$c.tmp" "$BIN/$c"
  done
  if [[ ! -x "$BIN/etcd" ]]; then
    log "building etcd"
    CGO_ENABLED=0 $NICE go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3 >&2
    mv "$BIN/etcd.tmp" "$BIN/etcd"
  fi
}

build_kwok() {
  [[ -x "$KWOK_BIN/kwok" ]] && return 0
  log "building kwok $KWOK_VERSION"
  GOBIN="$KWOK_BIN" CGO_ENABLED=0 retry $NICE go install -trimpath "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" >&2
}

( build_k8s )
build_kwok
log "done in $(( $(date +%s) - start ))s"
print_paths
