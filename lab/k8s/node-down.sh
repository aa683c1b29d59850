#!/usr/bin/env bash
# Stop the lab's real node (node-up.sh): the kubelet, the containers, containerd. Each
# process is stopped by its saved PID, after checking what that PID runs. The Node
# object is deleted so the scheduler does not wait on a node that is gone.
set -uo pipefail
STATE="${FEDIVERSITY_K8S_NODE_STATE:-/var/lib/fediversity-k8s-node}"
CP_STATE="${FEDIVERSITY_K8S_STATE:-/var/lib/fediversity-k8s}"
NODE="${FEDIVERSITY_K8S_NODE_NAME:-fediversity-real-0}"
PIDS="$STATE/pids"

stop() { # name
  local f="$PIDS/$1.pid" pid exe
  [[ -f $f ]] || return 0
  pid=$(cat "$f"); exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
  if [[ -n $exe && $(basename "${exe% (deleted)}") == "$1" ]]; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$f"
}

stop kube-scheduler
stop kubelet
# The pods' containers run under shims that outlive containerd: remove them through it.
if [[ -S $STATE/run/containerd/containerd.sock && -x $STATE/bin/ctr ]]; then
  ctr() { "$STATE/bin/ctr" --address "$STATE/run/containerd/containerd.sock" -n k8s.io "$@"; }
  for t in $(ctr tasks ls -q 2>/dev/null); do ctr tasks kill -s KILL "$t" >/dev/null 2>&1; done
  sleep 1
  for t in $(ctr tasks ls -q 2>/dev/null); do ctr tasks delete -f "$t" >/dev/null 2>&1; done
  for c in $(ctr containers ls -q 2>/dev/null); do ctr containers delete "$c" >/dev/null 2>&1; done
fi
stop containerd
# Shims left without tasks: only those of this node's containerd (by their -address).
for d in /proc/[0-9]*; do
  exe=$(readlink "$d/exe" 2>/dev/null) || continue
  [[ $(basename "${exe% (deleted)}") == containerd-shim-runc-v2 ]] || continue
  tr '\0' ' ' < "$d/cmdline" 2>/dev/null | grep -- "-address $STATE/run/containerd/containerd.sock" >/dev/null && kill "${d#/proc/}" 2>/dev/null
done
# Mounts the kubelet and containerd left (volumes, sandboxes' shm, snapshots).
grep -o " $STATE/[^ ]*" /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
PKI="$CP_STATE/pki"
if [[ -f $PKI/admin.crt ]]; then
  curl -sS -o /dev/null --max-time 10 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    -X DELETE "https://127.0.0.1:16443/api/v1/nodes/$NODE" 2>/dev/null
fi
exit 0
