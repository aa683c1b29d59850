#!/usr/bin/env bash
# What the NixOS contract and the safety net's round trips cost one node at least: the
# floor under the provider's own share of a deploy (lab/bench-apply.sh's "our share").
# On one throwaway lab node, idle, with a lab closure deployed by hand once, it prints:
#   test, boot, switch   `switch-to-configuration <action>` of that system, each run
#                        BENCH_ROUNDS times (default 5) under `systemd-run --wait`, as the
#                        deploy and nixos-rebuild run it: the median wall time and the
#                        node's CPU (its container's every process)
#   second run           test + boot - switch: what judging the system before its boot
#                        entry costs over one `switch` (the hand-run's); the boot loader's
#                        install is in both, so this is the second run's own start, checks,
#                        lock and sync, and one more systemd-run
#   round trip           one more command over the deploy's open SSH connection (`true`,
#                        BENCH_ROUNDS * 10 of them): wall time, and the node's CPU
#   floor                the second run plus the round trips the safety net needs beyond
#                        the hand-run's: taking the lock, reading the node after the
#                        switch, the watch's last sample past its window, the boot entry's
#                        own round trip, releasing the lock (5; the confirming login runs
#                        beside the settle window and adds no time)
# A measurement, not an assertion: the machine is shared and noisy.
#
#   bash lab/bench-contract.sh
#   BENCH_ROUNDS=9 bash lab/bench-contract.sh
#
# The node is <LAB_PREFIX>-ct-1, its SSH proxy on 127.0.0.1:$((LAB_PORT_BASE+140+1));
# deleted at the end (BENCH_KEEP=1 keeps it and the work directory).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export NIX_CONFIG="substituters =
sandbox = false${NIX_CONFIG:+$'\n'$NIX_CONFIG}"
root=$PWD
prefix=${LAB_PREFIX:-fedi}
port_base=${LAB_PORT_BASE:-2200}
state=${LAB_STATE:-/var/lib/fediversity-lab}
rounds=${BENCH_ROUNDS:-5}
[ -f "$state/nodes.json" ] || LAB_PREFIX=$prefix LAB_PORT_BASE=$port_base LAB_STATE=$state bash lab/lab.sh up >/dev/null
# shellcheck source=lab/bench-nodes.sh
. lab/bench-nodes.sh
work=$(mktemp -d /tmp/fediversity-bench-contract.XXXXXX)
trap 'bench_discard "$prefix-ct" 1' EXIT

node=$prefix-ct-1
port=$((port_base + 141))
bench_launch "$prefix-ct" 140 1
sshopts="-p $port -i $state/id_ed25519 -o UserKnownHostsFile=$work/known_hosts -o StrictHostKeyChecking=yes -o BatchMode=yes"
top=$(bench_build lab/closures good "contract-$(date +%s)")
bench_hand_ssh "$sshopts" "$top" >"$work/hand.log" 2>&1
bench_wait_quiet
cpu_file=$(bench_cpu_file "$node")

# timed CMD…: "<wall ms> <node CPU ms>" of one run of CMD
timed() {
  local t0 c0 t1 c1
  c0=$(bench_cpu_ns "$cpu_file"); t0=$(date +%s%N)
  "$@" >/dev/null 2>&1
  t1=$(date +%s%N); c1=$(bench_cpu_ns "$cpu_file")
  echo "$(((t1 - t0) / 1000000)) $(((c1 - c0) / 1000000))"
}
run_action() { incus exec "$node" -- systemd-run --quiet --wait --collect --pipe --service-type=exec "$top/bin/switch-to-configuration" "$1"; }

: >"$work/actions"
for r in $(seq 1 "$rounds"); do
  for a in test boot switch; do
    echo "$a $(timed run_action "$a")" >>"$work/actions"
    sleep 1
  done
done
declare -A wall cpu
for a in test boot switch; do
  wall[$a]=$(awk -v a="$a" '$1 == a { print $2 }' "$work/actions" | bench_median)
  cpu[$a]=$(awk -v a="$a" '$1 == a { print $3 }' "$work/actions" | bench_median)
done

# Round trips over one open connection, as the deploy sends its commands.
ctl="-o ControlMaster=auto -o ControlPath=$work/cm-%p -o ControlPersist=60"
# shellcheck disable=SC2086
ssh $sshopts $ctl root@127.0.0.1 true
n=$((rounds * 10))
trips() {
  local i
  # shellcheck disable=SC2086
  for i in $(seq 1 "$n"); do ssh $sshopts $ctl root@127.0.0.1 true; done
}
read -r trip_wall trip_cpu < <(timed trips)
# shellcheck disable=SC2086
ssh $sshopts $ctl -O exit root@127.0.0.1 2>/dev/null || true

printf '=== the contract on one idle lab node (%s), %d rounds, medians\n' "$node" "$rounds"
for a in test boot switch; do
  printf '  %-12s %6d ms wall %6d ms of the node'"'"'s CPU\n' "$a" "${wall[$a]}" "${cpu[$a]}"
done
second_wall=$(echo "${wall[test]} + ${wall[boot]} - ${wall[switch]}" | bc)
second_cpu=$(echo "${cpu[test]} + ${cpu[boot]} - ${cpu[switch]}" | bc)
printf '  %-12s %6d ms wall %6d ms of the node'"'"'s CPU (test + boot - switch)\n' "second run" "$second_wall" "$second_cpu"
trip_wall=$(echo "scale=1; $trip_wall / $n" | bc)
trip_cpu=$(echo "scale=1; $trip_cpu / $n" | bc)
printf '  %-12s %6s ms wall %6s ms of the node'"'"'s CPU (mean of %d)\n' "round trip" "$trip_wall" "$trip_cpu" "$n"
printf '  %-12s %6s ms wall: the second run + 5 round trips\n' "floor" "$(echo "$second_wall + 5 * $trip_wall" | bc)"
