#!/usr/bin/env bash
# The Incus copy, round after round, on the real incusd: each round opens a transport
# (its exec session), takes the snapshot's read beside the push (a recorded exec) and
# streams a closure the node has just forgotten (a streamed exec: four websocket
# handshakes, each a new connection to incusd). Prints the median and the worst round
# and fails (exit 1) when the worst is over 3x the median: a copy that stalled behind
# incusd's accept loop (internal/incusapi/lazyconn.go) took 30 s where the median is
# under 2 s.
#
#   bash lab/bench-incus-exec.sh          # 100 rounds
#   ROUNDS=300 bash lab/bench-incus-exec.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export NIX_CONFIG="substituters =${NIX_CONFIG:+$'\n'$NIX_CONFIG}"
ROUNDS=${ROUNDS:-100}
[ -f "${LAB_STATE:-/var/lib/fediversity-lab}/nodes.json" ] || bash lab/lab.sh up >/dev/null
out=$(FEDIVERSITY_LAB=1 go test ./internal/transport/incus -run '^$' -bench 'LabCopyRounds$' -benchtime "${ROUNDS}x" -timeout 0 2>&1) || {
  echo "$out"
  exit 1
}
echo "$out" | grep -E 'round [0-9]+:|^Benchmark' || true
line=$(echo "$out" | grep '^BenchmarkLabCopyRounds')
metric() { awk -v m="$1" '{for (i = 1; i < NF; i++) if ($(i + 1) == m) print $i}' <<<"$line"; }
median=$(metric median-ms) worst=$(metric worst-ms) ratio=$(metric worst/median)
printf 'incus copy, %d rounds, load average %s: median %s ms, worst %s ms (%.2fx the median)\n' \
  "$ROUNDS" "$(cut -d' ' -f1-3 /proc/loadavg)" "$median" "$worst" "$ratio"
if [ "$(echo "$ratio > 3" | bc -l)" = 1 ]; then
  echo "FAIL: the worst round is over 3x the median (a stalled copy)"
  exit 1
fi
