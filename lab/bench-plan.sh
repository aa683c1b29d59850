#!/usr/bin/env bash
# Plan-time benchmark of fediversity_node_switch: what evaluating each node's `build`
# block at plan time costs. On BENCH_NODES (default 8) throwaway lab nodes
# (<LAB_PREFIX>-t-bench-plan-<i>, Incus transport), each with its own derivation, it
# times an unchanged `plan` (BENCH_ROUNDS rounds, default 5, medians printed):
#   base   the nodes given as prebuilt `toplevel`s: a plan that evaluates nothing, as
#          every plan did before plan-time evaluation
#   warm   the nodes given as `build` blocks, evaluation cache warm: no nix runs, each
#          node's source tree is hashed and its cache entry checked
#   cold   the same with the evaluation cache removed before each plan: nix-instantiate
#          runs for every node
#   fwarm  the nodes given as `build { flake = ... }` blocks (one flake, a node per
#          nixosConfigurations attribute, lab/closures as its path: input), cache warm:
#          one nix flake metadata per plan, no nix eval
#   fcold  the same with the evaluation cache removed: nix eval runs for every node
# and prints warm/base (target <= 1.10), fwarm/warm (target <= 1.10), the evaluation cost per node ((cold - warm) /
# nodes, i.e. with the plan's parallelism), and from the provider log the median time
# one nix-instantiate and one cache hit took. Last, every node is given the same fresh
# derivation and applied: the log shows how many builds ran (one per derivation in the
# provider process). Timings are measurements, not assertions:
# the machine is shared and noisy, so prefer the medians of many rounds.
#
# `fleet` measures instead the unchanged plan of modules/tf over SSH (as
# lab/bench-fleet.sh deploys it) at 1, 8 and 16 nodes (or the sizes given), on
# throwaway nodes <LAB_PREFIX>-pb-<i> (SSH proxies on 127.0.0.1:$((LAB_PORT_BASE+70+i))),
# Terraform with -parallelism=max(10, N). Per size, medians of BENCH_ROUNDS rounds:
#   plan       the unchanged plan
#   norefresh  the same with -refresh=false (no node is read): plan - norefresh is
#              what refreshing the nodes costs
#   default10  the plan with Terraform's default -parallelism (10), for N over 10: the
#              nodes are then read and planned ten at a time
#   read_ms    one node's refresh (Read) in the provider, median and slowest over the
#              nodes of logged plans (TF_LOG_PROVIDER=DEBUG, "node read")
#   dials      SSH connections one refresh made (each a TCP connect, a key exchange, a
#              host key check and a login), commands: sessions it ran on the node
#   eval_ms    one node's plan-time evaluation (a cache hit: the tree hash and lookup)
#   rss_mb     peak RSS (VmHWM) of the provider over the plans of that size
#   cpu        the CPU of one plan and of one with no refresh, in core-seconds: OpenTofu's
#              with the provider's, the nodes' containers' (cgroups), and the machine's
#              (/proc/stat): where a refresh's time goes on a machine whose cores the
#              nodes share
# and the load average before and after.
#
#   bash lab/bench-plan.sh
#   BENCH_NODES=4 BENCH_ROUNDS=3 bash lab/bench-plan.sh
#   TF=$(bash lab/build-tofu.sh) bash lab/bench-plan.sh
#   LAB_PREFIX=me LAB_PORT_BASE=3100 LAB_STATE=/var/lib/fediversity-lab-me bash lab/bench-plan.sh fleet
#   BENCH_ROUNDS=3 bash lab/bench-plan.sh fleet 1 16
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# This machine reaches no binary cache: tell nix not to ask one (each build otherwise
# spends seconds on a cache it cannot reach). The provider never changes nix settings.
export NIX_CONFIG="substituters =
sandbox = false${NIX_CONFIG:+$'\n'$NIX_CONFIG}"
root=$PWD
TF=${TF:-/usr/local/bin/terraform}
NODES=${BENCH_NODES:-8}
ROUNDS=${BENCH_ROUNDS:-5}
prefix=${LAB_PREFIX:-fedi}

[ -f "${LAB_STATE:-/var/lib/fediversity-lab}/nodes.json" ] || bash lab/lab.sh up >/dev/null
# Built as the release builds it (.goreleaser.yml: no cgo, no symbol tables), so the
# figures are those of the binary operators install: 6 MB less resident at start.
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$root/bin/terraform-provider-fediversity" .

now() { date +%s.%N; }
median() { sort -n | awk '{v[NR]=$1} END {print (NR == 0 ? "nan" : NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

if [ "${1:-}" = fleet ]; then
  shift
  sizes=${*:-1 8 16}
  port_base=${LAB_PORT_BASE:-2200}
  state=${LAB_STATE:-/var/lib/fediversity-lab}
  SETTLE=${BENCH_SETTLE:-1} WATCH=${BENCH_WATCH:-2}
  ROUNDS=${BENCH_ROUNDS:-5}
  max=0
  for n in $sizes; do [ "$n" -gt "$max" ] && max=$n; done
  # shellcheck source=lab/bench-nodes.sh
  . lab/bench-nodes.sh
  bench_raise_limits "$max"
  work=$(mktemp -d /tmp/fediversity-bench-plan-fleet.XXXXXX)
  cleanup() {
    [ -n "${sampler:-}" ] && kill "$sampler" 2>/dev/null || true
    bench_discard "$prefix-pb" "$max"
  }
  trap cleanup EXIT
  echo "launching $max nodes ($prefix-pb-1 … $prefix-pb-$max)" >&2
  bench_launch "$prefix-pb" 70 "$max"
  declare -A cpu_files
  for i in $(seq 1 "$max"); do cpu_files[$i]=$(bench_cpu_file "$prefix-pb-$i"); done
  bench_wait_quiet
  bench_tfrc
  export XDG_CACHE_HOME=$work/cache
  # Every size deploys the same systems (one seed): the nodes the sizes share run what
  # each size's state says, so every plan is unchanged.
  seed="plan-$(date +%s)"
  for n in $sizes; do
    d=$work/n$n
    bench_group "$d" "$n" "$prefix-pb" 70
    bench_module_config "$d" "$seed"
    "$TF" -chdir="$d" get >"$d/get.log" 2>&1 || { echo "terraform get failed in $d" >&2; exit 1; }
    "$TF" -chdir="$d" apply -input=false -auto-approve -parallelism=$((n > 10 ? n : 10)) >"$d/apply.log" 2>&1 ||
      { echo "apply of $n nodes failed:" >&2; tail -30 "$d/apply.log" >&2; exit 1; }
  done
  # plan N LOG [args…]: seconds of an unchanged plan; fails loudly on any change. Its
  # CPU goes to LOG.cpu: "<OpenTofu's with the provider's (bash's time: the processes it
  # waited for)> <the first N nodes' containers'> <the machine's>", core-s.
  plan() {
    local n=$1 log=$2 t0 t1 rc=0 tf_cpu machine nodes TIMEFORMAT='%U %S'
    shift 2
    cpu_mark "$n"
    t0=$(now)
    { time "$TF" -chdir="$work/n$n" plan -input=false -lock=false -detailed-exitcode -parallelism=$((n > 10 ? n : 10)) "$@" >"$log" 2>&1 || rc=$?; } 2>"$log.time"
    t1=$(now)
    read -r machine nodes < <(cpu_since "$n")
    tf_cpu=$(awk '{print $1 + $2}' "$log.time")
    echo "$tf_cpu $nodes $machine" >"$log.cpu"
    [ "$rc" = 0 ] || { echo "plan of $n nodes was not empty (exit $rc):" >&2; tail -30 "$log" >&2; exit 1; }
    echo "$t1 - $t0" | bc -l
  }
  field() { grep -o "\"$1\":[0-9.e+-]*\| $1=[0-9.e+-]*" | grep -o '[0-9.e+-]*$'; }
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  printf '\n=== unchanged plan of modules/tf over SSH (%s, medians of %d rounds)\n' "$("$TF" version | head -1)" "$ROUNDS"
  for n in $sizes; do
    d=$work/n$n
    peak=$work/peak-$n
    sampler=$(bench_peak_rss "$peak" "$root/bin/terraform-provider-fediversity")
    : >"$d/rows"
    for round in $(seq "$ROUNDS"); do
      p=$(plan "$n" "$d/plan-$round.out")
      nr=$(plan "$n" "$d/norefresh-$round.out" -refresh=false)
      p10=0
      [ "$n" -gt 10 ] && p10=$(plan "$n" "$d/default10-$round.out" -parallelism=10)
      TF_LOG_PROVIDER=DEBUG TF_LOG_PATH=$d/logged-$round.log plan "$n" "$d/logged-$round.out" >/dev/null
      echo "$p $nr $p10" >>"$d/rows"
    done
    kill "$sampler" 2>/dev/null || true
    sampler=
    reads=$(cat "$d"/logged-*.log | grep '"node read"\|node read:' || true)
    evals=$(cat "$d"/logged-*.log | grep 'node evaluated' || true)
    printf '%s\n' "$reads" >"$d/reads"
    [ "$n" -gt 10 ] && printf 'N=%-3s default10 %.2fs  (the plan with -parallelism=10)\n' "$n" "$(awk '{print $3}' "$d/rows" | median)"
    printf 'N=%-3s plan %.2fs  norefresh %.2fs  refresh %.2fs  read_ms %.1f (max %.1f)  dials %s  commands %s  eval_ms %.1f  rss_mb %d\n' "$n" \
      "$(awk '{print $1}' "$d/rows" | median)" "$(awk '{print $2}' "$d/rows" | median)" \
      "$(awk '{print $1 - $2}' "$d/rows" | median)" \
      "$(field ms <"$d/reads" | median)" "$(field ms <"$d/reads" | sort -n | tail -1 | grep . || echo nan)" \
      "$(field dials <"$d/reads" | median)" "$(field commands <"$d/reads" | median)" \
      "$(printf '%s\n' "$evals" | field seconds | awk '{print $1 * 1000}' | median)" "$(($(cat "$peak") / 1024))"
    cpu() { cat "$d"/"$1"-*.out.cpu | awk -v f="$2" '{print $f}' | median; }
    printf 'N=%-3s cpu core-s  plan: OpenTofu+provider %s  nodes %s  machine %s   norefresh: %s  %s  %s\n' "$n" \
      "$(cpu plan 1)" "$(cpu plan 2)" "$(cpu plan 3)" "$(cpu norefresh 1)" "$(cpu norefresh 2)" "$(cpu norefresh 3)"
  done
  printf 'load average before %s, after %s; every plan: -parallelism=max(10, N), read_ms and eval_ms from the logged plans\n' "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi

work=$(mktemp -d /tmp/fediversity-bench-plan.XXXXXX)
insts=()
for i in $(seq "$NODES"); do insts+=("$prefix-t-bench-plan-$i"); done
cleanup() {
  for inst in "${insts[@]}"; do incus delete --force "$inst" >/dev/null 2>&1 || true; done
  if [ -n "${BENCH_KEEP:-}" ]; then echo "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

for inst in "${insts[@]}"; do
  incus delete --force "$inst" >/dev/null 2>&1 || true
  incus launch "$(bash lab/lab.sh alias)" "$inst" >/dev/null 2>&1
done
for inst in "${insts[@]}"; do
  for _ in $(seq 60); do
    s=$(incus exec "$inst" -- systemctl is-system-running 2>/dev/null || true)
    [ "$s" = running ] || [ "$s" = degraded ] && break
    sleep 1
  done
done

cat >"$work/tfrc" <<RC
provider_installation {
  dev_overrides {
    "registry.terraform.io/fediversity/fediversity" = "$root/bin"
    "registry.opentofu.org/fediversity/fediversity" = "$root/bin"
  }
  direct {}
}
RC
export TF_CLI_CONFIG_FILE=$work/tfrc CHECKPOINT_DISABLE=1 XDG_CACHE_HOME=$work/cache
stamp=$(date +%s)
extra=()
getent group nixbld >/dev/null || extra=(--option build-users-group "")

# One configuration per variant; the nodes and their closures are the same in both.
header='terraform {
  required_providers {
    fediversity = { source = "fediversity/fediversity" }
  }
}
provider "fediversity" {}'
mkdir -p "$work/base" "$work/eval" "$work/flake" "$work/fleet/no-node-plan"
echo "$header" >"$work/base/main.tf"
echo "$header" >"$work/eval/main.tf"
echo "$header" >"$work/flake/main.tf"
# The flake's systems are the file form's (the same closure and seed, so the same
# derivations): the variants deploy the same toplevels to the same nodes.
echo null >"$work/fleet/no-node-plan/node-plan.json"
{
  echo '{'
  echo '  inputs.fediversity-node-plan = { url = "path:./no-node-plan"; flake = false; };'
  echo "  inputs.closures = { url = \"path:$root/lab/closures\"; flake = false; };"
  echo '  outputs = { self, fediversity-node-plan, closures }:'
  echo '    let node = seed: { config.system.build.toplevel = (import closures { inherit seed; system = "x86_64-linux"; }).good; };'
  echo '    in { nixosConfigurations = {'
  for i in $(seq "$NODES"); do echo "      n$i = node \"bench-plan-$stamp-$i\";"; done
  echo '    }; };'
  echo '}'
} >"$work/fleet/flake.nix"
for i in $(seq "$NODES"); do
  inst=${insts[$((i - 1))]}
  seed="bench-plan-$stamp-$i"
  top=$(nix-build --option sandbox false "${extra[@]}" lab/closures -A good --argstr seed "$seed" --no-out-link 2>/dev/null)
  common="  incus {
    instance = \"$inst\"
  }
  timings {
    settle          = \"1s\"
    watch           = \"2s\"
    sample_interval = \"1s\"
  }"
  add_node() { # variant, what builds the node
    printf 'resource "fediversity_node_switch" "n%s" {\n  node = "%s"\n%s\n%s\n}\n' "$i" "$inst" "$2" "$common" >>"$work/$1/main.tf"
  }
  add_node base "  toplevel = \"$top\""
  add_node eval "  node_plan = jsonencode({ node = \"$inst\" })
  build {
    file      = \"$root/lab/closures/default.nix\"
    attribute = \"good\"
    args      = { seed = \"$seed\" }
  }"
  add_node flake "  node_plan = jsonencode({ node = \"$inst\" })
  build {
    flake = \"path:$work/fleet#nixosConfigurations.n$i.config.system.build.toplevel\"
  }"
done

for v in eval base flake; do
  (cd "$work/$v" && "$TF" init -input=false >/dev/null 2>&1 || true)
  (cd "$work/$v" && "$TF" apply -auto-approve -input=false >"$work/$v.apply" 2>&1) ||
    { echo "apply ($v) failed:"; tail -30 "$work/$v.apply"; exit 1; }
done

plan() { # variant log
  local t0 t1 rc=0
  t0=$(now)
  (cd "$work/$1" && TF_LOG_PROVIDER=INFO TF_LOG_PATH=$2 "$TF" plan -detailed-exitcode -input=false -lock=false >"$2.out" 2>&1) || rc=$?
  t1=$(now)
  [ "$rc" = 0 ] || { echo "plan ($1) was not empty (exit $rc):" >&2; tail -30 "$2.out" >&2; exit 1; }
  echo "$t1 - $t0" | bc -l
}

printf '\n=== unchanged plan of %d nodes (%s, %d rounds)\n' "$NODES" "$("$TF" version | head -1)" "$ROUNDS"
printf '  %-5s %8s %8s %8s %8s %8s\n' round base warm cold fwarm fcold
: >"$work/rows"
for round in $(seq "$ROUNDS"); do
  base=$(plan base "$work/base-$round.log")
  warm=$(plan eval "$work/warm-$round.log")
  fwarm=$(plan flake "$work/fwarm-$round.log")
  rm -rf "$XDG_CACHE_HOME/fediversity/eval"
  cold=$(plan eval "$work/cold-$round.log")
  rm -rf "$XDG_CACHE_HOME/fediversity/eval"
  fcold=$(plan flake "$work/fcold-$round.log")
  plan eval "$work/refill-$round.log" >/dev/null # the next round's warm plan finds the file form's entries
  echo "$base $warm $cold $fwarm $fcold" >>"$work/rows"
  printf '  %-5s %7.2fs %7.2fs %7.2fs %7.2fs %7.2fs\n' "$round" "$base" "$warm" "$cold" "$fwarm" "$fcold"
done
col() { awk -v c="$1" '{print $c}' "$work/rows" | median; }
b=$(col 1) w=$(col 2) c=$(col 3) fw=$(col 4) fc=$(col 5)
printf '  %-5s %7.2fs %7.2fs %7.2fs %7.2fs %7.2fs   (medians)\n' median "$b" "$w" "$c" "$fw" "$fc"
printf '  flake warm / file warm  %.2f   (target <= 1.10)\n' "$(echo "$fw / $w" | bc -l)"
hits=$(cat "$work"/warm-*.log | grep -c '"cache":"hit"\|cache=hit' || true)
misses=$(cat "$work"/cold-*.log | grep -c '"cache":"miss"\|cache=miss' || true)
secs() { grep 'node evaluated' | grep -o '"seconds":[0-9.e-]*\|seconds=[0-9.e-]*' | grep -o '[0-9.e-]*$' | awk '{printf "%.6f\n", $1}' | median; }
one=$(cat "$work"/cold-*.log | secs)
hit=$(cat "$work"/warm-*.log | secs)
printf '  warm / base             %.2f   (target <= 1.10)\n' "$(echo "$w / $b" | bc -l)"
printf '  evaluation per node     %.3fs  ((cold - warm) / %d nodes, plans run nodes in parallel)\n' "$(echo "($c - $w) / $NODES" | bc -l)" "$NODES"
printf '  one nix-instantiate     %.3fs  (median over the cold plans, from the provider log)\n' "${one:-0}"
printf '  one cache hit           %.4fs  (tree hash + lookup, median over the warm plans, from the provider log)\n' "${hit:-0}"
printf '  cache hits (warm plans) %d, misses (cold plans) %d\n' "$hits" "$misses"
fone=$(cat "$work"/fcold-*.log | secs)
fhit=$(cat "$work"/fwarm-*.log | secs)
fhits=$(cat "$work"/fwarm-*.log | grep -c '"cache":"hit"\|cache=hit' || true)
printf '  flake: one evaluation   %.3fs  (nix flake metadata + nix eval, median over the cold plans)\n' "${fone:-0}"
printf '  flake: one cache hit    %.4fs  (nix flake metadata, shared by the nodes asking together, + lookup)\n' "${fhit:-0}"
printf '  flake: cache hits (warm plans) %d\n' "$fhits"

# One build per derivation: every node now builds the same fresh derivation in one apply.
# Without sharing, each would run its own nix-store --realise and all but one would wait
# on nix's lock of the output; with it the provider process builds it once.
sed -i "s/args      = { seed = \"bench-plan-$stamp-[0-9]*\" }/args      = { seed = \"bench-plan-$stamp-shared\" }/" "$work/eval/main.tf"
t0=$(now)
(cd "$work/eval" && TF_LOG_PROVIDER=DEBUG TF_LOG_PATH=$work/shared.log "$TF" apply -auto-approve -input=false >"$work/shared.apply" 2>&1) ||
  { echo "apply (shared derivation) failed:"; tail -30 "$work/shared.apply"; exit 1; }
t1=$(now)
built=$(grep 'derivation built' "$work/shared.log" | grep -c 'shared=false' || true)
waited=$(grep 'derivation built' "$work/shared.log" | grep -c 'shared=true' || true)
printf '\n=== %d nodes building one derivation in one apply: %.1fs\n' "$NODES" "$(echo "$t1 - $t0" | bc -l)"
printf '  builds run %d, nodes that took another node'"'"'s build %d\n' "$built" "$waited"
