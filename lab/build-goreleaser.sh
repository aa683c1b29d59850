#!/usr/bin/env bash
# Builds goreleaser at the version pinned in tools/release/go.mod (with go.sum, so the
# sources are checked) into a cache outside the clone, keyed on that version, and prints
# the binary's path. A second run with the cache present does nothing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../tools/release"
version=$(go list -m -f '{{.Version}}' github.com/goreleaser/goreleaser/v2)
CACHE=${FEDIVERSITY_CACHE:-/var/cache/fediversity}
out="$CACHE/goreleaser-$version/goreleaser"
if [ -x "$out" ] && "$out" --version >/dev/null 2>&1; then echo "$out"; exit 0; fi
mkdir -p "$(dirname "$out")"
CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w -X main.version=$version" \
  -o "$out.tmp" github.com/goreleaser/goreleaser/v2 >&2
mv "$out.tmp" "$out"
echo "$out"
