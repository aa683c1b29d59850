#!/usr/bin/env bash
# `make test`: everything CI runs. Brings up what is missing (the Incus lab, OpenTofu, the
# Kubernetes control plane with kwok's fake node and a real node), then runs
#   1. go vet and every package's tests with the lab and the cluster enabled
#      (unit tests, fuzz seed corpora, lab tests against real incusd/sshd/nix/systemd);
#   2. the provider's acceptance tests (TF_ACC=1) with Terraform 1.11;
#   3. the same acceptance tests with OpenTofu;
# and ends with a summary of what each suite proved (tools/testsummary): passed, failed,
# skipped with each skip's reason, wall time, and a last line "N passed, N failed,
# N skipped". Every suite runs even when an earlier one failed; the run then fails.
#   bash lab/test.sh        all of it
#   bash lab/test.sh acc    only 2 and 3
#   bash lab/test.sh setup  only bring up what the tests need
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# This machine reaches no binary cache: tell nix not to ask one (each build otherwise
# spends seconds on a cache it cannot reach). The provider never changes nix settings.
export NIX_CONFIG="substituters =${NIX_CONFIG:+$'\n'$NIX_CONFIG}"
mode=${1:-all}
step() { printf '\n=== %s (%s)\n' "$*" "$(date +%T)"; }

# A TF_CLI_CONFIG_FILE naming a missing file only adds warnings to every run.
[ -f "${TF_CLI_CONFIG_FILE:-/nonexistent}" ] || unset TF_CLI_CONFIG_FILE

# On a cold machine the Go builds (OpenTofu, the Kubernetes binaries, the real node's
# runtime, SPIRE) take minutes of CPU while the lab image build mostly waits on the
# package mirror: run them side by side.
# Each is a no-op when its cache (keyed on versions, outside the clone) is present.
logs=$(mktemp -d)
step "building OpenTofu, the Kubernetes binaries, the real node and SPIRE in the background (cached: no-op)"
bash lab/build-tofu.sh >"$logs/tofu.out" 2>"$logs/tofu.err" &
tofu_build=$!
bash lab/k8s/build.sh >"$logs/k8s.out" 2>"$logs/k8s.err" &
k8s_build=$!
bash lab/k8s/node-build.sh >"$logs/node.out" 2>"$logs/node.err" &
node_build=$!
bash lab/spire/build.sh >"$logs/spire.out" 2>"$logs/spire.err" &
spire_build=$!
bash lab/build-goreleaser.sh >"$logs/goreleaser.out" 2>"$logs/goreleaser.err" &
goreleaser_build=$!
step "lab"
bash lab/lab.sh up >/dev/null
# The sudo tests install Debian's sudo into a throwaway node (the image has none and
# the nodes reach no mirror); cached outside the clone, like the image.
if ! ls /var/cache/fediversity/lab-sudo/sudo_*.deb >/dev/null 2>&1; then
  mkdir -p /var/cache/fediversity/lab-sudo
  (cd /var/cache/fediversity/lab-sudo && apt-get download sudo >/dev/null)
fi
step "opentofu"
wait "$tofu_build" || { cat "$logs/tofu.err" >&2; echo "OpenTofu build failed" >&2; exit 1; }
TOFU=$(tail -1 "$logs/tofu.out")
"$TOFU" version | head -1
step "kubernetes control plane"
wait "$k8s_build" || { tail -50 "$logs/k8s.err" >&2; echo "Kubernetes build failed" >&2; exit 1; }
bash lab/k8s/up.sh
step "goreleaser (for make release-snapshot)"
wait "$goreleaser_build" || { tail -50 "$logs/goreleaser.err" >&2; echo "goreleaser build failed" >&2; exit 1; }
tail -1 "$logs/goreleaser.out"
export FEDIVERSITY_K8S=1
export KUBE_CONFIG_PATH=${KUBE_CONFIG_PATH:-/var/lib/fediversity-k8s/kubeconfig}
step "kubernetes real node"
wait "$node_build" || { tail -50 "$logs/node.err" >&2; echo "real node build failed" >&2; exit 1; }
bash lab/k8s/node-up.sh
export FEDIVERSITY_K8S_NODE=1
step "spire node"
wait "$spire_build" || { tail -50 "$logs/spire.err" >&2; echo "SPIRE build failed" >&2; exit 1; }
bash lab/spire/up.sh
export FEDIVERSITY_SPIRE=1
if [ "$mode" = setup ]; then step "setup done"; exit 0; fi
export FEDIVERSITY_LAB=1
TERRAFORM=${TERRAFORM:-/usr/local/bin/terraform}

# One suite: its name in the summary, then the go test command (which must pass -json).
# A failed suite fails the run at the end, after the others ran and the summary printed.
go build -o "$logs/testsummary" ./tools/testsummary
failed=0
suite() {
  local name=$1; shift
  "$logs/testsummary" run -suite "$name" -record "$logs/suites" -- "$@" || failed=1
}

if [ "$mode" = all ]; then
  step "go vet"
  go vet ./...
  step "unit and lab tests"
  suite "unit and lab" go test -json -count=1 -timeout 40m ./...
fi

step "acceptance tests: Terraform ($("$TERRAFORM" version | head -1))"
TF_ACC=1 TF_ACC_TERRAFORM_PATH=$TERRAFORM \
  suite "acceptance: Terraform" go test -json -count=1 -timeout 40m ./internal/provider/

step "acceptance tests: OpenTofu ($("$TOFU" version | head -1))"
TF_ACC=1 TF_ACC_TERRAFORM_PATH=$TOFU TF_ACC_PROVIDER_NAMESPACE=fediversity TF_ACC_PROVIDER_HOST=registry.opentofu.org \
  suite "acceptance: OpenTofu" go test -json -count=1 -timeout 40m ./internal/provider/

step "done"
"$logs/testsummary" report "$logs/suites" || failed=1
exit "$failed"
