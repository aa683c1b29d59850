#!/usr/bin/env bash
# `make release-snapshot`: builds the release as `goreleaser release` would (every
# platform of .goreleaser.yml), in snapshot mode: no tag needed, nothing signed or
# published. Then checks dist/ against what the Terraform and OpenTofu registries take
# (tools/releasecheck). goreleaser is the version pinned in tools/release/go.mod, built
# once into /var/cache/fediversity by lab/build-goreleaser.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
goreleaser=$(bash lab/build-goreleaser.sh)
t0=$SECONDS
"$goreleaser" release --snapshot --clean --skip=sign
echo "goreleaser snapshot took $((SECONDS - t0)) s"
go run ./tools/releasecheck -manifest terraform-registry-manifest.json dist
