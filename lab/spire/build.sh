#!/usr/bin/env bash
# SPIRE (spire-server, spire-agent): built, with the lab's other parts, from one Go
# module (lab/parts/build.sh, which says why and with which flags: cgo on, for the sqlite
# datastore), into a cache outside the clone keyed on the version.
#
# Idempotent: with both binaries cached it prints their paths and does nothing.
# Output (stdout): "spire-server=/abs/path" and "spire-agent=/abs/path".
# --cached: say whether they are built (exit 0, their paths) or not (exit 1), build nothing.
set -euo pipefail
bash "$(dirname "${BASH_SOURCE[0]}")/../parts/build.sh" "$@" | grep -E '^(spire-server|spire-agent)='
