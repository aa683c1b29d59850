#!/usr/bin/env bash
# Fleet benchmark: one group of N throwaway lab nodes deployed over SSH, for N = 1, 4, 8
# and 16 (or the N given as arguments). Per N it prints seconds of:
#   fresh      `apply` of modules/tf from an empty state (closures new to the nodes)
#   plan       an unchanged `plan` of that state (nothing to do)
#   changed    `apply` after the closure of every node changed (a new build seed)
#   hand       `apply` of a hand-written graph of N fediversity_node_switch blocks,
#              from an empty state, with closures new to the nodes (the module's baseline)
#   cli        `fediversity deploy` of the same group (closures new to the nodes)
#   cli_4w     the same again with closures new to the nodes, staged in 4 waves
#              (`--wave-size 25%`): what waves cost against one wave of every node
#   rss_mb     peak RSS (VmHWM) of the provider and of the CLI over all runs of this N
#   bare       a deploy by hand with no safety net, to all N nodes at once: per node
#              `nix copy --to ssh://` of a closure new to it, then one ssh running
#              switch-to-configuration switch and systemctl show (as lab/bench-apply.sh's
#              hand-run deploy), no settle, no watch, the closure's build included (as
#              the fresh apply's): what the lab itself needs for N switches
#   cpu_s      busy CPU seconds of the whole machine (every core, /proc/stat) during the
#              fresh apply; floor_s = cpu_s / cores, the least time that work takes here;
#              and after the row, that CPU beside the bare deploy's, each with the part
#              the nodes' containers used (cpuacct): on this lab the nodes share the cores
# and the ratios of fresh, changed, cli and bare to the 1-node figures and to the module.
# Per N it also prints the fresh apply against its floor, fresh / (bare + settle + watch):
# what the group costs beyond the lab's own N switches at once and the verdict's
# deliberate waiting (target <= 1.25), and the fresh apply's trace: each node's phases
# from the provider's log (TF_LOG_PROVIDER=INFO, its "deploy finished" lines), phase by
# phase, as the median over the nodes with the fastest and the slowest, and node by node;
# and the same of the command's deploy (cli), from its --output json.
# Every deploy settles SETTLE s and watches WATCH s (the verdict's deliberate waiting),
# the same for every N. Terraform runs with -parallelism=max(10, N).
# Timings are measurements, not assertions: the machine is shared and noisy.
#
#   LAB_PREFIX=me LAB_PORT_BASE=3100 LAB_STATE=/var/lib/fediversity-lab-me bash lab/bench-fleet.sh
#   bash lab/bench-fleet.sh 1 4 8            # only these group sizes
#   TF=$(bash lab/build-tofu.sh) bash lab/bench-fleet.sh
#
# Nodes are <LAB_PREFIX>-b-<i>, their SSH proxies on 127.0.0.1:$((LAB_PORT_BASE+50+i));
# they are deleted at the end (BENCH_KEEP=1 keeps them and the work directory).
# Many nodes need a higher fs.inotify.max_user_instances (each systemd boot takes about
# 12); the script raises it when it is lower than 64 per node plus 256.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# This machine reaches no binary cache: tell nix not to ask one, as the other benchmarks
# do (without it every build waited about 4.5 s on a cache it cannot reach, which hid
# the deploy's own time behind the wait, in every group size alike).
export NIX_CONFIG="substituters =
sandbox = false${NIX_CONFIG:+$'\n'$NIX_CONFIG}"
root=$PWD
sizes=${*:-1 4 8 16}
TF=${TF:-/usr/local/bin/terraform}
prefix=${LAB_PREFIX:-fedi}
port_base=${LAB_PORT_BASE:-2200}
state=${LAB_STATE:-/var/lib/fediversity-lab}
SETTLE=${BENCH_SETTLE:-2}
WATCH=${BENCH_WATCH:-4}
max=0
for n in $sizes; do [ "$n" -gt "$max" ] && max=$n; done

[ -f "$state/nodes.json" ] || LAB_PREFIX=$prefix LAB_PORT_BASE=$port_base LAB_STATE=$state bash lab/lab.sh up >/dev/null
# shellcheck source=lab/bench-nodes.sh
. lab/bench-nodes.sh
bench_raise_limits "$max"
export PATH=/usr/local/go/bin:$PATH
# Built as the release builds it (.goreleaser.yml: no cgo, no symbol tables), so the
# figures are those of the binary operators install: 6 MB less resident at start.
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$root/bin/terraform-provider-fediversity" .
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$root/bin/fediversity" ./cmd/fediversity

work=$(mktemp -d /tmp/fediversity-bench-fleet.XXXXXX)
cleanup() {
  [ -n "${sampler_p:-}" ] && kill "$sampler_p" 2>/dev/null || true
  [ -n "${sampler_c:-}" ] && kill "$sampler_c" 2>/dev/null || true
  bench_discard "$prefix-b" "$max"
}
trap cleanup EXIT

echo "launching $max nodes ($prefix-b-1 … $prefix-b-$max)" >&2
bench_launch "$prefix-b" 50 "$max"
bench_wait_quiet
declare -A cpu_files
for i in $(seq 1 "$max"); do cpu_files[$i]=$(bench_cpu_file "$prefix-b-$i"); done

# Peak RSS (VmHWM, kB) of the provider and of the CLI, per N (reset by writing 0).
peak_p=$work/peak_provider peak_c=$work/peak_cli
sampler_p=$(bench_peak_rss "$peak_p" "$root/bin/terraform-provider-fediversity")
sampler_c=$(bench_peak_rss "$peak_c" "$root/bin/fediversity deploy")

bench_tfrc
closures=$root/lab/closures/default.nix
stamp=$(date +%s)

# The group of the first N nodes: baked configuration, submission, roster (module and CLI).
group() { bench_group "$1" "$2" "$prefix-b" 50; }
module_config() { bench_module_config "$@"; }

hand_config() { # dir N seed
  local i
  {
    cat <<TF
terraform {
  required_providers {
    fediversity = { source = "fediversity/fediversity" }
  }
}
provider "fediversity" {}
data "fediversity_submission" "g" {
  submission_file = "\${path.root}/submission.json"
  baked_json      = file("\${path.root}/baked.json")
  method          = "tf"
}
TF
    for i in $(seq 1 "$2"); do
      cat <<TF
resource "fediversity_node_switch" "n$i" {
  node              = "$prefix-b-$i"
  node_plan         = data.fediversity_submission.g.node_plans["$prefix-b-$i"]
  submission_digest = data.fediversity_submission.g.digest
  submission_file   = "\${path.root}/submission.json"
  build {
    file      = "$closures"
    attribute = "good"
    args      = { seed = "$3" }
  }
  ssh {
    host             = "127.0.0.1"
    port             = $((port_base + 50 + i))
    known_hosts_file = "$work/known_hosts"
  }
  timings {
    settle          = "${SETTLE}s"
    watch           = "${WATCH}s"
    sample_interval = "1s"
  }
}
TF
    done
  } >"$1/main.tf"
}

now() { date +%s.%N; }
cores=$(nproc)
key=$state/id_ed25519
# bare N SEED: seconds of a hand-run deploy (no lock, no revert, no watch) of one closure
# new to the nodes, to the first N nodes at once, its build included: nixos-rebuild
# builds before it copies, and the fresh apply whose floor this is builds its new
# closure too (its "build" phase).
bare() {
  local n=$1 top t0 t1 i pids=() failed=0
  t0=$(now)
  top=$(bench_build "$closures" good "$2") || { echo "FAILED: nix-build of the bare closure" >&2; exit 1; }
  for i in $(seq 1 "$n"); do
    bench_hand_ssh "-p $((port_base + 50 + i)) -i $key -o UserKnownHostsFile=$work/known_hosts -o StrictHostKeyChecking=yes -o BatchMode=yes" "$top" \
      >"$work/bare-$n-$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || failed=1; done
  t1=$(now)
  [ "$failed" = 0 ] || { echo "FAILED: a bare deploy (see $work/bare-$n-*.log)" >&2; exit 1; }
  printf '%.1f' "$(secs "$t0" "$t1")"
}
secs() { echo "$2 - $1" | bc; }
# timed LOG CMD…: runs CMD in the background of nothing, prints its seconds; fails loudly.
timed() {
  local log=$1 t0 t1
  shift
  t0=$(now)
  if ! "$@" >"$log" 2>&1; then
    echo "FAILED: $* (see $log)" >&2
    tail -30 "$log" >&2
    exit 1
  fi
  t1=$(now)
  printf '%.1f' "$(secs "$t0" "$t1")"
}
tf() { # dir args…
  local dir=$1
  shift
  "$TF" -chdir="$dir" "$@"
}

printf '%-4s %8s %8s %8s %8s %8s %8s %10s %10s %8s %8s %8s\n' N fresh plan changed hand cli cli_4w rss_prov_mb rss_cli_mb bare cpu_s floor_s
declare -A fresh changed bared
for n in $sizes; do
  echo 0 >"$peak_p"
  echo 0 >"$peak_c"
  par=$((n > 10 ? n : 10))
  d=$work/n$n
  group "$d/module" "$n"
  group "$d/hand" "$n"
  group "$d/cli" "$n"
  module_config "$d/module" "m$n-$stamp"
  # Only the module: the provider comes from dev_overrides (init would ask the registry).
  tf "$d/module" get >"$d/module/get.log" 2>&1 || { echo "terraform get failed in $d/module" >&2; exit 1; }
  cpu_mark "$n"
  export TF_LOG_PROVIDER=INFO TF_LOG_PATH=$d/module/fresh.tflog
  fresh[$n]=$(timed "$d/module/fresh.log" tf "$d/module" apply -input=false -auto-approve -parallelism=$par)
  unset TF_LOG_PROVIDER TF_LOG_PATH
  read -r cpu cpu_nodes < <(cpu_since "$n")
  floor=$(echo "scale=1; $cpu / $cores" | bc)
  plan=$(timed "$d/module/plan.log" tf "$d/module" plan -input=false -detailed-exitcode -parallelism=$par)
  module_config "$d/module" "m$n-$stamp-changed"
  changed[$n]=$(timed "$d/module/changed.log" tf "$d/module" apply -input=false -auto-approve -parallelism=$par)

  hand_config "$d/hand" "$n" "h$n-$stamp"
  hand=$(timed "$d/hand/fresh.log" tf "$d/hand" apply -input=false -auto-approve -parallelism=$par)

  # The CLI on the same group, with closures new to the nodes.
  jq --arg f "$closures" --arg s "c$n-$stamp" '.build = {file: $f, attribute: "good", args: {seed: $s}}' \
    "$d/cli/roster.json" >"$d/cli/roster2.json"
  cli=$(timed "$d/cli/deploy.log" sh -c '"$0" "$@" >"'"$d/cli/deploy.json"'"' "$root/bin/fediversity" deploy --roster "$d/cli/roster2.json" \
    --submission "$d/cli/submission.json" --baked "$d/cli/baked.json" --method tf --parallel "$par" --output json)
  # Again, with closures new to the nodes, in 4 waves (a staged run deploys a node again
  # only when its system changed, so a new seed).
  jq --arg f "$closures" --arg s "w$n-$stamp" '.build = {file: $f, attribute: "good", args: {seed: $s}}' \
    "$d/cli/roster.json" >"$d/cli/roster3.json"
  waves=$(timed "$d/cli/waves.log" "$root/bin/fediversity" deploy --roster "$d/cli/roster3.json" \
    --submission "$d/cli/submission.json" --baked "$d/cli/baked.json" --method tf --parallel "$par" --wave-size 25%)

  cpu_mark "$n"
  bared[$n]=$(bare "$n" "b$n-$stamp")
  read -r bare_cpu bare_cpu_nodes < <(cpu_since "$n")

  tf "$d/module" destroy -input=false -auto-approve >/dev/null 2>&1 || true
  tf "$d/hand" destroy -input=false -auto-approve >/dev/null 2>&1 || true
  printf '%-4s %8s %8s %8s %8s %8s %8s %10s %10s %8s %8s %8s\n' "$n" "${fresh[$n]}" "$plan" "${changed[$n]}" "$hand" "$cli" "$waves" \
    "$(($(cat "$peak_p") / 1024))" "$(($(cat "$peak_c") / 1024))" "${bared[$n]}" "$cpu" "$floor"
  echo "N=$n module/hand $(echo "scale=2; ${fresh[$n]} / $hand" | bc)  cli/module $(echo "scale=2; $cli / ${fresh[$n]}" | bc)  cli 4 waves/one wave $(echo "scale=2; $waves / $cli" | bc)"
  echo "N=$n fresh/floor $(echo "scale=2; ${fresh[$n]} / (${bared[$n]} + $SETTLE + $WATCH)" | bc)  (floor: bare ${bared[$n]} s + settle ${SETTLE} s + watch ${WATCH} s; target <= 1.25)"
  echo "N=$n cpu, core-s: fresh apply $cpu (the nodes' containers $cpu_nodes), bare $bare_cpu (the nodes' $bare_cpu_nodes)"
  echo "N=$n fresh apply's trace, each node's phases from the provider's log:"
  bench_provider_phases "$d/module/fresh.tflog" | sort -V | bench_phase_table
  echo "N=$n the command's deploy (cli), each node's phases from its --output json:"
  jq -r '.nodes[] | .node + " " + ([.phases[]? | .name + "=" + (.seconds | tostring) + "s"] | join(" "))' "$d/cli/deploy.json" |
    sort -V | bench_phase_table
done
first=$(echo "$sizes" | awk '{print $1}')
for n in $sizes; do
  echo "N=$n fresh/fresh(N=$first) $(echo "scale=2; ${fresh[$n]} / ${fresh[$first]}" | bc)  changed/changed(N=$first) $(echo "scale=2; ${changed[$n]} / ${changed[$first]}" | bc)  bare/bare(N=$first) $(echo "scale=2; ${bared[$n]} / ${bared[$first]}" | bc)  bare(N)/fresh(N=$first) $(echo "scale=2; ${bared[$n]} / ${fresh[$first]}" | bc)"
done
