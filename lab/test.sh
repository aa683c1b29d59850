#!/usr/bin/env bash
# `make test`: everything CI runs. Brings up what is missing (the Incus lab, OpenTofu, the
# Kubernetes control plane with kwok's fake node and a real node, SPIRE), and runs every
# suite as soon as the parts it needs are up, side by side:
#
#   suite                                   needs                    lab (prefix, ports)
#   make lint (go vet, golangci-lint)       nothing                  -
#   unit and lab                            the lab                  fedi, 2200
#   acceptance: Terraform, nodes i of N     the lab                  fedtn<i>, 4000+100i
#   acceptance: OpenTofu, nodes i of N      the lab, OpenTofu        fedon<i>, 4500+100i
#   k8s and SPIRE lab                       + Kubernetes, SPIRE      fedi, 2200
#   acceptance: Terraform, k8s and SPIRE i  + Kubernetes, SPIRE      fedtk<i>, 5000+100i
#   acceptance: OpenTofu, k8s and SPIRE i   + Kubernetes, SPIRE      fedok<i>, 5500+100i
#   acceptance: Terraform/OpenTofu, alone   the lab, and no other    fedtn1/fedon1
#                                           suite running ($ALONE_TESTS: incusd restarts)
#
# The acceptance tests live in several packages (the provider's root and families under
# internal/provider, and test/ for the modules and examples), each built once into a test
# binary of its own, listed, and split in groups: those that need the cluster or SPIRE
# ($K8S_TESTS), and all the others (the nodes tests), dealt by name into $NODES_SHARDS
# shards per Terraform/OpenTofu binary (N, one per core beyond the first). A suite runs
# its tests of each package with that package's binary, from its directory (the tests
# read testdata/ by relative path), one after the other, as one output. The nodes tests mostly wait on their nodes (settle and watch windows), so on a
# machine with cores to spare shards side by side cut the wall time. Each acceptance suite has a lab of its own
# (its nodes, throwaway instances, ports and spire node), so suites that run at the same
# time never touch each other's nodes; the Kubernetes control plane and the real node
# are shared (every test makes a namespace of its own).
#
# The parts (OpenTofu, Kubernetes, the real node's runtime, SPIRE) are built
# in the background, each only when its version is not in /var/cache/fediversity. Every
# suite's output goes to its own log, printed whole when the suite ends; the run ends
# with the timeline and the summary of what each suite proved (tools/testsummary), whose
# last line is "N passed, N failed, N skipped". Every suite runs even when another one
# failed; the run then fails.
#
#   bash lab/test.sh        all of it
#   bash lab/test.sh acc    only the acceptance suites
#   bash lab/test.sh setup  only bring up what the tests need
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# This machine reaches no binary cache: tell nix not to ask one (each build otherwise
# spends seconds on a cache it cannot reach). The lab's stand-in systems are built by
# /bin/sh, which a build sandbox lacks: the sandbox is off. The provider never changes
# nix settings: the lab sets them here.
export NIX_CONFIG="substituters =
sandbox = false${NIX_CONFIG:+$'\n'$NIX_CONFIG}"
mode=${1:-all}
case "$mode" in all | acc | setup) ;; *) echo "usage: $0 [all|acc|setup]" >&2; exit 2 ;; esac

# The acceptance tests that need the Kubernetes control plane, the real node or SPIRE.
K8S_TESTS='^TestAcc(K8s|Image|ModuleK8s|Spire)'
# The tests that restart the one incusd every lab shares: they run alone, after the
# other suites, or they would cut the exec sessions of every test running beside them.
ALONE_TESTS='^TestAccNodeSwitchIncusdRestart$'
# One nodes shard per core beyond the first. On two cores one per binary: three were
# measured there (47m45s, the same as one, since the suites side by side use every
# core) and the CPU-starved nodes then broke the timing of the interrupt tests.
cores=$(nproc)
NODES_SHARDS=${NODES_SHARDS:-$((cores > 2 ? cores - 1 : 1))}
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

# 1. The lab (incusd, the node image, three nodes) at the run's priority, since every
# suite waits on it; beside it, at the lowest priority until the lab is up, the parts
# (each a no-op when its version is cached) and the acceptance test binary; the linters
# niced throughout. On a
# cold machine the image's debootstrap is one process among dozens of compilers: at equal
# priority it took 20 minutes instead of 4.
background lab bash lab/lab.sh up
mark "building the parts in the background (cached: no-op)"
export FEDIVERSITY_BUILD_NICE=0
declare -A early=()
background_early() { # background_early NAME CMD…: as background, niced to 19 until the lab is up
  local name=$1; shift
  background "$name" nice -n 19 "$@"; early[$name]=$!
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
# the acceptance test binaries and OpenTofu. The Kubernetes, real node and SPIRE parts
# stay niced until both are built, as their suites are shorter: on a cold machine, at
# equal priority, the four builds shared the two cores and the nodes suites started
# 40 minutes in. (Lowering a niceness needs root, as the lab does; without it they stay
# niced.)
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
  (cd "$sudo_debs" && apt-get download sudo >/dev/null)
fi

# 3. Kubernetes (control plane, then the real node) and the lab's spire node, once built.
# A part that does not come up is taken down, its state wiped, and brought up once more
# from scratch: a whole CI run's Kubernetes and SPIRE suites must not be lost to one
# failed start (one was: kube-apiserver exited on a loaded start, beside every lab
# instance booting at once and the test builds), nor to state a part left behind. A build that failed (a module download cut off) is run once more the same way.
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
suite() { # suite NAME CMD…: run one suite (CMD prints go test -json) and record it
  local name=$1; shift
  mark "start: $name"
  local rc=0
  "$logs/testsummary" run -suite "$name" -record "$logs/suites" -- "$@" >"$logs/suite-$name.log" 2>&1 || rc=$?
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
# output (test2json); the exit status is 1 when any of them failed. SELECTION is what
# acc_select prints: "<binary>=<-test.run pattern>" words. -test.parallel=3: the tests
# themselves run one after the other; only the subtests that mark themselves parallel
# (each on a node of its own, mostly waiting on it) run side by side, up to three, where
# the default (GOMAXPROCS, two here) would hold the third back. -test.timeout=85m is
# each binary's bound against a hang, under CI's 90 minutes: the node package's tests
# alone took about an hour on a loaded machine.
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
# acc_select INCLUDE EXCLUDE SHARDS: the acceptance tests of every binary whose names
# match INCLUDE and not EXCLUDE (extended regexps; EXCLUDE may be empty), dealt by name
# round-robin into SHARDS selections, one per line, each "<binary>=^(A|B)$ …" for the
# binaries that got a test (the same deal as one binary's, across the packages).
acc_select() {
  acc_list
  awk -v inc="$1" -v exc="$2" -v n="$3" '
    $2 ~ inc && (exc == "" || $2 !~ exc) { i = k++ % n; t[i, $1] = t[i, $1] (t[i, $1] == "" ? "" : "|") $2; if (!((i, $1) in seen)) { seen[i, $1]; b[i] = b[i] " " $1 } }
    END { for (i = 0; i < n && i < k; i++) { line = ""; m = split(substr(b[i], 2), bs, " ")
      for (j = 1; j <= m; j++) line = line (j > 1 ? " " : "") bs[j] "=^(" t[i, bs[j]] ")$"; print line } }' "$logs/acc/tests"
}
# acc_count SELECTION…: how many tests the selections name.
acc_count() { printf '%s\n' "$@" | tr ' ' '\n' | sed -n 's/^[^=]*=^(\(.*\))\$$/\1/p' | tr '|' '\n' | grep -c . || true; }
# acceptance NAME BINARY SELECTION: acceptance tests with Terraform or OpenTofu (BINARY)
# from the test binaries built once.
acceptance() {
  local name=$1 bin=$2 selection=$3
  wait_for build-provider-tests || { blocked "$name" "the acceptance test binaries" "$logs/build-provider-tests.log"; return 1; }
  export TF_ACC=1 TF_ACC_TERRAFORM_PATH=$bin FEDIVERSITY_CLI_PROVIDER_DIR=$logs/acc/cli-provider
  if [ "$bin" != "$TERRAFORM" ]; then
    export TF_ACC_PROVIDER_NAMESPACE=fediversity TF_ACC_PROVIDER_HOST=registry.opentofu.org
  fi
  suite "$name" bash -c 'acc_run "$@"' _ "$logs/acc" "$selection"
}
# nodes_suite NAME BINARY PREFIX PORT_BASE SELECTION: nodes tests on a lab of their own.
nodes_suite() {
  lab_env "$3" "$4"
  bash lab/lab.sh up >"$logs/lab-$3.log" 2>&1 || { blocked "$1" "lab $3" "$logs/lab-$3.log"; return 1; }
  acceptance "$1" "$2" "$5"
}
# k8s_suite NAME BINARY PREFIX PORT_BASE SELECTION: acceptance tests that need Kubernetes
# and SPIRE, on a lab and spire node of their own.
k8s_suite() {
  wait_for k8s-parts || { blocked "$1" "Kubernetes or SPIRE" "$logs/k8s-parts.log"; return 1; }
  lab_env "$3" "$4"
  { bash lab/lab.sh up && part_up "spire node $3" "bash lab/spire/down.sh" bash lab/spire/up.sh; } >"$logs/lab-$3.log" 2>&1 || { blocked "$1" "lab $3" "$logs/lab-$3.log"; return 1; }
  acceptance "$1" "$2" "$5"
}
tofu_path() { wait_for build-tofu && tail -1 "$logs/build-tofu.log"; }

pids=()
if [ "$mode" = all ]; then
  # The unit suite starts once the acceptance test binaries are built: the nodes suites
  # are the run's longest, and its own compiling would take half the CPU from their
  # binaries' (it ends long before them all the same).
  ( wait_for build-provider-tests || true
    suite "unit and lab" go test -json -count=1 -timeout 40m $(go list ./... | grep -v -e '/internal/k8s$' -e '/internal/spire$') ) &
  pids+=($!)
  ( wait_for k8s-parts || { blocked "k8s and SPIRE lab" "Kubernetes or SPIRE" "$logs/k8s-parts.log"; exit 1; }
    suite "k8s and SPIRE lab" go test -json -count=1 -timeout 40m ./internal/k8s/ ./internal/spire/ ) &
  pids+=($!)
fi
failed=0
if wait_for build-provider-tests; then
  acc_list
  mapfile -t shards < <(acc_select '^TestAcc' "$K8S_TESTS|$ALONE_TESTS" "$NODES_SHARDS")
  # The k8s and SPIRE tests in K8S_SHARDS shards per binary. When the Kubernetes, real
  # node and SPIRE parts are built by now (they were cached: a warm machine), their
  # suites start within a minute and end long before the nodes suites: one shard each.
  # When they are still building (a cold machine), they come up about 45 minutes in and
  # their suites, the tests one after the other (10 to 11 minutes per binary), are then
  # the run's critical path: two shards each, side by side. The tests share the control
  # plane and the real node already (each makes a namespace of its own; the binaries'
  # suites run side by side), and each shard has a lab and a spire node of its own.
  parts_built=1
  for part in build-k8s build-node build-spire; do [ -f "$logs/$part.rc" ] || parts_built=0; done
  k8s_shards=${K8S_SHARDS:-$((parts_built ? 1 : 2))}
  mapfile -t k8s_shard_tests < <(acc_select "$K8S_TESTS" "" "$k8s_shards")
  alone=$(acc_select "$ALONE_TESTS" "" 1)
  # Every acceptance test the binaries list is in exactly one suite; a selection that
  # lost tests fails the run here instead of passing with fewer tests.
  listed=$(wc -l <"$logs/acc/tests")
  selected=$(( $(acc_count "${shards[@]}") + $(acc_count "$alone") + $(acc_count "$(acc_select "$K8S_TESTS" "" 1)") ))
  if [ "$listed" -eq 0 ] || [ "$selected" -ne "$listed" ]; then
    blocked "acceptance: selection" "the acceptance test selection ($selected of $listed tests selected)"
    failed=1
  fi
  mark "acceptance tests: $listed listed, in ${#shards[@]} nodes shard(s), ${#k8s_shard_tests[@]} k8s and SPIRE shard(s), and alone"
else
  shards=() alone="" k8s_shard_tests=()
  blocked "acceptance: nodes" "the acceptance test binaries" "$logs/build-provider-tests.log"
  failed=1
fi
for i in "${!shards[@]}"; do
  n=$((i + 1)) of=" of ${#shards[@]}"
  ( nodes_suite "acceptance: Terraform, nodes $n$of" "$TERRAFORM" "fedtn$n" $((4000 + 100 * n)) "${shards[$i]}" ) &
  pids+=($!)
  ( tofu=$(tofu_path) || { blocked "acceptance: OpenTofu, nodes $n$of" OpenTofu "$logs/build-tofu.log"; exit 1; }
    nodes_suite "acceptance: OpenTofu, nodes $n$of" "$tofu" "fedon$n" $((4500 + 100 * n)) "${shards[$i]}" ) &
  pids+=($!)
done
for i in "${!k8s_shard_tests[@]}"; do
  n=$((i + 1)) of=" $((i + 1)) of ${#k8s_shard_tests[@]}"
  ( k8s_suite "acceptance: Terraform, k8s and SPIRE$of" "$TERRAFORM" "fedtk$n" $((5000 + 100 * n)) "${k8s_shard_tests[$i]}" ) &
  pids+=($!)
  ( tofu=$(tofu_path) || { blocked "acceptance: OpenTofu, k8s and SPIRE$of" OpenTofu "$logs/build-tofu.log"; exit 1; }
    k8s_suite "acceptance: OpenTofu, k8s and SPIRE$of" "$tofu" "fedok$n" $((5500 + 100 * n)) "${k8s_shard_tests[$i]}" ) &
  pids+=($!)
done

for p in "${pids[@]}"; do wait "$p" || failed=1; done
# The tests that must have the machine to themselves, with each binary in turn, on the
# labs of the first nodes shards.
( lab_env fedtn1 4100; acceptance "acceptance: Terraform, alone" "$TERRAFORM" "$alone" ) || failed=1
( tofu=$(tofu_path) || { blocked "acceptance: OpenTofu, alone" OpenTofu "$logs/build-tofu.log"; exit 1; }
  lab_env fedon1 4600; acceptance "acceptance: OpenTofu, alone" "$tofu" "$alone" ) || failed=1
if [ "$mode" = all ]; then
  wait_for lint && mark "make lint passed" || { mark "make lint failed"; cat "$logs/lint.log"; failed=1; }
fi
mark "done"
printf '\n=== timeline\n'
cat "$timeline"
"$logs/testsummary" report "$logs/suites" || failed=1
exit "$failed"
