#!/usr/bin/env bash
# Stop the lab control plane started by up.sh, by its saved PIDs only, after checking
# that each PID still runs the binary it was saved for (/proc/<pid>/exe).
set -euo pipefail
STATE="${FEDIVERSITY_K8S_STATE:-/var/lib/fediversity-k8s}"
PIDS="$STATE/pids"
[[ -d $PIDS ]] || exit 0
# Reverse start order: the clients first, etcd last.
for c in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
  f="$PIDS/$c.pid"
  [[ -f $f ]] || continue
  pid=$(cat "$f")
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
  if [[ -n $exe && $(basename "${exe% (deleted)}") == "$c" ]]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    echo "down.sh: stopped $c ($pid)" >&2
  fi
  rm -f "$f"
done
