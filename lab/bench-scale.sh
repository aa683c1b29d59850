#!/usr/bin/env bash
# How the cost grows with the number of nodes, with no lab: prints one table of
#   engine      deploybody's BenchmarkScale: N fake nodes (answering in memory, with a
#               clock that moves only when the body sleeps) deployed all at once and
#               ten at a time (both front ends' default parallelism)
#   command     fleet's BenchmarkScale: the command's own work around the engine (the
#               roster read and checked, the plan, a staged rollout) with each node's
#               deploy answered in memory
#   terraform   `terraform plan` of N fediversity_node_switch resources (no refresh: a
#               plan of new nodes touches none), the provider's peak RSS and CPU
# at 1, 10, 100 and 500 nodes: CPU per node, peak RSS (and its growth per added node),
# goroutines and open files per node at their peak.
#
#   bash lab/bench-scale.sh              # all three
#   SCALE_TF=0 bash lab/bench-scale.sh   # without terraform
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
TF=${TF:-/usr/local/bin/terraform}
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

table() { # go test output -> rows
  awk '/^Benchmark/ {
    name=$1; sub(/^BenchmarkScale\//, "", name); sub(/-[0-9]+$/, "", name)
    cpu=rss=add=g=f="-"
    for (i = 2; i < NF; i++) {
      if ($(i+1) == "cpu-ms/node") cpu=$i
      if ($(i+1) == "peak-rss-MiB") rss=$i
      if ($(i+1) == "rss-KiB/added-node") add=$i
      if ($(i+1) == "goroutines/node") g=$i
      if ($(i+1) == "open-files/node") f=$i
    }
    printf "  %-22s %12s %14s %16s %16s %16s\n", name, cpu, rss, add, g, f
  }'
}
header() { printf '  %-22s %12s %14s %16s %16s %16s\n' "$1" cpu-ms/node peak-rss-MiB rss-KiB/add-node goroutines/node open-files/node; }

echo; echo "engine (internal/deploybody BenchmarkScale)"
header nodes
go test ./internal/deploybody -run '^$' -bench '^BenchmarkScale$' -benchtime 1x -timeout 0 | table
echo; echo "command (internal/fleet BenchmarkScale: the command's own work, deploys in memory)"
header nodes
go test ./internal/fleet -run '^$' -bench '^BenchmarkScale$' -benchtime 1x -timeout 0 | table

[ "${SCALE_TF:-1}" = 0 ] && exit 0
echo; echo "terraform plan of N fediversity_node_switch (the provider built as released; no node touched)"
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$root/bin/terraform-provider-fediversity" .
work=$(mktemp -d /tmp/fediversity-scale.XXXXXX)
trap 'rm -rf "$work"' EXIT
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
cat >"$work/main.tf" <<'TF'
terraform {
  required_providers {
    fediversity = { source = "fediversity/fediversity" }
  }
}
provider "fediversity" {}
variable "n" { type = number }
resource "fediversity_node_switch" "n" {
  count    = var.n
  node     = "scale-${count.index}"
  toplevel = "/nix/store/0000000000000000000000000000000a-nixos-system-scale-${count.index}"
  incus {
    instance = "scale-${count.index}"
  }
}
TF
printf '  %-8s %10s %18s %16s\n' nodes plan-s provider-rss-MiB provider-cpu-s
hz=$(getconf CLK_TCK)
for n in 1 10 100 500; do
  peak=$work/peak.$n
  : >"$peak"
  ( # every provider process: its peak RSS and its CPU so far, kept per pid
    while :; do
      for pid in $(pgrep -f "$root/bin/terraform-provider-fediversity" || true); do
        hwm=$(awk '/VmHWM/{print $2}' "/proc/$pid/status" 2>/dev/null || true)
        cpu=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || true)
        [ -n "$hwm" ] && echo "$pid $hwm $cpu" >>"$peak"
      done
      sleep 0.05
    done
  ) &
  sampler=$!
  t0=$(date +%s.%N)
  (cd "$work" && "$TF" plan -input=false -refresh=false -var "n=$n" >"$work/plan.$n" 2>&1) || { kill "$sampler"; cat "$work/plan.$n"; exit 1; }
  t1=$(date +%s.%N)
  kill "$sampler"; wait "$sampler" 2>/dev/null || true
  rss=$(awk '$2 > m {m = $2} END {printf "%.1f", m / 1024}' "$peak")
  cpu=$(awk -v hz="$hz" '{c[$1] = $3} END {for (p in c) s += c[p]; printf "%.2f", s / hz}' "$peak")
  printf '  %-8s %10.2f %18s %16s\n' "$n" "$(echo "$t1 - $t0" | bc -l)" "$rss" "$cpu"
done
