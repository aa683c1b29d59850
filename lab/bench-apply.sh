#!/usr/bin/env bash
# Speed benchmark of fediversity_node_switch against a hand-run deploy, on one
# throwaway lab node, for each transport (ssh, incus). Prints, per transport:
#   hand      seconds of a hand-run deploy of a fresh closure
#             (ssh: nix copy + ssh nix-env --set of the system profile and systemd-run
#              switch-to-configuration switch + systemctl show; incus: nix-store --export
#              | incus exec nix-store --import + incus exec nix-env --set and systemd-run
#              switch-to-configuration switch + incus exec systemctl show): the steps
#             nixos-rebuild switch takes on the target (bench-nodes.sh, bench_hand_ssh)
#   provider  seconds of `terraform apply` deploying an equal fresh closure, minus the
#             configured settle + watch windows (the verdict's deliberate waiting)
#   ratio     provider / hand (target <= 1.1)
#   deploy    the provider's own deploy (first phase to "deploy finished" in its log),
#             i.e. the apply without Terraform's own plan/apply work and plugin starts,
#             minus the settle + watch windows, and its ratio to the hand-run deploy
# Each transport runs BENCH_ROUNDS rounds (default 3), each with fresh closures and a
# fresh state, alternating hand and provider; the medians and the worst round are
# printed with every round. A provider round (apply-net or deploy-net) over 3x its
# median fails the benchmark (exit 1) once every figure is printed.
#   phases    each of the provider's phases (its log's "phases" line) as the median over
#             the rounds, with the fastest and the slowest round beside it, then each
#             round's, in ms (bench_phase_table)
#   reapply   bytes the provider copied when the same closure is deployed again
#             (`apply -replace`, so the deploy really runs; target 0)
#   cpu       the CPU of the hand-run and of the apply, medians in core-seconds: here (the
#             deployer's processes: Terraform, the provider, nix, ssh) and on the node (its
#             container's every process); what costs the two cores when many nodes deploy
#   rss       the provider process's peak RSS (VmHWM) over the runs
# Last, Terraform's floor, medians of BENCH_ROUNDS applies that touch no node:
#   core      `terraform apply` replacing one terraform_data: Terraform alone, no plugin
#   provider  the same plus one fediversity_rollout_gate replaced with it: Terraform with
#             this provider's plugin starts and calls, and no deploy; apply-net can never
#             be less than this plus the provider's deploy alone
# and, per transport, the provider's own share: apply-net - that floor - hand (medians).
# Timings are measurements, not assertions: the machine is shared and noisy.
#
#   bash lab/bench-apply.sh            # both transports
#   bash lab/bench-apply.sh ssh        # one of them
#   BENCH_ROUNDS=5 bash lab/bench-apply.sh
#   TF=$(bash lab/build-tofu.sh) bash lab/bench-apply.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# This machine reaches no binary cache: tell nix not to ask one (each build otherwise
# spends seconds on a cache it cannot reach). The provider never changes nix settings.
export NIX_CONFIG="substituters =
sandbox = false${NIX_CONFIG:+$'\n'$NIX_CONFIG}"
root=$PWD
transports=${*:-ssh incus}
TF=${TF:-/usr/local/bin/terraform}
state=${LAB_STATE:-/var/lib/fediversity-lab}
key=$state/id_ed25519
SETTLE=2
ROUNDS=${BENCH_ROUNDS:-3}
WATCH=4
# The throwaway node is named and placed after the lab (LAB_PREFIX, LAB_PORT_BASE, as
# lab.sh does), so labs of different prefixes on one incusd can each run the benchmark.
inst=${LAB_PREFIX:-fedi}-t-bench-h6
port=$((${LAB_PORT_BASE:-2200} + 99))

[ -f "$state/nodes.json" ] || bash lab/lab.sh up >/dev/null
# Built as the release builds it (.goreleaser.yml: no cgo, no symbol tables), so the
# figures are those of the binary operators install: 6 MB less resident at start.
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$root/bin/terraform-provider-fediversity" .

work=$(mktemp -d /tmp/fediversity-bench.XXXXXX)
cleanup() {
  [ -n "${sampler:-}" ] && kill "$sampler" 2>/dev/null || true
  incus delete --force "$inst" >/dev/null 2>&1 || true
  if [ -n "${BENCH_KEEP:-}" ]; then echo "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# A throwaway node like labtest.NewInstance: lab key authorised, fresh host key, SSH proxy.
incus delete --force "$inst" >/dev/null 2>&1 || true
incus launch "$(bash lab/lab.sh alias)" "$inst" >/dev/null
incus config device add "$inst" ssh proxy "listen=tcp:127.0.0.1:$port" connect=tcp:127.0.0.1:22 bind=host >/dev/null
for _ in $(seq 60); do
  s=$(incus exec "$inst" -- systemctl is-system-running 2>/dev/null || true)
  [ "$s" = running ] || [ "$s" = degraded ] && break
  sleep 1
done
incus file push --mode 0600 "$key.pub" "$inst/root/.ssh/authorized_keys" >/dev/null
incus exec "$inst" -- sh -c "$(cat lab/host-key-whole.sh); systemctl restart ssh"
hostkey=$(incus exec "$inst" -- cat /etc/ssh/ssh_host_ed25519_key.pub | awk '{print $1" "$2}')
echo "[127.0.0.1]:$port $hostkey" >"$work/known_hosts"
sshopts="-p $port -i $key -o UserKnownHostsFile=$work/known_hosts -o StrictHostKeyChecking=yes -o BatchMode=yes"

# shellcheck source=lab/bench-nodes.sh
. lab/bench-nodes.sh
build() { bench_build lab/closures "$1" "$2"; } # attr seed
units="fedi-web.service fedi-setup.service"
showprops=ActiveState,SubState,Result,NRestarts,ExecMainCode,ExecMainStatus,ExecMainStartTimestampMonotonic,ConditionResult,InvocationID

cpu_file=$(bench_cpu_file "$inst")

hand_ssh() { bench_hand_ssh "$sshopts" "$1" >/dev/null; } # toplevel

hand_incus() { # toplevel
  # shellcheck disable=SC2046
  nix-store --export $(nix-store -qR "$1") | incus exec "$inst" -- nix-store --import >/dev/null
  # nixos-rebuild switch's own steps on the target, as bench_hand_ssh says: the system
  # profile, then switch-to-configuration switch.
  incus exec "$inst" -- sh -c 'nix-env -p /nix/var/nix/profiles/system --set "$1" && systemd-run --collect --pipe --quiet --wait --service-type=exec --unit=bench-switch "$1/bin/switch-to-configuration" switch' sh "$1" >/dev/null
  # shellcheck disable=SC2086
  incus exec "$inst" -- systemctl show -p $showprops $units >/dev/null
}

now() { date +%s.%N; }

# Sample the provider's peak RSS (VmHWM, kB) while terraform runs it.
peak=$work/peak_kb
echo 0 >"$peak"
(
  while :; do
    for pid in $(pgrep -f "$root/bin/terraform-provider-fediversity" || true); do
      hwm=$(awk '/VmHWM/{print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
      [ "${hwm:-0}" -gt "$(cat "$peak")" ] && echo "$hwm" >"$peak"
    done
    sleep 0.1
  done
) &
sampler=$!

cat >"$work/tfrc" <<RC
provider_installation {
  dev_overrides {
    "registry.terraform.io/fediversity/fediversity" = "$root/bin"
    "registry.opentofu.org/fediversity/fediversity" = "$root/bin"
  }
  direct {}
}
RC
export TF_CLI_CONFIG_FILE=$work/tfrc CHECKPOINT_DISABLE=1
export SSH_PRIVATE_KEY_FILE=$key

stamp=$(date +%s)
shares=()
# node_cpu_sampler FILE: until killed, "<epoch µs> <the node's CPU in ns>" lines every
# 50 ms (the clock is bash's).
node_cpu_sampler() {
  local u
  while :; do
    u=$(bench_cpu_ns "$cpu_file") || return 0
    printf '%s %s\n' "${EPOCHREALTIME/./}" "$u"
    sleep 0.05
  done >"$1"
}
# phase_node_cpu LOG SAMPLES: one line "phase=<ms of the node's CPU>ms …" in the order
# of the provider's phases (its "phase finished" lines: the line's time is the phase's
# end, its duration gives the start), the CPU read from the samples around each phase.
phase_node_cpu() {
  local line end dur name
  grep 'phase finished' "$1" | while IFS= read -r line; do
    end=$(date -d "${line%% *}" +%s%6N)
    dur=$(grep -o 'duration=[^ ]*' <<<"$line" | head -1 | cut -d= -f2 | tr -d '"')
    name=$(grep -o ' phase=[^ ]*' <<<"$line" | head -1 | cut -d= -f2)
    echo "$name $end $dur"
  done | awk -v samples="$2" "$bench_awk_ms"'
    function at(t,   a) { # the CPU counter at time t (us): the last sample at or before it
      for (a = k; a >= 1; a--) if (st[a] <= t) return sv[a]
      return sv[1]
    }
    BEGIN { while ((getline l < samples) > 0) { split(l, f, " "); st[++k] = f[1]; sv[k] = f[2] } }
    k > 0 { end = $2; start = end - ms($3) * 1000; printf "%s%s=%.0fms", (NR > 1 ? " " : ""), $1, (at(end) - at(start)) / 1e6 }
    END { printf "\n" }'
}
# CPU of a deploy, on two sides: here (the deployer: user + system seconds of the timed
# command and everything it waited for, from bash's time) and on the node (the node
# container's cpuacct, in ns: every process of the node, the sshd or the exec included).
# On this lab both share the machine's cores; on a fleet only "here" does.
TIMEFORMAT='%U %S'
here_cpu() { awk '{ print $1 + $2 }' "$work/time"; }
node_cpu() { bench_cpu_ns "$cpu_file"; }
# ts LINE: the seconds of the log line's leading RFC 3339 timestamp.
ts() { date -d "$(cut -d' ' -f1 <<<"$1")" +%s.%N; }

for tr in $transports; do
  case "$tr" in
  ssh) block="ssh {
    host             = \"127.0.0.1\"
    port             = $port
    known_hosts_file = \"$work/known_hosts\"
  }" ;;
  incus) block="incus {
    instance = \"$inst\"
  }" ;;
  *) echo "unknown transport $tr (want ssh or incus)" >&2; exit 2 ;;
  esac
  printf '\n=== %s (node %s, %d rounds)\n' "$tr" "$inst" "$ROUNDS"
  printf '  %-5s %8s %10s %8s %8s %10s %8s\n' round hand apply-net ratio "" deploy-net ratio
  : >"$work/$tr.rows"
  : >"$work/$tr.phases"
  for round in $(seq "$ROUNDS"); do
    # Two closures of equal size the node has never seen: one per contender.
    hand_top=$(build good "bench-hand-$tr-$stamp-$round")
    prov_top=$(build good "bench-prov-$tr-$stamp-$round")

    n0=$(node_cpu); t0=$(now)
    { time "hand_$tr" "$hand_top" >/dev/null 2>&1; } 2>"$work/time"
    t1=$(now); n1=$(node_cpu)
    hand=$(echo "$t1 - $t0" | bc -l)
    echo "$(here_cpu) $(echo "($n1 - $n0) / 1000000000" | bc -l)" >>"$work/$tr.cpu-hand"

    dir=$work/$tr-$round
    mkdir -p "$dir"
    cat >"$dir/main.tf" <<TF
terraform {
  required_providers {
    fediversity = { source = "fediversity/fediversity" }
  }
}
provider "fediversity" {}
resource "fediversity_node_switch" "n" {
  node     = "$inst"
  toplevel = "$prov_top"
  $block
  timings {
    settle          = "${SETTLE}s"
    watch           = "${WATCH}s"
    sample_interval = "1s"
  }
}
TF
    (cd "$dir" && "$TF" init -input=false >/dev/null 2>&1 || true)
    export TF_LOG_PROVIDER=INFO TF_LOG_PATH=$dir/apply.log
    node_cpu_sampler "$dir/node-cpu" &
    sampler_n=$!
    n0=$(node_cpu); t0=$(now)
    { time (cd "$dir" && "$TF" apply -auto-approve -input=false >"$dir/out1" 2>&1); } 2>"$work/time"
    t1=$(now); n1=$(node_cpu)
    kill "$sampler_n" 2>/dev/null; wait "$sampler_n" 2>/dev/null || true
    unset TF_LOG_PROVIDER TF_LOG_PATH
    phase_node_cpu "$dir/apply.log" "$dir/node-cpu" >>"$work/$tr.phase-cpu"
    echo "$(here_cpu) $(echo "($n1 - $n0) / 1000000000" | bc -l)" >>"$work/$tr.cpu-prov"
    grep -q 'deploy finished' "$dir/apply.log" || { echo "apply failed:"; tail -20 "$dir/out1"; exit 1; }
    apply=$(echo "$t1 - $t0" | bc -l)
    first=$(grep -m1 'phase started' "$dir/apply.log")
    last=$(grep 'deploy finished' "$dir/apply.log" | tail -1)
    deploy=$(echo "$(ts "$last") - $(ts "$first")" | bc -l)
    net=$(echo "$apply - $SETTLE - $WATCH" | bc -l)
    dnet=$(echo "$deploy - $SETTLE - $WATCH" | bc -l)
    grep -o 'phases="[^"]*"' "$dir/apply.log" | tail -1 | cut -d'"' -f2 >>"$work/$tr.phases"
    printf '%s %s %s %s %s\n' "$hand" "$net" "$(echo "$net / $hand" | bc -l)" "$dnet" "$(echo "$dnet / $hand" | bc -l)" >>"$work/$tr.rows"
    printf '  %-5s %7.2fs %9.2fs %8.2f %8s %9.2fs %8.2f\n' "$round" "$hand" "$net" "$(echo "$net / $hand" | bc -l)" "" "$dnet" "$(echo "$dnet / $hand" | bc -l)"
  done
  col() { awk -v c="$1" '{print $c}' "$work/$tr.rows" | bench_median; }
  worst() { awk -v c="$1" '{print $c}' "$work/$tr.rows" | sort -n | tail -1; }
  printf '  %-5s %7.2fs %9.2fs %8.2f %8s %9.2fs %8.2f   (medians; ratio target <= 1.10)\n' median "$(col 1)" "$(col 2)" "$(col 3)" "" "$(col 4)" "$(col 5)"
  printf '  %-5s %7.2fs %9.2fs %8.2f %8s %9.2fs %8.2f   (the slowest round of each column)\n' worst "$(worst 1)" "$(worst 2)" "$(worst 3)" "" "$(worst 4)" "$(worst 5)"
  # A round of the provider over 3x the median is a stall, not noise: the benchmark
  # fails (the hand-run's own stalls are the machine's and are only printed).
  for c in 2 4; do
    if [ "$(echo "$(worst $c) > 3 * $(col $c)" | bc -l)" = 1 ]; then
      printf '  FAIL: a round of %.2fs is over 3x the median %.2fs (%s)\n' "$(worst $c)" "$(col $c)" "$([ $c = 2 ] && echo apply-net || echo deploy-net)"
      stalled=1
    fi
  done
  printf '  apply-net = terraform apply minus settle %ss + watch %ss; deploy-net = the same without Terraform'"'"'s own work\n' "$SETTLE" "$WATCH"

  # The same closure again (apply -replace, so the deploy really runs): nothing to copy.
  export TF_LOG_PROVIDER=INFO TF_LOG_PATH=$dir/reapply.log
  (cd "$dir" && "$TF" apply -auto-approve -input=false -replace=fediversity_node_switch.n >"$dir/out2" 2>&1)
  unset TF_LOG_PROVIDER TF_LOG_PATH
  sent=$(grep -o '[0-9]* of [0-9]* paths sent, [0-9]* bytes' "$dir/apply.log" | tail -1)
  resent=$(grep -o '[0-9]* of [0-9]* paths sent, [0-9]* bytes' "$dir/reapply.log" | tail -1)
  printf '  first apply copied     %s\n' "${sent:-?}"
  printf '  re-apply copied        %s  (target: 0 bytes)\n' "${resent:-?}"
  cpu() { awk -v c="$2" '{print $c}' "$work/$tr.cpu-$1" | bench_median; }
  printf '  cpu, core-s (medians)  hand-run: here %.2f, node %.2f; provider apply: here %.2f, node %.2f\n' \
    "$(cpu hand 1)" "$(cpu hand 2)" "$(cpu prov 1)" "$(cpu prov 2)"
  printf '  provider phases        over %d rounds (a phase at 0 ms in every round left out)\n' "$ROUNDS"
  awk '{ print "r" NR, $0 }' "$work/$tr.phases" | bench_phase_table
  printf '  the node'"'"'s CPU in each phase (ms of CPU; its container, sampled every 50 ms)\n'
  awk '{ print "r" NR, $0 }' "$work/$tr.phase-cpu" | bench_phase_table
  shares+=("$tr $(col 2) $(col 1)")
done
printf '\n  provider peak RSS      %d MiB\n' "$(($(cat "$peak") / 1024))"

# Terraform's floor: applies that replace resources touching no node.
floor() { # dir: medians of ROUNDS applies, each replacing everything (timestamp())
  local i t0 t1
  (cd "$1" && "$TF" init -input=false >/dev/null 2>&1 || true)
  (cd "$1" && "$TF" apply -auto-approve -input=false >/dev/null 2>&1) || { echo "floor apply failed in $1" >&2; exit 1; }
  for i in $(seq "$ROUNDS"); do
    t0=$(now); (cd "$1" && "$TF" apply -auto-approve -input=false >/dev/null 2>&1); t1=$(now)
    echo "$t1 - $t0" | bc -l
  done | bench_median
}
mkdir -p "$work/floor-core" "$work/floor-provider"
echo 'resource "terraform_data" "x" { input = timestamp() }' >"$work/floor-core/main.tf"
cat >"$work/floor-provider/main.tf" <<'TF'
terraform {
  required_providers {
    fediversity = { source = "fediversity/fediversity" }
  }
}
provider "fediversity" {}
resource "terraform_data" "x" { input = timestamp() }
resource "fediversity_rollout_gate" "g" {
  wave           = 1
  waves          = 2
  group_size     = 1
  failure_budget = "0"
  verdicts       = { a = { ok = true, reasons = [] } }
  lifecycle { replace_triggered_by = [terraform_data.x] }
}
TF
core=$(floor "$work/floor-core")
tfloor=$(floor "$work/floor-provider")
printf '  terraform floor        core %.2fs, with this provider %.2fs (applies that touch no node; medians)\n' "$core" "$tfloor"
# The provider's own share of a deploy: what the apply costs beyond Terraform's floor
# with this provider and beyond the hand-run of the same copy and switch (medians). What
# the NixOS contract adds (the switch as `test`, the boot entry as a second run,
# `boot`, after the verdict) is in it: the hand-run is one `switch`.
for s in "${shares[@]}"; do
  read -r tr apply hand <<<"$s"
  printf '  our share (%s)        %.2fs = apply-net %.2fs - floor %.2fs - hand %.2fs (target <= 0.25 s)\n' \
    "$tr" "$(echo "$apply - $tfloor - $hand" | bc -l)" "$apply" "$tfloor" "$hand"
done
if [ -n "${stalled:-}" ]; then
  echo "FAIL: a provider round took over 3x the median (see FAIL above)"
  exit 1
fi
