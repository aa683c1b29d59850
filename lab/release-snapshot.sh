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
SNAPSHOT_COMMIT=$(git rev-parse --short=7 HEAD) "$goreleaser" release --snapshot --clean --skip=sign
echo "goreleaser snapshot took $((SECONDS - t0)) s"

# goreleaser lists the manifest in the SHA256SUMS file but only uploads it at release
# (release.extra_files), from the repository; put the same file where the upload puts it.
sums=$(ls dist/*_SHA256SUMS)
cp terraform-registry-manifest.json "${sums%_SHA256SUMS}_manifest.json"

go run ./tools/releasecheck -manifest terraform-registry-manifest.json dist
