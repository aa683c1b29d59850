#!/usr/bin/env bash
# Builds OpenTofu from its Go module (it cannot be `go install`ed: its go.mod has a
# replace directive) into a cache outside the clone, keyed on the version, and prints
# the binary's path. A second run with the cache present does nothing. Its modules are
# fetched with retries (lab/retry.sh).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/retry.sh"
TOFU_VERSION=${TOFU_VERSION:-v1.10.6}
HCL_REPLACE=${HCL_REPLACE:-github.com/opentofu/hcl/v2@v2.20.2-0.20250121132637-504036cd70e7}
CACHE=${FEDIVERSITY_CACHE:-/var/cache/fediversity}
out="$CACHE/tofu-$TOFU_VERSION/tofu"
if [ -x "$out" ] && "$out" version >/dev/null 2>&1; then echo "$out"; exit 0; fi
# --cached: say whether it is built (exit 0, its path) or not (exit 1), and build nothing.
[ "${1:-}" != --cached ] || exit 1
mkdir -p "$(dirname "$out")"
# One build at a time (make test builds it in the background, and CI's release check
# beside make test asks for it too): the second waits, then finds it built.
exec 8>"$(dirname "$out")/.build.lock"
flock 8
if [ -x "$out" ] && "$out" version >/dev/null 2>&1; then echo "$out"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cat > go.mod <<MOD
module fediversity.local/tofu-tools

go 1.24

require github.com/opentofu/opentofu $TOFU_VERSION

replace github.com/hashicorp/hcl/v2 v2.20.1 => ${HCL_REPLACE/@/ }
MOD
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "github.com/opentofu/opentofu/cmd/tofu"
GO
GOFLAGS=-mod=mod retry go mod tidy >&2
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" -o "$out.tmp" github.com/opentofu/opentofu/cmd/tofu >&2
mv "$out.tmp" "$out"
echo "$out"
