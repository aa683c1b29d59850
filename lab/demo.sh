#!/usr/bin/env bash
# `make demo`: the main job. Brings the lab up, builds the provider and OpenTofu, and runs
# `tofu apply` on examples/lab: it reads the sample submission, deploys the lab nodes
# (over SSH and over the Incus API) and prints each node's verdict.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# This machine reaches no binary cache: tell nix not to ask one (each build otherwise
# spends seconds on a cache it cannot reach). The provider never changes nix settings.
export NIX_CONFIG="substituters =
sandbox = false${NIX_CONFIG:+$'\n'$NIX_CONFIG}"
root=$PWD
bash lab/lab.sh up
TOFU=$(bash lab/build-tofu.sh)
go build -trimpath -o "$root/bin/terraform-provider-fediversity" .

work=$(mktemp -d /tmp/fediversity-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
cat >"$work/tofurc" <<RC
provider_installation {
  dev_overrides {
    "registry.opentofu.org/fediversity/fediversity" = "$root/bin"
  }
  direct {}
}
RC
export TF_CLI_CONFIG_FILE=$work/tofurc
# Per-run values reach the provider through the environment, never through variables
# that could land in state.
export SSH_PRIVATE_KEY_FILE=/var/lib/fediversity-lab/id_ed25519
export TF_DATA_DIR=$work/.terraform
cp -r examples/lab/. "$work/"
# Closures for the demo are built by the deployer's nix (no nixpkgs needed).
export FEDIVERSITY_REPO=$root
export TF_VAR_fediversity_repo=$root
cd "$work"
"$TOFU" apply -auto-approve -input=false
echo
echo "=== outputs"
"$TOFU" output
