#!/usr/bin/env bash
# Fetches every Go module a run needs, once, with retries (lab/retry.sh): the provider's
# and the tools' (tools/docs, tools/release), and, when they are not cached, the lab's
# parts' (lab/parts/build.sh --fetch).
# lab/test.sh and CI run it at their start, so that a registry that is slow once costs a
# minute there, and one that is down fails the run in its first minutes, not after an
# hour of tests. A second run finds everything in the module cache and fetches nothing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. lab/retry.sh
for module in . tools/docs tools/release; do
  (cd "$module" && retry go mod download) || {
    echo "fetch-modules: the modules of $module could not be fetched (the Go module proxy: $(go env GOPROXY))" >&2
    exit 1
  }
done
bash lab/parts/build.sh --cached >/dev/null || bash lab/parts/build.sh --fetch || {
  echo "fetch-modules: the modules of lab/parts could not be fetched (the Go module proxy: $(go env GOPROXY))" >&2
  exit 1
}
