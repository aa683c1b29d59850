#!/usr/bin/env bash
# Transport-level benchmark of the SSH transport against the hand-run way, on a fresh
# throwaway lab node (needs `bash lab/lab.sh up`). Prints, per phase, seconds and bytes
# on the wire (a counting loopback proxy in front of the node's SSH port), totals for a
# first apply and an unchanged re-apply, the first copy's throughput in MB/s against
# `nix copy --to ssh://` over the same proxy, and peak RSS. Nothing is asserted about speed.
#   BENCH_PAYLOAD_KIB=16384 bash lab/bench-ssh.sh    # the default closure, 16 MiB of payload
#   BENCH_PAYLOAD_KIB=524288 bash lab/bench-ssh.sh   # a 512 MiB closure
set -euo pipefail
cd "$(dirname "$0")/.."
export FEDIVERSITY_LAB=1 FEDIVERSITY_BENCH=1
go test -count=1 -timeout 30m -run '^TestBenchSSHTransport$' -v ./internal/transport/ssh |
	sed -n '/SSH transport benchmark/,/peak RSS/p; /^--- /p; /^\(ok\|FAIL\)/p'
