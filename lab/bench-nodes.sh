# Sourced by lab/bench-fleet.sh and lab/bench-plan.sh: throwaway lab nodes reached over
# SSH, and the modules/tf group that deploys them. The caller sets root (the
# repository), work (its work directory), prefix, port_base and state (the lab's
# LAB_PREFIX, LAB_PORT_BASE and LAB_STATE), SETTLE and WATCH (seconds). lab/bench-apply.sh
# sources it for bench_build and bench_hand_ssh, which need none of these.

# bench_discard NAME N: the end of a benchmark's run: deletes the nodes <NAME>-1 …
# <NAME>-N of bench_launch and the work directory, or with BENCH_KEEP set keeps both and
# says where.
bench_discard() {
  local i
  if [ -n "${BENCH_KEEP:-}" ]; then
    echo "nodes $1-1 … $1-$2 and the work directory kept in $work"
  else
    for i in $(seq 1 "$2"); do incus delete --force "$1-$i" >/dev/null 2>&1 || true; done
    rm -rf "$work"
  fi
}

# bench_median: the median of the numbers on stdin, one a line.
bench_median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# bench_raise_limits N: many nodes need a higher fs.inotify.max_user_instances (each
# systemd boot takes about 12); raised when lower than 64 per node plus 256.
bench_raise_limits() {
  local want=$(($1 * 64 + 256))
  if [ "$(sysctl -n fs.inotify.max_user_instances)" -lt "$want" ]; then
    sysctl -qw fs.inotify.max_user_instances=$want
    [ "$(sysctl -n fs.inotify.max_user_watches)" -ge 1048576 ] || sysctl -qw fs.inotify.max_user_watches=1048576
  fi
}

# bench_launch NAME OFFSET N: N throwaway nodes <NAME>-<i> like labtest.NewInstance (the
# lab key authorised, a fresh host key), each with its SSH proxy on
# 127.0.0.1:$((port_base+OFFSET+i)); their host keys in $work/known_hosts.
bench_launch() {
  local name=$1 offset=$2 max=$3 i n s hk image
  image=$(bash "$(dirname "${BASH_SOURCE[0]}")/lab.sh" alias)
  : >"$work/known_hosts"
  for i in $(seq 1 "$max"); do
    n=$name-$i
    incus delete --force "$n" >/dev/null 2>&1 || true
    incus launch "$image" "$n" >/dev/null
    incus config device add "$n" ssh proxy "listen=tcp:127.0.0.1:$((port_base + offset + i))" connect=tcp:127.0.0.1:22 bind=host >/dev/null
  done
  for i in $(seq 1 "$max"); do
    n=$name-$i
    for _ in $(seq 90); do
      s=$(incus exec "$n" -- systemctl is-system-running 2>/dev/null || true)
      [ "$s" = running ] || [ "$s" = degraded ] && break
      sleep 1
    done
    incus file push --mode 0600 "$state/id_ed25519.pub" "$n/root/.ssh/authorized_keys" >/dev/null
    incus exec "$n" -- sh -c "$(cat "$root/lab/host-key-whole.sh"); systemctl restart ssh"
    # The host key, read out of band through Incus. The incus CLI now and then returns an
    # empty output under load: ask again (bounded).
    hk=
    for _ in 1 2 3 4 5; do
      hk=$(incus exec "$n" -- cat /etc/ssh/ssh_host_ed25519_key.pub | awk '{print $1" "$2}')
      [ -n "${hk// /}" ] && break
      sleep 1
    done
    [ -n "${hk// /}" ] || { echo "no host key from $n" >&2; return 1; }
    echo "[127.0.0.1]:$((port_base + offset + i)) $hk" >>"$work/known_hosts"
  done
}

# bench_build FILE ATTR SEED: the store path of nix-build FILE -A ATTR --argstr seed SEED
# (a closure no node has seen, for a fresh SEED).
bench_build() {
  local extra=()
  getent group nixbld >/dev/null || extra=(--option build-users-group "")
  nix-build --option sandbox false "${extra[@]}" "$1" -A "$2" --argstr seed "$3" --no-out-link 2>/dev/null
}

# bench_hand_ssh SSHOPTS TOPLEVEL: a deploy by hand with no safety net, the steps
# `nixos-rebuild switch --target-host` takes on the target and no fewer: copy the closure
# (`nix copy --to ssh://` of TOPLEVEL), point the system profile at it (`nix-env -p
# /nix/var/nix/profiles/system --set`, nix.py's set_profile, which services.py's
# _activate_system runs for switch and boot), then run its `switch-to-configuration
# switch` (nix.py's switch_to_configuration, under systemd-run as nixos-rebuild-ng runs
# it), all as in nixpkgs' pkgs/by-name/ni/nixos-rebuild-ng/src/nixos_rebuild/{services,nix}.py;
# then systemctl show of the lab closure's units. The profile and the switch share one
# ssh session, as nixos-rebuild's calls share one SSH master connection.
bench_hand_ssh() {
  NIX_SSHOPTS="$1" nix copy --extra-experimental-features nix-command --to "ssh://root@127.0.0.1" "$2"
  # shellcheck disable=SC2086
  ssh $1 root@127.0.0.1 "nix-env -p /nix/var/nix/profiles/system --set $2 && systemd-run --collect --pipe --quiet --wait --service-type=exec --unit=bench-switch-\$\$ $2/bin/switch-to-configuration switch; systemctl show -p ActiveState,SubState,Result,NRestarts,ExecMainCode,ExecMainStatus,ExecMainStartTimestampMonotonic,ConditionResult,InvocationID fedi-web.service fedi-setup.service"
}

# bench_busy_jiffies: the machine's busy and total CPU time so far (every core), in clock ticks.
bench_busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }

# bench_wait_quiet: wait, at most 180 s, until the machine's CPU is quiet again (under a
# quarter of every core busy over 5 s, by /proc/stat) after the nodes booted, so the
# first figures do not measure the boots' tail. Prints how long it waited and how busy
# the CPU was then.
bench_wait_quiet() {
  local t0=$SECONDS a b busy=100
  while [ $((SECONDS - t0)) -lt 180 ]; do
    a=$(bench_busy_jiffies)
    sleep 5
    b=$(bench_busy_jiffies)
    busy=$(echo "$a $b" | awk '{d=$4-$2; print (d > 0 ? int(100 * ($3 - $1) / d) : 100)}')
    [ "$busy" -lt 25 ] && break
  done
  echo "waited $((SECONDS - t0)) s for a quiet CPU: $busy% busy" >&2
}

# bench_tfrc: Terraform and OpenTofu take the provider from $root/bin (dev_overrides).
bench_tfrc() {
  cat >"$work/tfrc" <<RC
provider_installation {
  dev_overrides {
    "registry.terraform.io/fediversity/fediversity" = "$root/bin"
    "registry.opentofu.org/fediversity/fediversity" = "$root/bin"
  }
  direct {}
}
RC
  export TF_CLI_CONFIG_FILE=$work/tfrc CHECKPOINT_DISABLE=1 SSH_PRIVATE_KEY_FILE=$state/id_ed25519
}

# bench_group DIR N NAME OFFSET: the group of the first N nodes of bench_launch NAME
# OFFSET: baked configuration, submission, roster (module and CLI).
bench_group() {
  local dir=$1 n=$2 name=$3 offset=$4 i
  mkdir -p "$dir"
  {
    printf '{"nodes":{'
    for i in $(seq 1 "$n"); do printf '%s"%s":{"applications":["app%d"]}' "$([ "$i" = 1 ] || echo ,)" "$name-$i" "$i"; done
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
        "$name-$i" "$((port_base + offset + i))" "$work/known_hosts"
    done
    printf '}}\n'
  } >"$dir/roster.json"
}

# bench_module_config DIR SEED: modules/tf deploying the group in DIR, every node built
# from lab/closures with SEED.
bench_module_config() {
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
  build           = { file = "$root/lab/closures/default.nix", attribute = "good", args = { seed = "$2" } }
  timings         = { settle = "${SETTLE}s", watch = "${WATCH}s", sample_interval = "1s" }
}
TF
}

# bench_peak_rss FILE PATTERN…: in the background, keeps in FILE the highest VmHWM (kB)
# of any process whose command line starts with a PATTERN (reset by writing 0 to FILE).
# Prints the sampler's pid.
bench_peak_rss() {
  local file=$1
  shift
  echo 0 >"$file"
  (
    while :; do
      for pat in "$@"; do
        for pid in $(pgrep -f "^$pat" 2>/dev/null || true); do
          hwm=$(awk '/VmHWM/{print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
          [ "${hwm:-0}" -gt "$(cat "$file")" ] && echo "$hwm" >"$file"
        done
      done
      sleep 0.2
    done
  ) >/dev/null 2>&1 &
  echo $!
}

# bench_phase_table: reads one line per node run, "NODE [at=<ms>] phase=<Go duration> …"
# (from the provider's "deploy finished" log lines: bench_provider_phases), and prints
# each phase in the lines' order as its median over the lines with the fastest and the
# slowest beside it, then its value on each line in the input's order, all in ms; a
# phase that took 0 ms on every line is left out. Then each line's sum of phases and,
# with at= (when the line's run ended), when each run began and ended, in ms after the
# first run began: runs that began late waited for something outside the node's run.
# bench_awk_ms: the awk function ms(d), a Go duration (1m2.5s, 1.204s, 211ms, 70µs, 0s)
# in milliseconds, for the awk programs that read the provider's durations.
bench_awk_ms='
    function ms(d,   t, n, u) {
      t = 0
      while (match(d, /^[0-9.]+(h|ms|m|s|µs|us|ns)/)) {
        n = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
        match(n, /[a-zµ]+$/); u = substr(n, RSTART); n = substr(n, 1, RSTART - 1) + 0
        t += n * (u == "h" ? 3600000 : u == "m" ? 60000 : u == "s" ? 1000 : u == "ms" ? 1 : (u == "ns" ? 0.000001 : 0.001))
      }
      return t
    }'

bench_phase_table() {
  awk "$bench_awk_ms"'
    function row(name, c,   a, b, x, s, med) {
      for (a = 1; a <= c; a++) s[a] = cell[a]
      for (a = 2; a <= c; a++) { x = s[a]; for (b = a - 1; b >= 1 && s[b] > x; b--) s[b + 1] = s[b]; s[b + 1] = x }
      if (s[c] == 0 && name !~ / /) return
      med = (c % 2) ? s[(c + 1) / 2] : (s[c / 2] + s[c / 2 + 1]) / 2
      printf "    %-26s %7.0f %7.0f %7.0f  ", name, med, s[1], s[c]
      for (a = 1; a <= c; a++) printf " %5.0f", cell[a]
      printf "\n"
    }
    {
      label[++r] = $1
      for (i = 2; i <= NF; i++) {
        split($i, kv, "=")
        if (kv[1] == "at") { at[r] = kv[2]; continue }
        if (!(kv[1] in seen)) { seen[kv[1]] = 1; order[++k] = kv[1] }
        v[r, kv[1]] = ms(kv[2]); sum[r] += v[r, kv[1]]
      }
    }
    END {
      if (r == 0) { print "    (no phases logged)"; exit }
      printf "    %-26s %7s %7s %7s  ", "phase (ms)", "median", "fastest", "slowest"
      for (a = 1; a <= r; a++) { l = label[a]; sub(/.*-/, "", l); printf " %5s", substr(l, 1, 5) }
      printf "\n"
      for (j = 1; j <= k; j++) { for (a = 1; a <= r; a++) cell[a] = v[a, order[j]] + 0; row(order[j], r) }
      for (a = 1; a <= r; a++) cell[a] = sum[a]; row("sum of phases", r)
      if (!(1 in at)) exit
      first = at[1] - sum[1]
      for (a = 2; a <= r; a++) if (at[a] - sum[a] < first) first = at[a] - sum[a]
      for (a = 1; a <= r; a++) cell[a] = at[a] - sum[a] - first; row("began (after the first)", r)
      for (a = 1; a <= r; a++) cell[a] = at[a] - first; row("ended (after the first)", r)
    }'
}

# bench_provider_phases LOG: a line "NODE at=<ms> phases…" for each "deploy finished"
# line of a provider log (TF_LOG_PROVIDER=INFO; at: the line's time, in ms since the
# epoch), for bench_phase_table.
bench_provider_phases() {
  grep 'deploy finished' "$1" | while IFS= read -r line; do
    node=$(grep -o ' node=[^ ]*' <<<"$line" | head -1 | cut -d= -f2)
    phases=$(sed -n 's/.*phases="\([^"]*\)".*/\1/p' <<<"$line")
    at=$(date -d "${line%% *}" +%s%3N)
    [ -n "$phases" ] && printf '%s at=%s %s\n' "$node" "$at" "$phases"
  done
}

# bench_cpu_file INSTANCE: the file that counts the CPU of the instance's every process
# (cgroup v1 cpuacct.usage, ns; or v2 cpu.stat), found from its init's cgroup: LXC names
# a container's cgroup lxc.payload.<name>-<n> when an older one of that name lingers.
bench_cpu_file() {
  local pid cg
  pid=$(incus query "/1.0/instances/$1/state" | jq -r .pid)
  cg=$(awk -F: '$2 == "cpuacct" { print $3 }' "/proc/$pid/cgroup")
  if [ -n "$cg" ]; then
    echo "/sys/fs/cgroup/cpuacct$cg/cpuacct.usage"
  else
    echo "/sys/fs/cgroup$(awk -F: '$1 == "0" { print $3 }' "/proc/$pid/cgroup" | sed 's|/init.scope$||')/cpu.stat"
  fi
}

# bench_cpu_ns FILE: the CPU counted in FILE (bench_cpu_file), in ns.
bench_cpu_ns() {
  case "$1" in
  *cpu.stat) awk '/^usage_usec/ { print $2 * 1000 }' "$1" ;;
  *) cat "$1" ;;
  esac
}

# nodes_cpu N: the CPU the first N nodes' containers used so far, in ns (cpuacct), from
# the files in cpu_files[1..N] (bench_cpu_file of each node).
nodes_cpu() {
  local i t=0
  for i in $(seq 1 "$1"); do t=$((t + $(bench_cpu_ns "${cpu_files[$i]}"))); done
  echo "$t"
}

# cpu_mark N, then cpu_since N: "<the machine's busy core-s> <the first N nodes'
# containers' core-s>" between the two.
cpu_mark() { mark_j=$(bench_busy_jiffies | cut -d" " -f1); mark_c=$(nodes_cpu "$1"); }
cpu_since() {
  echo "$(bench_busy_jiffies | cut -d" " -f1) $mark_j $(getconf CLK_TCK) $(nodes_cpu "$1") $mark_c" |
    awk '{printf "%.2f %.2f\n", ($1 - $2) / $3, ($4 - $5) / 1e9}'
}
