#!/usr/bin/env bash
# Remove the lab's spire node (<prefix>-spire) and its state file. The cached build stays.
set -euo pipefail
LAB_PREFIX=${LAB_PREFIX:-fedi}
STATE=${LAB_STATE:-/var/lib/fediversity-lab}
incus delete --force "$LAB_PREFIX-spire" >/dev/null 2>&1 || true
rm -f "$STATE/spire.json" "$STATE/spire_known_hosts"
