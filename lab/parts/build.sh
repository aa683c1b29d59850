#!/usr/bin/env bash
# Builds the lab's parts from one Go module (go.mod beside this script): the Kubernetes
# control plane and the kubelet, etcd, kwok, runc, and SPIRE's server and agent; and
# containerd (with its runc shim and ctr) from a module of its own (containerd/go.mod:
# below, why). Into a cache outside the clone, keyed on the parts' versions and on the
# modules' whole version set; prints one "name=/abs/path" line per binary. Idempotent: with every binary cached it prints the paths and does
# nothing. lab/k8s/build.sh, lab/k8s/node-build.sh and lab/spire/build.sh print their
# binaries from here.
#
# Why one module: each part built from a module of its own compiled its own copy of the
# libraries they share (client-go, apimachinery, the Kubernetes API types, gRPC,
# protobuf, OpenTelemetry…), at its own versions, with its own flags. One module picks
# one version of each library (Go's minimal version selection over every part's
# requirements), and one `go build` of every command with one set of flags compiles each
# shared package once.
#
# The one set of flags, and why each is there:
#   CGO_ENABLED=1   SPIRE's sqlite datastore (mattn/go-sqlite3) and runc's seccomp
#                   (libseccomp) need cgo; the rest runs on this host (or, for the agent,
#                   in the lab's Debian containers of the same release), so linking
#                   against the host's glibc is fine for all.
#   -tags           seccomp, urfave_cli_no_docs: runc's; no_btrfs no_devmapper no_zfs:
#                   containerd's (no btrfs headers here; the lab needs only overlayfs).
#                   Each tag selects files of the part that names it only.
#   -ldflags        -s -w, and the version stamps: Kubernetes' (component-base and
#                   client-go, which kwok and SPIRE share: they report the client-go
#                   they are built with, which is v1.36.1's here) in the one module,
#                   containerd's in its own. A stamp of a package a binary does not
#                   link is ignored.
#
# The versions (go.mod): Kubernetes v1.36.1 lists its staging modules (k8s.io/api,
# client-go, …) at v0.0.0 with replace directives of its own, which are not applied to a
# module that requires it; go.mod replaces each with its published v0.36.1. That one
# replace holds every part to the staging modules of v1.36.1, which the kubelet and the
# control plane need exactly. SPIRE v1.13.3 (v0.34.1) and kwok v0.8.0 (v0.36.1) ask
# for older or the same. One more hold: go-spiffe at SPIRE's v2.6.0 (go.mod says why).
# containerd v2.4.2 cannot be in that set: it needs
# k8s.io/cri-api v0.37 (it uses v0.37's CRI signal enums; tried: "undefined:
# runtime.Signal_SIGNAL_RUNTIME_DEFAULT" at v0.36.1), and the kubelet of v1.36.1 cannot
# build at v0.37 (its k8s.io/cri-client v0.36.1 implements cri-api's RuntimeService, to
# which v0.37 adds CheckpointPod and RestorePod). So containerd builds from
# containerd/go.mod, with the same flags, and compiles its own copy of what it shares
# with the rest. To change a version: edit the require line, `bash lab/parts/build.sh
# --tidy` (keeps the staging replaces in step with the Kubernetes version), and commit
# the go.mod and go.sum files.
#
# OpenTofu is not here: lab/build-tofu.sh builds it (CGO off, its own hcl replace), as
# the nodes suites wait on it alone, early in a run. The provider's tests and release
# build from the provider's go.mod, whose versions are its own: only a library at the
# same version and flags could share a compile with the parts.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# A registry that answers slowly once is tried again (lab/retry.sh).
. "$HERE/../retry.sh"
cd "$HERE"

CACHE_ROOT="${FEDIVERSITY_K8S_CACHE:-${FEDIVERSITY_CACHE:-/var/cache/fediversity}}"
# Niced so that a developer's machine stays usable; lab/test.sh sets 0 (the suites wait on it).
NICE="nice -n ${FEDIVERSITY_BUILD_NICE:-10}"
TAGS="seccomp urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
log() { echo "parts/build.sh: $*" >&2; }

version() { # version MODULE [GO.MOD]: the version GO.MOD (default ./go.mod) requires
  awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "${2:-go.mod}"
}

if [[ "${1:-}" == --tidy ]]; then
  k8s=$(version k8s.io/kubernetes)
  gomod=$(retry go mod download -json "k8s.io/kubernetes@$k8s" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  staging=$(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1} $1=="require" && $2 ~ /^k8s\.io\// && $3=="v0.0.0" {print $2}' "$gomod" | sort -u)
  for m in $staging; do go mod edit -replace "$m=$m@v0.${k8s#v1.}"; done
  GOFLAGS=-mod=mod retry go mod tidy
  (cd containerd && GOFLAGS=-mod=mod retry go mod tidy)
  exit 0
fi

K8S_VERSION=$(version k8s.io/kubernetes)
KWOK_VERSION=$(version sigs.k8s.io/kwok)
RUNC_VERSION=$(version github.com/opencontainers/runc)
SPIRE_VERSION=$(version github.com/spiffe/spire)
CONTAINERD_VERSION=$(version github.com/containerd/containerd/v2 containerd/go.mod)
# Each part's directory names its version, and the version set it was built in (the
# go.mod and go.sum files, this script's flags): a library's version moved is a new
# build, not a stale binary under an old name.
set_hash=$( { cat go.mod go.sum containerd/go.mod containerd/go.sum; echo "$TAGS"; } | sha256sum | cut -c1-8)
dir() { echo "$CACHE_ROOT/$1-$2+parts-$set_hash/bin"; }
K8S_BIN=$(dir k8s "$K8S_VERSION")
KWOK_BIN=$(dir kwok "$KWOK_VERSION")
CTRD_BIN=$(dir containerd "$CONTAINERD_VERSION")
RUNC_BIN=$(dir runc "$RUNC_VERSION")
SPIRE_BIN=$(dir spire "$SPIRE_VERSION")

# name, package, directory of each binary, and the module it builds in (. or containerd)
binaries=(
  "kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver $K8S_BIN ."
  "kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager $K8S_BIN ."
  "kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler $K8S_BIN ."
  "kubelet k8s.io/kubernetes/cmd/kubelet $K8S_BIN ."
  "etcd go.etcd.io/etcd/server/v3 $K8S_BIN ."
  "kwok sigs.k8s.io/kwok/cmd/kwok $KWOK_BIN ."
  "runc github.com/opencontainers/runc $RUNC_BIN ."
  "spire-server github.com/spiffe/spire/cmd/spire-server $SPIRE_BIN ."
  "spire-agent github.com/spiffe/spire/cmd/spire-agent $SPIRE_BIN ."
  "containerd github.com/containerd/containerd/v2/cmd/containerd $CTRD_BIN containerd"
  "containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 $CTRD_BIN containerd"
  "ctr github.com/containerd/containerd/v2/cmd/ctr $CTRD_BIN containerd"
)
packages_of() { # packages_of MODULE: the packages of the binaries built in MODULE
  local module=$1 b; for b in "${binaries[@]}"; do set -- $b; [[ $4 != "$module" ]] || echo "$2"; done
}
print_paths() { local b; for b in "${binaries[@]}"; do set -- $b; echo "$1=$3/$1"; done; }
all_cached() { local b; for b in "${binaries[@]}"; do set -- $b; [[ -x $3/$1 ]] || return 1; done; }

# fetch: download the modules the build needs (go.sum pins them), not the whole graph's
# (every part's tests' and cloud SDKs' modules): listing the commands' packages fetches
# exactly those. With retries, as a registry may answer slowly once.
fetch() {
  log "fetching the modules the parts' build needs"
  local module
  for module in . containerd; do
    (cd "$module" && CGO_ENABLED=1 retry go list -mod=readonly -tags "$TAGS" -deps $(packages_of "$module") >/dev/null)
  done
}
# --fetch: only that (lab/fetch-modules.sh, at a run's start, when the parts are not cached).
if [[ "${1:-}" == --fetch ]]; then fetch; exit 0; fi

if all_cached; then print_paths; exit 0; fi
# --cached: say whether it is built (exit 0, its paths) or not (exit 1), and build nothing.
[[ "${1:-}" != --cached ]] || exit 1

# One build at a time (lab/test.sh asks for the control plane, the real node and SPIRE
# side by side): the second waits, then finds every binary built.
mkdir -p "$CACHE_ROOT"
exec 8>"$CACHE_ROOT/.parts-build.lock"
flock 8
if all_cached; then print_paths; exit 0; fi

apt_need=()
[[ -e /usr/include/seccomp.h ]] || apt_need+=(libseccomp-dev)
if (( ${#apt_need[@]} )); then
  log "apt-get install ${apt_need[*]}"
  DEBIAN_FRONTEND=noninteractive retry apt-get -o DPkg::Lock::Timeout=600 install -y "${apt_need[@]}" >&2
fi

start=$(date +%s)
fetch
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
declare -A ld=([.]="-s -w" [containerd]="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION")
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld[.]+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
out=$(mktemp -d "$CACHE_ROOT/.parts-build.XXXXXX")
trap 'rm -rf "$out"' EXIT
log "building K8s $K8S_VERSION, kwok $KWOK_VERSION, runc $RUNC_VERSION and SPIRE $SPIRE_VERSION in one go build, then containerd $CONTAINERD_VERSION"
# One go build of every command of a module: each shared package is compiled once, and
# the compiles of all parts fill both cores to the end.
for module in . containerd; do
  (cd "$module" && CGO_ENABLED=1 $NICE go build -mod=readonly -trimpath -tags "$TAGS" -ldflags "${ld[$module]}" -o "$out/" $(packages_of "$module") >&2)
done
# go build names a binary after its package's last element, and a major version
# suffix's parent for etcd's server/v3: "server".
mv "$out/server" "$out/etcd"
for b in "${binaries[@]}"; do
  set -- $b
  mkdir -p "$3"
  mv "$out/$1" "$3/$1"
done
times >&2
log "done in $(( $(date +%s) - start ))s"
print_paths
