#!/usr/bin/env bash
# Trace of one fresh apply of modules/tf to a group of N throwaway lab nodes over SSH
# (default 16; as lab/bench-fleet.sh deploys them: settle 2 s, watch 4 s): where the
# group's CPU goes, since on this lab the nodes share the deployer's cores and a group's
# apply is bound by the CPU of everything it makes run. `perf record -a --all-cgroups`
# samples every core during the apply; it prints, in core-seconds:
#   - the machine's, split by cgroup: the deployer's host (OpenTofu, the provider, nix,
#     incusd's SSH proxy devices) by command, and on the nodes each systemd unit kind:
#     ssh.service (everything the deploy's sessions run, by command), the detached
#     switches (fediversity-switch-*: switch-to-configuration test, then boot), the
#     lock-out reverts (fediversity-revert-*), systemd itself (init.scope), the rest;
#   - the provider's own CPU by the Go function it was in, with what they called (the
#     binary is built with its symbol table for this; the release strips it);
# then each node's phases from the provider's log, as lab/bench-fleet.sh prints them.
# A measurement, not an assertion: the machine is shared and noisy.
#
#   bash lab/bench-trace.sh            # 16 nodes
#   N=4 bash lab/bench-trace.sh
#   TF=$(bash lab/build-tofu.sh) bash lab/bench-trace.sh
#
# Nodes are <LAB_PREFIX>-tr-<i>, their SSH proxies on 127.0.0.1:$((LAB_PORT_BASE+120+i));
# deleted at the end (BENCH_KEEP=1 keeps them and the work directory with perf.data).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export NIX_CONFIG="substituters =
sandbox = false${NIX_CONFIG:+$'\n'$NIX_CONFIG}"
root=$PWD
n=${N:-16}
TF=${TF:-/usr/local/bin/terraform}
prefix=${LAB_PREFIX:-fedi}
port_base=${LAB_PORT_BASE:-2200}
state=${LAB_STATE:-/var/lib/fediversity-lab}
SETTLE=${BENCH_SETTLE:-2}
WATCH=${BENCH_WATCH:-4}
command -v perf >/dev/null || { echo "bench-trace: perf is needed (Debian: linux-perf)" >&2; exit 1; }
[ -f "$state/nodes.json" ] || LAB_PREFIX=$prefix LAB_PORT_BASE=$port_base LAB_STATE=$state bash lab/lab.sh up >/dev/null
# shellcheck source=lab/bench-nodes.sh
. lab/bench-nodes.sh
bench_raise_limits "$n"
export PATH=/usr/local/go/bin:$PATH
work=$(mktemp -d /tmp/fediversity-bench-trace.XXXXXX)
trap 'bench_discard "$prefix-tr" "$n"' EXIT
# As the release builds it, but with its symbol table, so that perf names Go functions.
mkdir -p "$work/bin"
CGO_ENABLED=0 go build -trimpath -o "$work/bin/terraform-provider-fediversity" .

echo "launching $n nodes ($prefix-tr-1 … $prefix-tr-$n)" >&2
bench_launch "$prefix-tr" 120 "$n"
bench_wait_quiet
root=$work bench_tfrc
d=$work/group
bench_group "$d" "$n" "$prefix-tr" 120
bench_module_config "$d" "tr$n-$(date +%s)"
"$TF" -chdir="$d" get >"$d/get.log" 2>&1 || { echo "terraform get failed in $d" >&2; exit 1; }

export TF_LOG_PROVIDER=INFO TF_LOG_PATH=$d/apply.tflog
t0=$(date +%s.%N)
perf record -q -a -g --all-cgroups -F 199 -o "$work/perf.data" -- \
  "$TF" -chdir="$d" apply -input=false -auto-approve -parallelism="$((n > 10 ? n : 10))" >"$d/apply.log" 2>&1 ||
  { echo "FAILED: the apply (see $d/apply.log)" >&2; tail -30 "$d/apply.log" >&2; exit 1; }
t1=$(date +%s.%N)
unset TF_LOG_PROVIDER TF_LOG_PATH

# Samples by cgroup and command: "<samples> <cgroup> <command>"; a sample is 1/199 s of
# one core.
perf report -i "$work/perf.data" --no-children --sort cgroup,comm --stdio -g none -F overhead,sample,cgroup,comm 2>/dev/null |
  awk '!/^#/ && NF >= 4 && $4 != "swapper" { print $2, $3, $4 }' >"$work/samples" # swapper: an idle core
total=$(awk '{ s += $1 } END { print s }' "$work/samples")
printf 'N=%d fresh apply %.1f s; the machine busy %.1f core-s (perf samples of every core, 199 Hz, idle left out)\n' "$n" \
  "$(echo "$t1 - $t0" | bc)" "$(echo "$total / 199" | bc -l)"
awk -v hz=199 -v n="$n" '
  {
    g = $2; c = $3
    if (g == "/") { w = "host" }
    else {
      sub(/^\/lxc\.payload\.[^\/]*/, "", g)
      w = g ~ /ssh\.service$/ ? "nodes ssh.service" : g ~ /fediversity-switch-/ ? "nodes switch units" : \
          g ~ /fediversity-revert-/ ? "nodes revert units" : g ~ /init\.scope$/ ? "nodes systemd" : "nodes other"
    }
    where[w] += $1; by[w, c] += $1; total += $1
  }
  END {
    split("host|nodes ssh.service|nodes switch units|nodes revert units|nodes systemd|nodes other", order, "|")
    for (i = 1; i <= 6; i++) {
      w = order[i]
      printf "  %-20s %7.1f core-s (%4.1f %%; %5.2f a node)\n", w, where[w] / hz, 100 * where[w] / total, where[w] / hz / n
      if (w != "host" && w != "nodes ssh.service") continue
      m = 0
      for (k in by) { split(k, p, SUBSEP); if (p[1] == w) { cs[++m] = by[k]; cn[m] = p[2] } }
      for (a = 2; a <= m; a++) { x = cs[a]; y = cn[a]; for (b = a - 1; b >= 1 && cs[b] < x; b--) { cs[b + 1] = cs[b]; cn[b + 1] = cn[b] } cs[b + 1] = x; cn[b + 1] = y }
      line = "      "
      for (a = 1; a <= m && a <= 10; a++) line = line sprintf("%s %.1f  ", cn[a], cs[a] / hz)
      print line
    }
  }' "$work/samples"

echo "  the provider's CPU by Go function (self, then with what it called), top 12:"
perf report -i "$work/perf.data" --comm terraform-provi --children --percentage relative --sort sym --stdio -g none 2>/dev/null |
  awk '!/^#/ && / \[\.\] / && ++k <= 12 { sub(/^ +/, ""); print "      " $0 }' # no head: it would cut perf off (pipefail)

echo "N=$n the apply's trace, each node's phases from the provider's log:"
bench_provider_phases "$d/apply.tflog" | sort -V | bench_phase_table
