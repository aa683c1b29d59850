#!/usr/bin/env bash
# Builds golangci-lint at the version `make lint` pins (GOLANGCI_VERSION) into a cache
# outside the clone, keyed on that version, and prints the binary's path. `go install
# module@version` checks the sources against the Go checksum database. A second run with
# the cache present does nothing.
set -euo pipefail
# A registry that answers slowly once is tried again (lab/retry.sh).
. "$(dirname "${BASH_SOURCE[0]}")/retry.sh"
GOLANGCI_VERSION=${GOLANGCI_VERSION:-v2.15.0}
CACHE=${FEDIVERSITY_CACHE:-/var/cache/fediversity}
bin="$CACHE/golangci-lint-$GOLANGCI_VERSION/bin"
out="$bin/golangci-lint"
if [ -x "$out" ] && "$out" version >/dev/null 2>&1; then echo "$out"; exit 0; fi
mkdir -p "$bin"
# Built in a directory of its own: GOBIN is where `go install` puts it; a temporary
# GOBIN, then a rename, so an interrupted build never leaves a half-written binary.
tmp=$(mktemp -d "$bin/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS= retry nice -n 10 go install -trimpath \
  "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_VERSION" >&2)
mv "$tmp/golangci-lint" "$out"
echo "$out"
