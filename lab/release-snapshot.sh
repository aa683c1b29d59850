#!/usr/bin/env bash
# `make release-snapshot`: builds the release as `goreleaser release` would (every
# platform of .goreleaser.yml), in snapshot mode: no tag needed, nothing signed or
# published. Then checks dist/ against what the Terraform and OpenTofu registries take
# (tools/releasecheck). goreleaser is the version pinned in tools/release/go.mod, built
# once into /var/cache/fediversity by lab/build-goreleaser.sh.
#
#   bash lab/release-snapshot.sh                  every platform (a tagged release builds these)
#   bash lab/release-snapshot.sh --single-target  this machine's platform only (`make release-check`,
#                                                 what CI runs: the same archives, sums and
#                                                 checks, for one platform instead of six)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
config=.goreleaser.yml
if [ "${1:-}" = --single-target ]; then
  # The same configuration with each build's platform list cut to this machine's.
  config=$(mktemp --suffix=.yml)
  trap 'rm -f "$config"' EXIT
  sed -e "s/^\( *goos:\) \[.*\]/\1 [$(go env GOOS)]/" -e "s/^\( *goarch:\) \[.*\]/\1 [$(go env GOARCH)]/" \
    .goreleaser.yml >"$config"
  [ "$(grep -c "goos: \[$(go env GOOS)\]" "$config")" = 2 ] || {
    echo "release-snapshot.sh: could not restrict .goreleaser.yml to one platform (its goos/goarch lines changed?)" >&2
    exit 1
  }
elif [ -n "${1:-}" ]; then
  echo "usage: $0 [--single-target]" >&2
  exit 2
fi
goreleaser=$(bash lab/build-goreleaser.sh)
t0=$SECONDS
SNAPSHOT_COMMIT=$(git rev-parse --short=7 HEAD) "$goreleaser" release --config "$config" --snapshot --clean --skip=sign
echo "goreleaser snapshot took $((SECONDS - t0)) s"

# goreleaser lists the manifest in the SHA256SUMS file but only uploads it at release
# (release.extra_files), from the repository; put the same file where the upload puts it.
sums=$(ls dist/*_SHA256SUMS)
cp terraform-registry-manifest.json "${sums%_SHA256SUMS}_manifest.json"

go run ./tools/releasecheck -manifest terraform-registry-manifest.json dist
