#!/usr/bin/env bash
# Build SPIRE (spire-server, spire-agent) into a cache outside the clone, keyed on the
# version. Idempotent: with both binaries cached it prints their paths and does nothing.
# Output (stdout): "spire-server=/abs/path" and "spire-agent=/abs/path".
#
# Why a tools module: `go install github.com/spiffe/spire/cmd/spire-server@v1.13.3` is
# refused (SPIRE's go.mod holds replace directives), but the commands build as tools of
# a small module. cgo is needed: the sqlite datastore is github.com/mattn/go-sqlite3.
# A cold build takes about 11 minutes on 2 cores with a peak of about 4 GB RSS.
set -euo pipefail
# A registry that answers slowly once is tried again (lab/retry.sh).
. "$(dirname "${BASH_SOURCE[0]}")/../retry.sh"

SPIRE_VERSION="${SPIRE_VERSION:-v1.13.3}"
CACHE_ROOT="${FEDIVERSITY_CACHE:-/var/cache/fediversity}"
OUT="$CACHE_ROOT/spire-$SPIRE_VERSION"
BIN="$OUT/bin"
# Niced so that a developer's machine stays usable; lab/test.sh sets 0 (the suites wait on it).
NICE="nice -n ${FEDIVERSITY_BUILD_NICE:-10}"
commands=(spire-server spire-agent)

log() { echo "spire/build.sh: $*" >&2; }
print_paths() { for c in "${commands[@]}"; do echo "$c=$BIN/$c"; done; }

have_all=1
for c in "${commands[@]}"; do [[ -x "$BIN/$c" ]] || have_all=0; done
if [[ $have_all == 1 ]]; then print_paths; exit 0; fi
# --cached: say whether it is built (exit 0, its paths) or not (exit 1), and build nothing.
[[ "${1:-}" != --cached ]] || exit 1

start=$(date +%s)
work="$OUT/tools"
mkdir -p "$BIN" "$work"
cd "$work"
if [[ ! -f go.mod ]]; then
  go mod init fediversity.local/spire-tools >&2
fi
for c in "${commands[@]}"; do
  GOFLAGS=-mod=mod retry $NICE go get -tool "github.com/spiffe/spire/cmd/$c@$SPIRE_VERSION" >&2
done
for c in "${commands[@]}"; do
  [[ -x "$BIN/$c" ]] && continue
  log "building $c $SPIRE_VERSION"
  # The binary is pushed into the lab containers (Debian, the same release as the host),
  # so linking against the host's glibc is fine.
  CGO_ENABLED=1 $NICE go build -trimpath -ldflags "-s -w" -o "$BIN/$c.tmp" "github.com/spiffe/spire/cmd/$c" >&2
  mv "$BIN/$c.tmp" "$BIN/$c"
done
log "done in $(( $(date +%s) - start ))s"
print_paths
