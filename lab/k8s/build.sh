#!/usr/bin/env bash
# The real Kubernetes control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd), the kubelet of the lab's real node (see node-up.sh) and kwok:
# built, with the lab's other parts, from one Go module (lab/parts/build.sh, which says
# why), into a cache outside the clone keyed on their versions.
#
# Idempotent: when every binary is cached it prints the paths and does nothing.
# Output (stdout): one line per binary, "name=/abs/path".
# --cached: say whether they are built (exit 0, their paths) or not (exit 1), build nothing.
set -euo pipefail
bash "$(dirname "${BASH_SOURCE[0]}")/../parts/build.sh" "$@" |
  grep -E '^(kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|etcd|kwok)='
