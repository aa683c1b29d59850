#!/usr/bin/env bash
# Prints, for every shell script and command the provider sends to a node, the external
# commands it calls, and fails when one is neither in a default NixOS system
# (lab/nixos/default-commands; in a systemd unit, systemd's own commands only) nor named
# by an absolute path. The scripts are read from the Go source (tools/nodescripts), so a
# new one cannot escape. `make lint` runs it; so does the unit test of tools/nodescripts.
#   bash lab/nodescripts.sh        the report and the faults
#   bash lab/nodescripts.sh -q     the faults only
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./tools/nodescripts "$@"
