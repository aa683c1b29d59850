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
# and the ratios of fresh, changed and cli to the 1-node figures and to the module.
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
root=$PWD
sizes=${*:-1 4 8 16}
TF=${TF:-/usr/local/bin/terraform}
prefix=${LAB_PREFIX:-fedi}
port_base=${LAB_PORT_BASE:-2200}
state=${LAB_STATE:-/var/lib/fediversity-lab}
key=$state/id_ed25519
SETTLE=${BENCH_SETTLE:-2}
WATCH=${BENCH_WATCH:-4}
max=0
for n in $sizes; do [ "$n" -gt "$max" ] && max=$n; done

[ -f "$state/nodes.json" ] || LAB_PREFIX=$prefix LAB_PORT_BASE=$port_base LAB_STATE=$state bash lab/lab.sh up >/dev/null
want=$((max * 64 + 256))
if [ "$(sysctl -n fs.inotify.max_user_instances)" -lt "$want" ]; then
  sysctl -qw fs.inotify.max_user_instances=$want
  [ "$(sysctl -n fs.inotify.max_user_watches)" -ge 1048576 ] || sysctl -qw fs.inotify.max_user_watches=1048576
fi
export PATH=/usr/local/go/bin:$PATH
go build -trimpath -o "$root/bin/terraform-provider-fediversity" .
go build -trimpath -o "$root/bin/fediversity" ./cmd/fediversity

work=$(mktemp -d /tmp/fediversity-bench-fleet.XXXXXX)
nodes=()
for i in $(seq 1 "$max"); do nodes+=("$prefix-b-$i"); done
cleanup() {
  [ -n "${sampler:-}" ] && kill "$sampler" 2>/dev/null || true
  if [ -n "${BENCH_KEEP:-}" ]; then
    echo "nodes and logs kept in $work"
  else
    for n in "${nodes[@]}"; do incus delete --force "$n" >/dev/null 2>&1 || true; done
    rm -rf "$work"
  fi
}
trap cleanup EXIT

# Throwaway nodes like labtest.NewInstance: lab key authorised, fresh host key, SSH proxy.
echo "launching $max nodes ($prefix-b-1 … $prefix-b-$max)" >&2
: >"$work/known_hosts"
for i in $(seq 1 "$max"); do
  n=$prefix-b-$i
  incus delete --force "$n" >/dev/null 2>&1 || true
  incus launch lab/debian "$n" >/dev/null
  incus config device add "$n" ssh proxy "listen=tcp:127.0.0.1:$((port_base + 50 + i))" connect=tcp:127.0.0.1:22 bind=host >/dev/null
done
for i in $(seq 1 "$max"); do
  n=$prefix-b-$i
  for _ in $(seq 90); do
    s=$(incus exec "$n" -- systemctl is-system-running 2>/dev/null || true)
    [ "$s" = running ] || [ "$s" = degraded ] && break
    sleep 1
  done
  incus file push --mode 0600 "$key.pub" "$n/root/.ssh/authorized_keys" >/dev/null
  incus exec "$n" -- sh -c 'test -s /etc/ssh/ssh_host_ed25519_key || ssh-keygen -A >/dev/null; systemctl restart ssh'
  # The host key, read out of band through Incus. The incus CLI now and then returns an
  # empty output under load: ask again (bounded).
  hk=
  for _ in 1 2 3 4 5; do
    hk=$(incus exec "$n" -- cat /etc/ssh/ssh_host_ed25519_key.pub | awk '{print $1" "$2}')
    [ -n "${hk// /}" ] && break
    sleep 1
  done
  [ -n "${hk// /}" ] || { echo "no host key from $n" >&2; exit 1; }
  echo "[127.0.0.1]:$((port_base + 50 + i)) $hk" >>"$work/known_hosts"
done

# Peak RSS (VmHWM, kB) of the provider and of the CLI, per N (reset by writing 0).
peak_p=$work/peak_provider peak_c=$work/peak_cli
echo 0 >"$peak_p"
echo 0 >"$peak_c"
(
  while :; do
    for pair in "$root/bin/terraform-provider-fediversity:$peak_p" "$root/bin/fediversity deploy:$peak_c"; do
      pat=${pair%%:*} file=${pair#*:}
      for pid in $(pgrep -f "^$pat" 2>/dev/null || true); do
        hwm=$(awk '/VmHWM/{print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
        [ "${hwm:-0}" -gt "$(cat "$file")" ] && echo "$hwm" >"$file"
      done
    done
    sleep 0.2
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
export TF_CLI_CONFIG_FILE=$work/tfrc CHECKPOINT_DISABLE=1 SSH_PRIVATE_KEY_FILE=$key
closures=$root/lab/closures/default.nix
stamp=$(date +%s)

# The group of the first N nodes: baked configuration, submission, roster (module and CLI).
group() { # dir N
  local dir=$1 n=$2 i
  mkdir -p "$dir"
  {
    printf '{"nodes":{'
    for i in $(seq 1 "$n"); do printf '%s"%s":{"applications":["app%d"]}' "$([ "$i" = 1 ] || echo ,)" "$prefix-b-$i" "$i"; done
    printf '},"applications":{'
    for i in $(seq 1 "$n"); do printf '%s"app%d":{"enable":false}' "$([ "$i" = 1 ] || echo ,)" "$i"; done
    printf '}}\n'
  } >"$dir/baked.json"
  {
    printf '{"applications":{'
    for i in $(seq 1 "$n"); do printf '%s"app%d":{"enable":true}' "$([ "$i" = 1 ] || echo ,)" "$i"; done
    printf '}}\n'
  } >"$dir/submission.json"
  {
    printf '{"timings":{"settle":"%ss","watch":"%ss","sample_interval":"1s"},"nodes":{' "$SETTLE" "$WATCH"
    for i in $(seq 1 "$n"); do
      printf '%s"%s":{"host":"127.0.0.1","port":%d,"known_hosts_file":"%s"}' "$([ "$i" = 1 ] || echo ,)" \
        "$prefix-b-$i" "$((port_base + 50 + i))" "$work/known_hosts"
    done
    printf '}}\n'
  } >"$dir/roster.json"
}

module_config() { # dir seed
  cat >"$1/main.tf" <<TF
terraform {
  required_providers {
    fediversity = { source = "fediversity/fediversity" }
  }
}
provider "fediversity" {}
module "group" {
  source          = "$root/modules/tf"
  submission_file = "\${path.root}/submission.json"
  baked_json      = file("\${path.root}/baked.json")
  nodes           = jsondecode(file("\${path.root}/roster.json")).nodes
  build           = { file = "$closures", attribute = "good", args = { seed = "$2" } }
  timings         = { settle = "${SETTLE}s", watch = "${WATCH}s", sample_interval = "1s" }
}
TF
}

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

printf '%-4s %8s %8s %8s %8s %8s %8s %10s %10s\n' N fresh plan changed hand cli cli_4w rss_prov_mb rss_cli_mb
declare -A fresh changed
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
  fresh[$n]=$(timed "$d/module/fresh.log" tf "$d/module" apply -input=false -auto-approve -parallelism=$par)
  plan=$(timed "$d/module/plan.log" tf "$d/module" plan -input=false -detailed-exitcode -parallelism=$par)
  module_config "$d/module" "m$n-$stamp-changed"
  changed[$n]=$(timed "$d/module/changed.log" tf "$d/module" apply -input=false -auto-approve -parallelism=$par)

  hand_config "$d/hand" "$n" "h$n-$stamp"
  hand=$(timed "$d/hand/fresh.log" tf "$d/hand" apply -input=false -auto-approve -parallelism=$par)

  # The CLI on the same group, with closures new to the nodes.
  jq --arg f "$closures" --arg s "c$n-$stamp" '.build = {file: $f, attribute: "good", args: {seed: $s}}' \
    "$d/cli/roster.json" >"$d/cli/roster2.json"
  cli=$(timed "$d/cli/deploy.log" "$root/bin/fediversity" deploy --roster "$d/cli/roster2.json" \
    --submission "$d/cli/submission.json" --baked "$d/cli/baked.json" --method tf --parallel "$par")
  # Again, with closures new to the nodes, in 4 waves (a staged run deploys a node again
  # only when its system changed, so a new seed).
  jq --arg f "$closures" --arg s "w$n-$stamp" '.build = {file: $f, attribute: "good", args: {seed: $s}}' \
    "$d/cli/roster.json" >"$d/cli/roster3.json"
  waves=$(timed "$d/cli/waves.log" "$root/bin/fediversity" deploy --roster "$d/cli/roster3.json" \
    --submission "$d/cli/submission.json" --baked "$d/cli/baked.json" --method tf --parallel "$par" --wave-size 25%)

  tf "$d/module" destroy -input=false -auto-approve >/dev/null 2>&1 || true
  tf "$d/hand" destroy -input=false -auto-approve >/dev/null 2>&1 || true
  printf '%-4s %8s %8s %8s %8s %8s %8s %10s %10s\n' "$n" "${fresh[$n]}" "$plan" "${changed[$n]}" "$hand" "$cli" "$waves" \
    "$(($(cat "$peak_p") / 1024))" "$(($(cat "$peak_c") / 1024))"
  echo "N=$n module/hand $(echo "scale=2; ${fresh[$n]} / $hand" | bc)  cli/module $(echo "scale=2; $cli / ${fresh[$n]}" | bc)  cli 4 waves/one wave $(echo "scale=2; $waves / $cli" | bc)"
done
first=$(echo "$sizes" | awk '{print $1}')
for n in $sizes; do
  echo "N=$n fresh/fresh(N=$first) $(echo "scale=2; ${fresh[$n]} / ${fresh[$first]}" | bc)  changed/changed(N=$first) $(echo "scale=2; ${changed[$n]} / ${changed[$first]}" | bc)"
done
