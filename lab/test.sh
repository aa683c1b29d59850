#!/usr/bin/env bash
# `make test`: everything CI runs. Brings up what is missing (the Incus lab, OpenTofu, the
# Kubernetes control plane with kwok's fake node and a real node, SPIRE), and runs every
# suite as soon as the parts it needs are up, side by side:
#
#   suite                                       needs                  lab (prefix, ports)
#   make lint (go vet, golangci-lint)           nothing                -
#   unit and lab                                the lab                fedi, 2200
#   acceptance, nodes shard i: Terraform,       the lab (OpenTofu)     fedn<i>, 4000+100i
#     then OpenTofu
#   k8s and SPIRE lab                           + Kubernetes, SPIRE    fedi, 2200
#   acceptance, k8s and SPIRE shard i:          + Kubernetes, SPIRE    fedk<i>, 5000+100i
#     Terraform, then OpenTofu (on a warm
#     machine, nodes jobs too)
#   acceptance, alone: OpenTofu (and Terraform  the lab, and no other  fedn1
#     for a test of its set)                    suite running ($ALONE_TESTS: incusd restarts)
#
# Which binary runs which acceptance test: OpenTofu (the binary the methods name) runs
# every one; Terraform runs the compatibility set named in test/terraform-compat.txt,
# with the reason for each (what the two binaries could do differently). The summary
# counts each binary's tests.
#
# The acceptance tests live in several packages (the provider's root and families under
# internal/provider, and test/ for the modules and examples), each built once into a test
# binary of its own, and listed. Each test to run under a binary is a job; the jobs are
# split in groups: those that need the cluster or SPIRE ($K8S_TESTS), those that must run
# alone ($ALONE_TESTS), and all the others (the nodes tests). The jobs wait in one
# queue, longest first by their recorded wall times (test/durations.txt, which the
# summary rewrites after each run), and each shard takes its next job when the one
# before ended (tools/testsummary order, take), so that the shards end within a short
# test of each other: the nodes shards take the nodes jobs, the k8s and SPIRE shards
# their own jobs first, then nodes jobs, and the alone shard, after all the others, the
# alone jobs. A shard runs Terraform jobs, then OpenTofu jobs, as two suites, on a lab
# of its own (its nodes, throwaway instances, ports and spire node), so that shards side
# by side never touch each other's nodes; the Kubernetes control plane and the real node
# are shared (every test makes a namespace of its own). A suite runs each of its tests
# with the test's package binary, from the package's directory (the tests read
# testdata/ by relative path), as one output.
# The nodes tests mostly wait on their nodes (settle and watch windows): shards side by
# side cut the wall time.
#
# The parts (OpenTofu; Kubernetes, the real node's runtime and SPIRE, which build from
# one Go module, lab/parts) are built in the background, only when their versions are
# not in /var/cache/fediversity; a cold machine is said at the start, with the time its
# build takes. Every module the run needs is fetched first, with retries (lab/retry.sh). Every
# suite's output goes to its own log, printed whole when the suite ends; the run ends
# with the timeline and the summary of what each suite proved and the CPU it used
# (tools/testsummary), whose last line is "N passed, N failed, N skipped". Every suite
# runs even when another one failed; the run then fails.
#
#   bash lab/test.sh        all of it
#   bash lab/test.sh acc    only the acceptance suites
#   bash lab/test.sh setup  only bring up what the tests need (on a new machine: the
#                           parts' build, alone, before any test)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. lab/retry.sh
# This machine reaches no binary cache: tell nix not to ask one (each build otherwise
# spends seconds on a cache it cannot reach). The provider never changes nix settings.
export NIX_CONFIG="substituters =${NIX_CONFIG:+$'\n'$NIX_CONFIG}"
mode=${1:-all}
case "$mode" in all | acc | setup) ;; *) echo "usage: $0 [all|acc|setup]" >&2; exit 2 ;; esac

# The acceptance tests that need the Kubernetes control plane, the real node or SPIRE.
K8S_TESTS='^TestAcc(K8s|Image|ModuleK8s|Spire)'
# The tests that restart the one incusd every lab shares: they run alone, after the
# other suites, or they would cut the exec sessions of every test running beside them.
ALONE_TESTS='^TestAccNodeSwitchIncusdRestart$'
# The acceptance tests Terraform runs too (every one runs under OpenTofu), and each
# test's recorded wall time and CPU, by which the jobs are queued.
COMPAT=test/terraform-compat.txt
DURATIONS=test/durations.txt
# Two nodes shards per core beyond the first (at most 9: their ports): two on two cores,
# as many nodes suites side by side as when each binary had one shard of every test.
# Three were measured there (47m45s, the same as two, since the suites side by side use
# every core) and the CPU-starved nodes then broke the timing of the interrupt tests.
cores=$(nproc)
NODES_SHARDS=${NODES_SHARDS:-$((cores > 2 ? (2 * (cores - 1) > 9 ? 9 : 2 * (cores - 1)) : 2))}
# The packages that hold acceptance tests (TestAcc*); a package with none is left out
# once listed.
ACC_PKGS=(./internal/provider/... ./test/)
TERRAFORM=${TERRAFORM:-/usr/local/bin/terraform}
export KUBE_CONFIG_PATH=${KUBE_CONFIG_PATH:-/var/lib/fediversity-k8s/kubeconfig}

# A TF_CLI_CONFIG_FILE naming a missing file only adds warnings to every run.
[ -f "${TF_CLI_CONFIG_FILE:-/nonexistent}" ] || unset TF_CLI_CONFIG_FILE

logs=$(mktemp -d)
timeline=$logs/timeline
# mark EVENT: one line of the timeline printed at the end (and as it happens).
mark() { printf '%s  %s\n' "$(date +%T)" "$*" | tee -a "$timeline"; }

# Background jobs report through files, so that any job can wait for any other:
# $logs/<name>.rc holds the exit code once <name> ended.
background() { # background NAME CMD…: run CMD with its output in $logs/NAME.log
  local name=$1; shift
  ( set +e; "$@" >"$logs/$name.log" 2>&1; echo $? >"$logs/$name.rc" ) &
}
wait_for() { # wait_for NAME: 0 when NAME ended well; otherwise its log's tail and 1
  until [ -f "$logs/$1.rc" ]; do sleep 2; done
  [ "$(cat "$logs/$1.rc")" = 0 ] && return 0
  { echo "--- $1 failed; the end of its log:"; tail -40 "$logs/$1.log"; } >&2
  return 1
}

# 0. A cold machine is said, not discovered: what is not cached is built in this run.
cold=""
bash lab/build-tofu.sh --cached >/dev/null || cold="OpenTofu"
bash lab/parts/build.sh --cached >/dev/null || cold="$cold the-lab's-parts(Kubernetes,kwok,containerd,runc,SPIRE)"
if [ -n "$cold" ]; then
  mark "cold machine: not cached: $cold"
  mark "  the parts build from one Go module (lab/parts) in about 45 core-minutes, OpenTofu in about 9;"
  mark "  longer beside the suites; the k8s and SPIRE suites wait for the parts"
  [ "$mode" = setup ] || mark "  (\`bash lab/test.sh setup\` builds them alone first)"
fi

# 1. The lab (incusd, the node image, three nodes) at the run's priority, since every
# suite waits on it; beside it, at the lowest priority until the lab is up, the parts
# (each a no-op when its version is cached) and the acceptance test binaries; the
# linters niced throughout. On a cold machine the image's debootstrap is one process
# among dozens of compilers: at equal priority it took 20 minutes instead of 4.
background lab bash lab/lab.sh up
# Every module the run needs (the provider's, the lab's parts', the tools': docs,
# release, lint), fetched once while the lab starts, with retries: a registry that is
# slow once then costs a minute here, and one that is down fails the run in its first
# minutes, not after an hour of tests.
mark "fetching the Go modules (lab/fetch-modules.sh)"
bash lab/fetch-modules.sh || { mark "the Go modules could not be fetched"; exit 1; }
mark "building the parts in the background (cached: no-op)"
export FEDIVERSITY_BUILD_NICE=0
declare -A early=()
background_early() { # background_early NAME CMD…: as background, niced to 19 until the lab is up
  # (setup runs nothing else: the builds keep the run's priority)
  local name=$1; shift
  if [ "$mode" = setup ]; then background "$name" "$@"; else background "$name" nice -n 19 "$@"; fi
  early[$name]=$!
}
renice_tree() { # renice_tree PRIO PID: PID and every process below it, every thread of each
  # Linux keeps a niceness per thread, and `renice -p PID` sets the main thread's only: a
  # Go build's other threads, which start its compilers, stayed at 19, so on a cold CI
  # run the Kubernetes build crawled under the nodes suites for 50 minutes.
  local task
  for task in /proc/"$2"/task/*; do renice -n "$1" -p "${task##*/}" >/dev/null 2>&1 || true; done
  local child
  for child in $(pgrep -P "$2"); do renice_tree "$1" "$child"; done
}
background_early build-tofu bash lab/build-tofu.sh
background_early build-k8s bash lab/k8s/build.sh
background_early build-node bash lab/k8s/node-build.sh
background_early build-spire bash lab/spire/build.sh
if [ "$mode" != setup ]; then
  # One binary per package, named after its last element (go test -c -o DIR/); beside
  # them, each package's import path and directory, for test2json and the working dir,
  # and the provider the CLI tests run under Terraform and OpenTofu (built once here for
  # every suite, from the packages the test binaries just compiled:
  # FEDIVERSITY_CLI_PROVIDER_DIR).
  mkdir -p "$logs/acc/cli-provider"
  background_early build-provider-tests sh -c 'go list -f "{{.ImportPath}} {{.Dir}}" "$@" >"$0/packages" &&
    go test -c -o "$0/" "$@" && go build -o "$0/cli-provider/terraform-provider-fediversity" .' "$logs/acc" "${ACC_PKGS[@]}"
fi
if [ "$mode" = all ]; then
  # Nothing waits on the linters but the end of the run: they stay niced.
  mark "make lint: go vet and golangci-lint (in the background)"
  background lint nice -n 10 make lint
fi
wait_for lab
mark "lab up"
# What the nodes suites (the run's longest) wait for at the run's priority from now on:
# the acceptance test binaries and OpenTofu. The parts (Kubernetes, the real node,
# SPIRE) stay niced until both are built, as their suites are shorter: on a cold
# machine, at equal priority, the builds shared the two cores and the nodes suites
# started 40 minutes in. (Lowering a niceness needs root, as the lab does; without it
# they stay niced.)
for name in build-tofu build-provider-tests; do
  [ -z "${early[$name]:-}" ] || renice_tree 0 "${early[$name]}"
done
( for name in build-tofu build-provider-tests; do
    [ -z "${early[$name]:-}" ] || wait_for "$name" 2>/dev/null || true
  done
  for name in build-k8s build-node build-spire; do renice_tree 0 "${early[$name]}"; done ) &
# The sudo tests install Debian's sudo into a throwaway node (the image has none and
# the nodes reach no mirror); cached outside the clone, like the image.
sudo_debs=${FEDIVERSITY_CACHE:-/var/cache/fediversity}/lab-sudo
if ! ls "$sudo_debs"/sudo_*.deb >/dev/null 2>&1; then
  mkdir -p "$sudo_debs"
  (cd "$sudo_debs" && retry apt-get download sudo >/dev/null)
fi

# 3. Kubernetes (control plane, then the real node) and the lab's spire node, once built.
# A part that does not come up is taken down, its state wiped, and brought up once more
# from scratch: a whole CI run's Kubernetes and SPIRE suites must not be lost to one
# failed start (one was: kube-apiserver exited on a loaded start, beside every lab
# instance booting at once and the test builds), nor to state a part left behind. A
# build that failed is run once more the same way.
# The first attempt's log stays in this part's log.
part_up() { # part_up NAME RESET UP…: run UP; when it fails, RESET and run UP once more
  local name=$1 reset=$2; shift 2
  "$@" && return 0
  mark "$name did not come up (exit $?): taking it down and trying once more from scratch"
  bash -c "$reset" || true
  "$@"
}
built() { # built NAME SCRIPT: NAME's background build ended well, or SCRIPT, run once more, does
  wait_for "$1" && return 0
  mark "$1 failed: building once more"
  bash "$2" >/dev/null
}
k8s_parts_up() {
  built build-k8s lab/k8s/build.sh &&
    part_up "the kubernetes control plane" "bash lab/k8s/node-down.sh; bash lab/k8s/down.sh; rm -rf --one-file-system \"\${FEDIVERSITY_K8S_STATE:-/var/lib/fediversity-k8s}/pki\"" bash lab/k8s/up.sh &&
    mark "kubernetes control plane up" &&
    built build-node lab/k8s/node-build.sh &&
    part_up "the kubernetes real node" "bash lab/k8s/node-down.sh; rm -rf --one-file-system \"\${FEDIVERSITY_K8S_NODE_STATE:-/var/lib/fediversity-k8s-node}\"" bash lab/k8s/node-up.sh &&
    mark "kubernetes real node up" &&
    built build-spire lab/spire/build.sh &&
    part_up "the spire node" "bash lab/spire/down.sh" bash lab/spire/up.sh &&
    mark "spire node up"
}
background k8s-parts k8s_parts_up

if [ "$mode" = setup ]; then
  for part in build-tofu k8s-parts; do wait_for "$part"; done
  mark "setup done"
  exit 0
fi

# 4. The suites.
export FEDIVERSITY_LAB=1 FEDIVERSITY_K8S=1 FEDIVERSITY_K8S_NODE=1 FEDIVERSITY_SPIRE=1
go build -o "$logs/testsummary" ./tools/testsummary
suite() { # suite NAME BINARY CMD…: run one suite (CMD prints go test -json) and record it
  # BINARY: Terraform or OpenTofu for an acceptance suite, "" for the others.
  local name=$1 binary=$2; shift 2
  mark "start: $name"
  local rc=0
  "$logs/testsummary" run -suite "$name" -binary "$binary" -record "$logs/suites" -- "$@" >"$logs/suite-$name.log" 2>&1 || rc=$?
  mark "end:   $name: $(tail -1 "$logs/suite-$name.log")"
  # One suite's log at a time, whole, so that side-by-side suites do not interleave.
  flock "$logs/print.lock" sh -c 'printf "\n=== log of %s\n" "$1"; cat "$2"' _ "$name" "$logs/suite-$name.log"
  return $rc
}
blocked() { # blocked NAME PART [LOG]: record NAME as failed because PART could not be made
  # The end of PART's log goes into the record, so that the summary at the run's end
  # says why (CI may show only the end of the output).
  "$logs/testsummary" run -suite "$1" -record "$logs/suites" -- \
    sh -c 'echo "not run: $0 could not be brought up (its log is printed above)"; [ -z "$1" ] || tail -n 5 "$1"; exit 1' "$2" "${3:-}" >/dev/null 2>&1
  mark "end:   $1: not run, $2 failed"
}
# lab_env PREFIX PORT_BASE: point this (sub)shell at a lab of its own (nodes, state, ports).
lab_env() { export LAB_PREFIX=$1 LAB_PORT_BASE=$2 LAB_STATE=/var/lib/fediversity-lab-$1; }
# acc_run ACC_DIR SELECTION FLAGS…: run the selected acceptance tests, each package's
# with its binary from its directory, one package after the other, as one go test -json
# output (test2json); the exit status is 1 when any of them failed. SELECTION is
# "<binary>=<-test.run pattern>" words (acc_run_queue: one job's). -test.parallel=3: the tests
# themselves run one after the other; only those that mark themselves parallel (each on
# a node of its own, mostly waiting on it) run side by side, up to three, where the
# default (GOMAXPROCS, two here) would hold the third back. -test.timeout=85m is each
# binary's bound against a hang, under CI's 90 minutes.
acc_run() {
  local dir=$1 selection=$2 rc=0 word bin pattern pkg pkgdir; shift 2
  for word in $selection; do
    bin=${word%%=*} pattern=${word#*=}
    read -r pkg pkgdir < <(awk -v b="$bin" '{ n = split($1, p, "/"); if (p[n] ".test" == b) print }' "$dir/packages")
    (cd "$pkgdir" && go tool test2json -t -p "$pkg" "$dir/$bin" \
      -test.v=test2json -test.count=1 -test.timeout=85m -test.parallel=3 -test.run "$pattern" "$@") || rc=1
  done
  return $rc
}
export -f acc_run
# acc_list: every acceptance test, one "<binary> <test>" line each, listed once from the
# binaries into $logs/acc/tests (a binary with none, such as the kit's, lists nothing).
acc_list() {
  local bin dir tmp
  [ -f "$logs/acc/tests" ] && return 0
  tmp=$(mktemp "$logs/acc/tests.XXXXXX") # suites that start together may list at once
  for bin in "$logs/acc"/*.test; do
    dir=$(awk -v b="$(basename "$bin")" '{ n = split($1, p, "/"); if (p[n] ".test" == b) print $2 }' "$logs/acc/packages")
    # grep finds nothing in a binary without acceptance tests: that is not an error
    # (under set -e and pipefail it would end the listing there, and silently drop
    # every binary after it).
    (cd "$dir" && "$bin" -test.list '^TestAcc') | { grep '^TestAcc' || true; } | sed "s|^|$(basename "$bin") |"
  done >"$tmp"
  mv "$tmp" "$logs/acc/tests"
}
# acc_jobs: every job, one "<Terraform|OpenTofu> <binary> <test>" line each: every test
# under OpenTofu, and the tests of $COMPAT under Terraform too.
acc_jobs() {
  awk 'NR == FNR { if ($0 !~ /^[[:space:]]*(#|$)/) compat[$1]; next }
    { print "OpenTofu", $1, $2; if ($2 in compat) print "Terraform", $1, $2 }' "$COMPAT" "$logs/acc/tests"
}
# acc_queue: every job, longest first by its recorded wall time (tools/testsummary
# order), into $logs/acc/queue, one "<group> <Terraform|OpenTofu> <binary> <test>" line
# each: group "alone" for the jobs of $ALONE_TESTS, "k8s" for those of $K8S_TESTS,
# "nodes" for the others. The shards take their jobs from it (acc_run_queue).
acc_queue() {
  acc_jobs | "$logs/testsummary" order -durations "$DURATIONS" 2>>"$logs/queue.log" |
    awk -v alone="$ALONE_TESTS" -v k8s="$K8S_TESTS" '{
      print ($3 ~ alone ? "alone" : $3 ~ k8s ? "k8s" : "nodes"), $0 }' >"$logs/acc/queue"
}
# acc_run_queue ACC_DIR BINARY GROUPS: the shard's jobs under BINARY, one at a time,
# each taken from the queue's GROUPS (by preference) when the one before ended
# (testsummary take), until none is left for it; 1 when any failed.
acc_run_queue() {
  local dir=$1 binary=$2 groups=$3 rc=0 job bin test
  while :; do
    # ($dir/.. is $logs, where the run built testsummary.)
    job=$("$dir/../testsummary" take -queue "$dir/queue" -binary "$binary" -groups "$groups") || return 1
    [ -n "$job" ] || break
    read -r _ _ bin test <<<"$job"
    acc_run "$dir" "$bin=^($test)\$" || rc=1
  done
  return $rc
}
export -f acc_run_queue
# acceptance NAME BINARY GROUPS: acceptance tests with Terraform or OpenTofu (BINARY: the
# word) from the test binaries built once, taken from the queue's GROUPS.
acceptance() {
  local name=$1 binary=$2 groups=$3 path
  if [ "$binary" = Terraform ]; then
    path=$TERRAFORM
  else
    path=$(tofu_path) || { blocked "$name" OpenTofu "$logs/build-tofu.log"; return 1; }
    export TF_ACC_PROVIDER_NAMESPACE=fediversity TF_ACC_PROVIDER_HOST=registry.opentofu.org
  fi
  export TF_ACC=1 TF_ACC_TERRAFORM_PATH=$path FEDIVERSITY_CLI_PROVIDER_DIR=$logs/acc/cli-provider
  suite "$name" "$binary" bash -c 'acc_run_queue "$@"' _ "$logs/acc" "$binary" "$groups"
}
# shard NAME PREFIX PORT_BASE GROUPS: a shard's Terraform suite, then its OpenTofu suite,
# on a lab of its own (already up), each in a subshell of its own environment, each
# taking its jobs from the queue's GROUPS.
shard() {
  local name=$1 groups=$4 rc=0 binary
  lab_env "$2" "$3"
  for binary in Terraform OpenTofu; do
    # (No suite for a binary the queue holds no job of, for this shard, any more.)
    awk -v b="$binary" -v groups=" $groups " '$2 == b && index(groups, " " $1 " ") { found = 1; exit } END { exit !found }' "$logs/acc/queue" || continue
    ( acceptance "acceptance: $binary, $name" "$binary" "$groups" ) || rc=1
  done
  return $rc
}
# nodes_shard N OF: nodes shard N of OF on a lab of its own.
nodes_shard() {
  local prefix=fedn$1 name="nodes $1 of $2"
  lab_env "$prefix" $((4000 + 100 * $1))
  bash lab/lab.sh up >"$logs/lab-$prefix.log" 2>&1 || {
    blocked "acceptance: nodes shard $1 of $2" "lab $prefix" "$logs/lab-$prefix.log"; return 1; }
  shard "$name" "$prefix" $((4000 + 100 * $1)) nodes
}
# k8s_shard N OF: k8s and SPIRE shard N of OF, on a lab and spire node of its own.
k8s_shard() {
  local prefix=fedk$1 name="k8s and SPIRE $1 of $2"
  wait_for k8s-parts || { blocked "acceptance: k8s and SPIRE shard $1 of $2" "Kubernetes or SPIRE" "$logs/k8s-parts.log"; return 1; }
  lab_env "$prefix" $((5000 + 100 * $1))
  { bash lab/lab.sh up && part_up "spire node $prefix" "bash lab/spire/down.sh" bash lab/spire/up.sh; } >"$logs/lab-$prefix.log" 2>&1 || {
    blocked "acceptance: k8s and SPIRE shard $1 of $2" "lab $prefix" "$logs/lab-$prefix.log"; return 1; }
  shard "$name" "$prefix" $((5000 + 100 * $1)) "k8s nodes"
}
tofu_path() { wait_for build-tofu && tail -1 "$logs/build-tofu.log"; }

pids=()
if [ "$mode" = all ]; then
  # The unit suite starts once the acceptance test binaries are built: the nodes suites
  # are the run's longest, and its own compiling would take half the CPU from their
  # binaries' (it ends long before them all the same).
  ( wait_for build-provider-tests || true
    export LAB_PREFIX=${LAB_PREFIX:-fedi} # the default lab's (lab.sh), for the summary's CPU of its nodes
    # -timeout 75m: the bound against a hang, under CI's 90 minutes. The command's lab
    # tests (cmd/fediversity) run one after the other on the default lab, about 36
    # minutes on a loaded machine: the go test default of 10 minutes, and the 40 before
    # this, cut them.
    suite "unit and lab" "" go test -json -count=1 -timeout 75m $(go list ./... | grep -v -e '/internal/k8s$' -e '/internal/spire$') ) &
  pids+=($!)
  ( wait_for k8s-parts || { blocked "k8s and SPIRE lab" "Kubernetes or SPIRE" "$logs/k8s-parts.log"; exit 1; }
    export LAB_PREFIX=${LAB_PREFIX:-fedi}
    suite "k8s and SPIRE lab" "" go test -json -count=1 -timeout 40m ./internal/k8s/ ./internal/spire/ ) &
  pids+=($!)
fi
failed=0 nodes_shards=0 k8s_shards=0
if wait_for build-provider-tests; then
  acc_list
  # The shards: NODES_SHARDS nodes shards, which take the nodes jobs, and the k8s and
  # SPIRE shards, which take the k8s and SPIRE jobs first, then nodes jobs like the
  # others. When the parts were cached (a warm machine) the k8s and SPIRE shards start
  # within a minute of the nodes shards: two. When the parts are built in this run (a
  # cold machine) they come up late, and their own jobs are then the run's critical
  # path: four. The tests share the control plane and the real node already (each makes
  # a namespace of its own); each shard has a lab and a spire node of its own.
  nodes_shards=$NODES_SHARDS
  k8s_shards=${K8S_SHARDS:-$([ -z "$cold" ] && echo 2 || echo 4)}
  acc_queue
  # Every job is queued once, and every test of $COMPAT is listed: a queue that lost
  # jobs, or a compatibility set that names a test the binaries do not have, fails the
  # run here instead of passing with fewer tests.
  jobs=$(acc_jobs | wc -l)
  queued=$(sort -u "$logs/acc/queue" | wc -l)
  unknown=$(awk 'NR == FNR { listed[$2]; next } $0 !~ /^[[:space:]]*(#|$)/ && !($1 in listed) { print $1 }' "$logs/acc/tests" "$COMPAT" | tr '\n' ' ')
  if [ ! -s "$logs/acc/tests" ] || [ "$queued" -ne "$jobs" ] || [ -n "$unknown" ]; then
    blocked "acceptance: selection" "the acceptance test selection ($queued of $jobs jobs queued; in $COMPAT but not listed: ${unknown:-none})"
    failed=1
  fi
  mark "acceptance tests: $(wc -l <"$logs/acc/tests") listed; $jobs jobs ($(grep -c '^OpenTofu' < <(acc_jobs)) under OpenTofu, $(grep -c '^Terraform' < <(acc_jobs)) under Terraform), queued longest first for $nodes_shards nodes shard(s), $k8s_shards k8s and SPIRE shard(s), and alone"
  while read -r line; do mark "  queue: $line"; done <"$logs/queue.log"
else
  blocked "acceptance: nodes" "the acceptance test binaries" "$logs/build-provider-tests.log"
  failed=1
fi
for ((i = 1; i <= nodes_shards; i++)); do
  ( nodes_shard "$i" "$nodes_shards" ) &
  pids+=($!)
done
for ((i = 1; i <= k8s_shards; i++)); do
  ( k8s_shard "$i" "$k8s_shards" ) &
  pids+=($!)
done

for p in "${pids[@]}"; do wait "$p" || failed=1; done
# The tests that must have the machine to themselves, on the lab of the first nodes shard.
if grep -q '^alone ' "$logs/acc/queue" 2>/dev/null; then
  ( shard "alone" fedn1 4100 alone ) || failed=1
fi
# A job left in the queue is one no shard could take (the labs or parts of every shard
# that may run it never came up): it is said, and fails the run, which proved less than
# the queue held.
if [ -s "$logs/acc/queue" ]; then
  blocked "acceptance: not run ($(wc -l <"$logs/acc/queue") jobs)" "a shard for the jobs left in the queue" "$logs/acc/queue"
  failed=1
fi
if [ "$mode" = all ]; then
  wait_for lint && mark "make lint passed" || { mark "make lint failed"; cat "$logs/lint.log"; failed=1; }
fi
mark "done"
printf '\n=== timeline\n'
cat "$timeline"
"$logs/testsummary" report -durations "$DURATIONS" "$logs/suites" || failed=1
exit "$failed"
